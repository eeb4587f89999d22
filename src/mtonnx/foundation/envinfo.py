"""The facts env.json is made of (lab.environment.collect): package versions, the CPU and its flags, the usable
cores, the git commit. Standard library only, so the torch-free runtime and the service can read them."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

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
