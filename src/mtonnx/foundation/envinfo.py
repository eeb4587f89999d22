"""env.json: the versions, machine and params a run's numbers came from. Paths in it are relative to the project
root: the machine's facts are its CPU, cores and versions, not where it keeps the checkout."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import relative

PACKAGES = (
    "mtonnx",
    "torch",
    "transformers",
    "optimum",
    "optimum-onnx",
    "onnx",
    "onnxruntime",
    "onnxscript",
    "ctranslate2",
    "sentencepiece",
    "sacrebleu",
    "numpy",
    "papermill",
)
# CPU flags that change what ONNX Runtime and PyTorch can do fast (int8 dot products, bf16, AMX).
CPU_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "sve",
)


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


def version_of(name: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cpu_info() -> dict[str, Any]:
    """CPU model, core counts and the flags in CPU_FLAGS that this CPU has."""
    model, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name":
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    return {
        "model": model,
        "machine": platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "flags": [f for f in CPU_FLAGS if f in flags],
    }


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform tells it, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def git_info(where: Path) -> dict[str, Any]:
    """The commit of the checkout at `where`, and whether it has uncommitted changes (None outside a checkout)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {"sha": sha, "dirty": bool(status)}
