"""`mtonnx serve --web`: the web export's page at /web/, beside the API, under the cross-origin isolation headers
that let its WASM run on several threads. The page and its files are public, as /health is: they hold the model a
visitor's browser runs, and no request to the API."""

from __future__ import annotations

from pathlib import Path

from starlette.staticfiles import StaticFiles

from mtonnx.web.export import ISOLATION_HEADERS, MANIFEST

MOUNT = "/web"


class IsolatedFiles(StaticFiles):
    """Static files, each answer with the isolation headers."""

    async def get_response(self, path, scope):
        """The file's answer, with ISOLATION_HEADERS."""
        response = await super().get_response(path, scope)
        response.headers.update(ISOLATION_HEADERS)
        return response


def page_dir(model_dir: str | Path) -> Path:
    """The model directory's web export (deploy/web) when it holds the page; ValueError saying how to make it."""
    web = Path(model_dir) / "web"
    if not (web / MANIFEST).is_file() or not (web / "index.html").is_file():
        raise ValueError(
            f"{web} holds no web page: make it with `mtonnx export-web RUN_DIR` (after `make js`), then serve again"
        )
    return web


def mount_page(app, web: Path) -> None:
    """Serve `web` at MOUNT, index.html at MOUNT/."""
    app.mount(MOUNT, IsolatedFiles(directory=web, html=True), name="web")
