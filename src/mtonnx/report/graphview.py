"""ONNX graphs in netron: interactive in JupyterLab, and as PNG/SVG files rendered by netron itself.

Static rendering drives Debian's Chromium (never a downloaded browser) with Playwright. Why each step:
- Playwright's sync API cannot run inside Jupyter's event loop, so `render` runs in a subprocess
  (`python -m mtonnx.report.graphview`) in its own process group, killed whole on timeout: no netron or
  Chromium outlives it;
- netron shows a cookie dialog unless a `consent` cookie is set; it replaces `window.eval`, which
  Playwright's evaluate needs, unless an init script keeps the original; its content-security policy
  needs `bypass_csp`; it calls an analytics host, so every request off the loopback server is aborted;
- netron refuses to run once its build date is 180 days old, so the page's build-date meta tag is
  blanked as it is served (netron then takes "now"), which keeps a pinned netron working;
- the graph is laid out in a worker: we wait for its node elements, then netron's own export writes
  the file (a download).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mtonnx.foundation.ports import free_port
from mtonnx.foundation.side_by_side import per_core

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Keep the real eval reachable: netron assigns a throwing stub, which the setter ignores.
KEEP_EVAL = """
(() => { const original = window.eval;
  Object.defineProperty(window, 'eval', { get: () => original, set: () => {}, configurable: false }); })();
"""
BUILD_DATE = re.compile(r'<meta name="date" content="[^"]*"\s*/?>')
# Laid out: netron shows its 'default' page, nodes exist and the drawing has a real size (under load, nodes
# appear before the layout is applied, and exporting then yields a blank picture).
READY = """() => {
  const canvas = document.getElementById('canvas');
  const nodes = document.querySelectorAll('#canvas g.node').length;
  const box = canvas && nodes ? canvas.getBBox() : null;
  return document.body.classList.contains('default') && box && box.width > 50 && box.height > 50 ? nodes : 0;
}"""


class GraphViewError(RuntimeError):
    """Rendering could not be done; str() says why and what to do (`session`: the renderer's, if it started)."""

    def __init__(self, message: str, session: int | None = None):
        super().__init__(message)
        self.session = session


def find_chromium() -> str | None:
    """The system Chromium, if installed (Debian's package is `chromium`)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


# The interactive view's policy: the page may load and talk to the loopback server only (no analytics, no fonts
# or scripts from elsewhere).
LOOPBACK_ONLY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' "
    "'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
    "worker-src 'self' blob:"
)
_SERVERS: dict[tuple[str, int], tuple[Any, tuple[str, int]]] = {}


def start_interactive(path: str | Path, port: int | None = None) -> tuple[str, int]:
    """Serve one graph with netron on the loopback interface for an IFrame; returns (host, port).

    The IFrame talks to a small proxy in front of netron's server that serves netron's page the way the static
    renderer does: build date blanked (an aged netron build keeps working), the analytics-consent cookie set, and
    a content-security policy that lets the page reach the loopback server only (no usage is reported).
    """
    import http.server
    import threading
    import urllib.request

    import netron

    path = _existing(path)
    upstream = ("127.0.0.1", free_port())
    netron.start(str(path), address=upstream, browse=False)
    base = f"http://{upstream[0]}:{upstream[1]}"

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            try:
                with urllib.request.urlopen(base + self.path, timeout=30) as response:
                    body, status, kind = response.read(), response.status, response.headers.get("Content-Type", "")
            except urllib.error.HTTPError as err:
                body, status, kind = err.read(), err.code, err.headers.get("Content-Type", "")
            if kind.startswith("text/html"):
                body = BUILD_DATE.sub('<meta name="date" content="">', body.decode("utf-8")).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", LOOPBACK_ONLY)
            self.send_header("Set-Cookie", f"consent={int(time.time() * 1000)}; Path=/; SameSite=Lax")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: the notebook is not a server log
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port or 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = server.server_address[:2]
    _SERVERS[address] = (server, upstream)
    return address


def stop_interactive(address: tuple[str, int]) -> None:
    """Stop the proxy and the netron server `start_interactive` started."""
    import netron

    server, upstream = _SERVERS.pop(tuple(address))
    server.shutdown()
    server.server_close()
    netron.stop(upstream)


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise GraphViewError(f"{path}: no such ONNX file")
    return path


def render(
    path: str | Path,
    out_dir: str | Path,
    formats: tuple[str, ...] = ("png", "svg"),
    timeout_s: float = 180,
    fake_now: dt.datetime | None = None,
    keep_build_date: bool = False,
) -> dict[str, Any]:
    """Render `path` with netron into `out_dir/<stem>.<format>`; returns {"file", "images", "seconds", "session"}
    (the renderer's session id: every process it started belongs to it and is gone when this returns).

    `fake_now` sets the browser's clock (to check that an aged netron build still renders);
    `keep_build_date` serves netron's page unmodified (to show that it would not).
    """
    path = _existing(path)
    chromium = find_chromium()
    if chromium is None:
        raise GraphViewError("Chromium is not installed (Debian: `apt-get install chromium`); graphs not rendered")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "mtonnx.report.graphview",
        str(path),
        str(out_dir),
        "--chromium",
        chromium,
        "--formats",
        ",".join(formats),
        "--timeout",
        str(timeout_s),
    ]
    if fake_now:
        command += ["--fake-now", fake_now.isoformat()]
    if keep_build_date:
        command.append("--keep-build-date")
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s + 30)
    except subprocess.TimeoutExpired:
        raise GraphViewError(f"netron did not render {path.name} within {timeout_s:.0f} s", process.pid) from None
    finally:
        kill_session(process)
    if process.returncode != 0:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit {process.returncode}"
        raise GraphViewError(f"rendering {path.name} failed: {last}", process.pid)
    return {**json.loads(stdout.strip().splitlines()[-1]), "session": process.pid}


def render_all(
    jobs: dict[str, tuple[str | Path, str | Path]], formats: tuple[str, ...] = ("png", "svg")
) -> dict[str, dict[str, Any] | GraphViewError]:
    """`render` of each {name: (onnx path, out_dir)}, one renderer per core (each its own process and browser), in
    the order given: {name: render's result, or the GraphViewError that says why that graph was not drawn}."""

    def one(name: str) -> dict[str, Any] | GraphViewError:
        try:
            return render(*jobs[name], formats=formats)
        except GraphViewError as err:
            return err

    return dict(zip(jobs, per_core(one, jobs)))


def kill_session(process: subprocess.Popen) -> None:
    """End the renderer and everything it started (netron's server, Chromium and its helpers).

    The renderer leads its own session; Chromium's helpers may leave its process group but not the
    session, so every process of that session is killed, and we wait until none is left.
    """
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        members = [p for p in psutil.process_iter() if _session(p.pid) == process.pid]
        for member in members:
            try:
                member.kill()
            except psutil.Error:
                pass
        process.poll()
        psutil.wait_procs(members, timeout=1)
        if not members:
            break
    process.wait()


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _render_here(
    path: Path,
    out_dir: Path,
    chromium: str,
    formats: list[str],
    timeout_s: float,
    fake_now: str | None,
    keep_build_date: bool,
) -> dict[str, Any]:
    """The subprocess side: netron server + Playwright-driven Chromium + netron's own export."""
    import netron
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    address = ("127.0.0.1", free_port())
    base = f"http://{address[0]}:{address[1]}/"
    netron.start(str(path), address=address, browse=False)
    images = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
            context = browser.new_context(
                bypass_csp=True, accept_downloads=True, viewport={"width": 1600, "height": 1200}
            )
            context.add_cookies([{"name": "consent", "value": str(int(time.time() * 1000)), "url": base}])
            context.add_init_script(KEEP_EVAL)
            context.route("**/*", lambda route: _route(route, base, keep_build_date))
            page = context.new_page()
            if fake_now:
                page.clock.set_system_time(dt.datetime.fromisoformat(fake_now))
            page.goto(base)
            try:
                page.wait_for_function(READY, timeout=timeout_s * 1000)
            except Exception:
                message = (
                    page.locator("#message-text").inner_text(timeout=1000)
                    if page.locator("#message-text").count()
                    else ""
                )
                raise GraphViewError(f"netron showed no graph{f': {message!r}' if message else ''}") from None
            previous = -1
            while (count := page.evaluate(READY)) != previous:  # until the node count holds still
                previous = count
                page.wait_for_timeout(300)
            for fmt in formats:
                with page.expect_download(timeout=timeout_s * 1000) as download:
                    page.evaluate(f"window.__view__.export('{path.stem}.{fmt}')")
                target = out_dir / f"{path.stem}.{fmt}"
                download.value.save_as(target)
                images.append(str(target))
            browser.close()
    finally:
        netron.stop(address)
    return {"file": str(path), "images": images, "seconds": round(time.perf_counter() - start, 2)}


def _route(route, base: str, keep_build_date: bool) -> None:
    """Only the loopback server is reachable; its HTML is served with the build date blanked."""
    request = route.request
    if not request.url.startswith(base):
        route.abort()
    elif request.resource_type == "document" and not keep_build_date:
        response = route.fetch()
        route.fulfill(response=response, body=BUILD_DATE.sub('<meta name="date" content="">', response.text()))
    else:
        route.continue_()


def main(argv: list[str] | None = None) -> int:
    """The renderer subprocess: render one graph, print the result as JSON (exit 1 on failure)."""
    parser = argparse.ArgumentParser(
        prog="python -m mtonnx.report.graphview", description="render an ONNX graph with netron"
    )
    parser.add_argument("path", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--formats", default="png,svg")
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--fake-now")
    parser.add_argument("--keep-build-date", action="store_true")
    args = parser.parse_args(argv)
    try:
        result = _render_here(
            args.path,
            args.out_dir,
            args.chromium,
            args.formats.split(","),
            args.timeout,
            args.fake_now,
            args.keep_build_date,
        )
    except GraphViewError as err:
        print(err, file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
