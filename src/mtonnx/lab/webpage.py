"""The web export's page in Chromium: served from a local port, offline, driven by Playwright.

`PageSession` serves a web export's directory (stdlib http.server, with the cross-origin isolation headers when
asked: WASM threads need them), opens index.html in Debian's Chromium with every request off that port aborted
(the page must load offline), waits for the model, and then answers requests to the page's `window.mtonnx` one at
a time: ids and translations, each with the seconds it took in the page. The browser runs in a subprocess, as
`lab.browser`'s does: Playwright's sync API cannot run inside a notebook's event loop, and the subprocess's whole
session is killed when it ends, so no Chromium outlives it. JSON lines go both ways, as with the Node runtime
(mtonnx.web.node), so a study can interleave the page with the other runtimes.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mtonnx.foundation.jsonlines import JsonLinesProcess
from mtonnx.report.graphview import CHROMIUM_ARGS, GraphViewError, find_chromium, kill_session
from mtonnx.web.export import ISOLATION_HEADERS

TYPES = {".mjs": "text/javascript", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}


class StaticHandler(SimpleHTTPRequestHandler):
    """Files of one directory, with module and WASM types (and the isolation headers when `isolated`)."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **TYPES}
    isolated = False

    def end_headers(self) -> None:
        """The isolation headers before the blank line, when asked for."""
        if self.isolated:
            for name, value in ISOLATION_HEADERS.items():
                self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the page's requests are not the caller's output."""


def serve_directory(directory: str | Path, isolated: bool = False) -> ThreadingHTTPServer:
    """A started server of `directory` on a free loopback port (server.server_address), on a daemon thread."""
    handler = type("Handler", (StaticHandler,), {"isolated": isolated})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class PageSession(JsonLinesProcess):
    """The page of a web export, loaded in Chromium (a subprocess), as a context manager: `generate` asks it.

    `load_s` is how long the page took from navigation to a loaded model; `isolated` whether it was cross-origin
    isolated (WASM on several threads). `dtype` opens the page on another precision of the export (?dtype=)."""

    failure = GraphViewError

    def __init__(self, web_dir: str | Path, isolated: bool = False, dtype: str | None = None):
        if find_chromium() is None:
            raise GraphViewError("Chromium is not installed: apt-get install chromium")
        command = [sys.executable, "-m", "mtonnx.lab.webpage", str(web_dir), *(["--isolated"] if isolated else [])]
        command += ["--dtype", dtype] if dtype else []
        super().__init__(command, new_session=True)
        ready = self.answer()
        self.load_s, self.isolated = ready["load_s"], ready["isolated"]

    def close(self) -> None:
        """Close the page and end the subprocess's whole session (no Chromium outlives it)."""
        if self.process.poll() is None:
            self.process.stdin.close()
        kill_session(self.process)

    def generate(self, texts: list[str], num_beams: int | None = None, max_new_tokens: int | None = None):
        """(ids, translations, seconds in the page) of texts, in batches of 8 as the Node runtime's."""
        answer = self.ask({"texts": texts, "num_beams": num_beams, "max_new_tokens": max_new_tokens})
        return answer["ids"], answer["texts"], answer["seconds"]


def _serve_requests(web_dir: Path, isolated: bool, dtype: str | None) -> None:
    """The subprocess: load the page, print its readiness, then answer each stdin line."""
    from playwright.sync_api import sync_playwright

    server = serve_directory(web_dir, isolated)
    origin = f"http://127.0.0.1:{server.server_address[1]}/"
    errors: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=find_chromium(), headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(origin) else r.abort())
            page.on("pageerror", lambda error: errors.append(str(error)))
            start = time.perf_counter()
            page.goto(origin + "index.html" + (f"?dtype={dtype}" if dtype else ""))
            page.wait_for_function("window.mtonnx !== undefined")
            page.evaluate("window.mtonnx.ready.then(() => true)")
            ready = {"load_s": round(time.perf_counter() - start, 3), "isolated": page.evaluate("crossOriginIsolated")}
            print(json.dumps(ready), flush=True)
            for line in sys.stdin:
                request = json.loads(line)
                options = {"numBeams": request.get("num_beams"), "maxNewTokens": request.get("max_new_tokens")}
                answer = page.evaluate(GENERATE, [request["texts"], options])
                if errors:
                    answer = {"error": errors[0]}
                print(json.dumps(answer, ensure_ascii=False), flush=True)
            browser.close()
    finally:
        server.shutdown()


# Ids and their translations of texts, timed in the page (performance.now), as the Node runtime gives them.
GENERATE = """async ([texts, options]) => {
  const translator = await window.mtonnx.ready;
  const start = performance.now();
  const ids = await translator.generateAll(texts, options);
  const seconds = (performance.now() - start) / 1000;
  return { ids, texts: ids.map((row) => translator.tokenizer.decode(row)), seconds };
}"""


def main(argv: list[str] | None = None) -> int:
    """`python -m mtonnx.lab.webpage WEB_DIR [--isolated] [--dtype DTYPE]`: JSON lines on stdin, answers on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("web_dir")
    parser.add_argument("--isolated", action="store_true", help="serve with the cross-origin isolation headers")
    parser.add_argument("--dtype", help="the export's precision to load (default: the one web.json ships)")
    args = parser.parse_args(argv)
    _serve_requests(Path(args.web_dir), args.isolated, args.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
