"""A report page as a reviewer's browser shows it: Debian's Chromium, driven by Playwright, at 1400 x 900.

`inspect_page` opens an HTML file and returns what a reviewer would trip over: images that did not load, local
links to files that do not exist, where the named elements sit (are they inside the first screen?), and how its
Chinese is drawn: how many CJK characters the page's text holds and the fonts Chromium actually drew the first of
them with (a missing CJK font draws boxes, in a font that holds no CJK glyphs). It also saves a screenshot of the
first screen (the runner saves `report.png` next to index.html). It runs in a
subprocess, as notebook 04's netron renders do (report.graphview): Playwright's sync API cannot run inside an
event loop, and the subprocess's whole session is killed when it ends, so no Chromium outlives it. Only file://
requests are served; any other request is aborted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mtonnx.report.graphview import CHROMIUM_ARGS, GraphViewError, find_chromium, kill_session

VIEWPORT = {"width": 1400, "height": 900}
PROBE = """(ids) => ({
  images: [...document.images].map(i => ({src: i.getAttribute("src"), ok: i.complete && i.naturalWidth > 0})),
  links: [...document.querySelectorAll("a[href]")].map(a => a.getAttribute("href")),
  boxes: Object.fromEntries(ids.map(id => { const e = document.getElementById(id);
    if (!e) return [id, null]; const r = e.getBoundingClientRect();
    return [id, {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY, height: r.height}]; })),
  cjk: (document.body.innerText.match(/[\u3400-\u9fff]/g) || []).length,
})"""
CJK_MARK = "data-mtonnx-cjk"
# Marks the element holding the first visible CJK text, so the fonts drawing it can be asked for (CSS domain).
MARK_CJK = """(mark) => { const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const e = n.parentElement;
    if (/[\u3400-\u9fff]/.test(n.nodeValue) && e.getClientRects().length) { e.setAttribute(mark, ""); return true; }
  }
  return false; }"""


def inspect_page(
    html: str | Path,
    ids: tuple[str, ...] = ("verdict", "variants"),
    screenshot: str | Path | None = None,
    timeout_s: float = 60,
) -> dict[str, Any]:
    """Open `html` in Chromium: broken images and links, the boxes of `ids`, whether each is within the first
    screen, and (with `screenshot`) a PNG of that screen. GraphViewError when Chromium is missing or fails."""
    chromium = find_chromium()
    if chromium is None:
        raise GraphViewError("Chromium is not installed (Debian: `apt-get install chromium`)")
    command = [
        sys.executable,
        "-m",
        "mtonnx.lab.browser",
        str(Path(html).resolve()),
        "--chromium",
        chromium,
        "--ids",
        ",".join(ids),
        *(["--screenshot", str(screenshot)] if screenshot else []),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise GraphViewError(f"Chromium did not load {html} within {timeout_s:.0f} s") from None
    finally:
        kill_session(process)
    if process.returncode != 0:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        raise GraphViewError(f"opening {html} failed: {lines[-1] if lines else f'exit {process.returncode}'}")
    return json.loads(stdout.strip().splitlines()[-1])


def _inspect_here(html: Path, chromium: str, ids: list[str], screenshot: str | None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.route(
            "**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort()
        )
        page.goto(html.as_uri(), wait_until="load")
        found = page.evaluate(PROBE, ids)
        found["cjk_fonts"] = _cjk_fonts(page) if page.evaluate(MARK_CJK, CJK_MARK) else []
        if screenshot:
            page.screenshot(path=screenshot, full_page=False)
        browser.close()
    local = [link.split("#")[0] for link in found["links"] if link and "://" not in link and not link.startswith("#")]
    return {
        "broken_images": [i["src"] for i in found["images"] if not i["ok"]],
        "broken_links": sorted({link for link in local if link and not (html.parent / link).exists()}),
        "boxes": found["boxes"],
        "first_screen": {id_: bool(box) and box["bottom"] <= VIEWPORT["height"] for id_, box in found["boxes"].items()},
        "cjk_characters": found["cjk"],
        "cjk_fonts": found["cjk_fonts"],
        "screenshot": screenshot,
    }


def _cjk_fonts(page) -> list[str]:
    """The font families Chromium drew the marked element's text with (DevTools' CSS.getPlatformFontsForNode): what
    the screen shows, where document.fonts.check() answers true for any font it has no face of."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": f"[{CJK_MARK}]"})["nodeId"]
    return [font["familyName"] for font in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]]


def main(argv: list[str] | None = None) -> int:
    """The subprocess: inspect one page, print the result as JSON (exit 1 with one line on failure)."""
    parser = argparse.ArgumentParser(prog="python -m mtonnx.lab.browser", description="inspect a report page")
    parser.add_argument("html", type=Path)
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--ids", default="verdict,variants")
    parser.add_argument("--screenshot")
    args = parser.parse_args(argv)
    try:
        result = _inspect_here(args.html, args.chromium, [i for i in args.ids.split(",") if i], args.screenshot)
    except Exception as err:  # the browser's own failure, reported in one line to the parent
        print(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
