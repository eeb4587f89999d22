"""The JavaScript runtime (js/) driven from Python: one Node process per web export, JSON lines both ways.

Tests, the pipeline and lesson 13 ask it for ids (`encode`) and translations (`generate`) and hold them against the
Python runtime's. The runtime lives in the checkout's js/ with its pinned packages (`make js`: npm ci);
`unavailable()` says why it cannot run here, so a caller can skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from mtonnx.foundation.jsonlines import JsonLinesProcess

JS_DIR_ENV = "MTONNX_JS_DIR"  # where js/ is, for a checkout laid out differently
NODE_MAJOR = 20  # package.json's engines: node >= 20


def js_dir() -> Path:
    """The checkout's js/ (src/mtonnx/web/node.py -> the repository root), or MTONNX_JS_DIR."""
    return Path(os.environ.get(JS_DIR_ENV) or Path(__file__).resolve().parents[3] / "js")


def unavailable() -> str | None:
    """Why the JavaScript runtime cannot run here (no node, an old one, js/ or its packages missing), else None."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed (Node.js >= 20: apt-get install nodejs)"
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < NODE_MAJOR:
        return f"node {version} is older than {NODE_MAJOR}"
    if not (js_dir() / "src" / "cli.mjs").is_file():
        return f"{js_dir()} holds no JavaScript runtime (run from a checkout of mtonnx, or set {JS_DIR_ENV})"
    if not (js_dir() / "node_modules" / "onnxruntime-node").is_dir():
        return f"{js_dir()} has no packages installed: make js (npm ci)"
    return None


class NodeError(RuntimeError):
    """The Node process failed or answered an error; str() holds its message."""


class NodeRuntime(JsonLinesProcess):
    """`node js/src/cli.mjs WEB_DIR [DTYPE]`, as a context manager, on the export's `dtype` precision (default: the
    one web.json ships): `encode`, `generate` and `transformersjs` are one request each."""

    failure = NodeError

    def __init__(self, web_dir: str | Path, dtype: str | None = None):
        problem = unavailable()
        if problem:
            raise NodeError(problem)
        super().__init__(["node", str(js_dir() / "src" / "cli.mjs"), str(web_dir), *([dtype] if dtype else [])])

    def encode(self, texts: list[str], source_prefix: str | None = None) -> list[list[int]]:
        """The JavaScript tokenizer's ids of each text (the source prefix, pieces, eos)."""
        request: dict[str, Any] = {"encode": texts}
        if source_prefix is not None:
            request["source_prefix"] = source_prefix
        return self.ask(request)["ids"]

    def generate(
        self, texts: list[str], num_beams: int | None = None, max_new_tokens: int | None = None, batch_size: int = 8
    ) -> tuple[list[list[int]], list[str]]:
        """Generated ids (up to and including eos) and translations of texts, `batch_size` at a time."""
        request = {"generate": texts, "batch_size": batch_size}
        request.update({k: v for k, v in (("num_beams", num_beams), ("max_new_tokens", max_new_tokens)) if v})
        answer = self.ask(request)
        return answer["ids"], answer["texts"]

    def transformersjs(self, texts: list[str], max_new_tokens: int = 64, batch: bool = False) -> list[str]:
        """Transformers.js's own translation pipeline on the same directory, offline, greedy: one text per call,
        or all in one call with `batch` (where a row's translation can depend on its neighbours)."""
        return self.ask({"transformersjs": texts, "max_new_tokens": max_new_tokens, "batch": batch})["texts"]
