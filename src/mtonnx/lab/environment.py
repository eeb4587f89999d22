"""env.json: the versions, machine and params a run's numbers came from. Paths in it are relative to the project
root: the machine's facts are its CPU, cores and versions, not where it keeps the checkout."""

from __future__ import annotations

import datetime as dt
import platform
from pathlib import Path
from typing import Any

from mtonnx.foundation.envinfo import PACKAGES, cpu_info, git_info, version_of
from mtonnx.foundation.files import relative


def collect(params: dict[str, Any]) -> dict[str, Any]:
    """Everything needed to reproduce or compare a run's figures (git: of the project root the params name)."""
    import onnxruntime
    import psutil

    root = Path(params.get("_root") or Path.cwd())
    return {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: version_of(name) for name in PACKAGES},
        "onnxruntime_providers": onnxruntime.get_available_providers(),
        "cpu": cpu_info(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "git": git_info(root),
        "params_file": relative(params["_file"], root) if params.get("_file") else None,
        "params_hash": params.get("_hash"),
        "params": published_params(params, root),
    }


def published_params(params: dict[str, Any], root: Path) -> dict[str, Any]:
    """The params as env.json records them: without the loader's `_` keys, a local model's path relative to the
    project root (the loader resolves it to an absolute one)."""
    shown = {k: v for k, v in params.items() if not k.startswith("_")}
    model = shown.get("model")
    if isinstance(model, dict) and model.get("path"):
        shown["model"] = {**model, "path": relative(model["path"], root)}
    return shown
