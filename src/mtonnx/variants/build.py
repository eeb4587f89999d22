"""Build a variant: apply a transform to each file of an fp32 export in a staging directory, copy the model
files, write the variant manifest (layout.VARIANT_MANIFEST: recipe, per-file details, sizes, versions), move it
into place.

CTranslate2's converters are the model: load -> transform -> save, each a small step (`transforms`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import staged_dir
from mtonnx.runtime import layout
from mtonnx.runtime.integrity import write_sums

Transform = Callable[[Path, Path], dict[str, Any]]


def build_variant(
    name: str,
    fp32_dir: str | Path,
    out_dir: str | Path,
    transform: Transform,
    recipe: dict[str, Any],
    finalize: Callable[[Path], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Apply `transform(src, dst)` to each file of the split layout, copy the model files, then
    `finalize(staging dir)` if given (e.g. passes.weightfile.externalize); returns the manifest. Sizes are the
    inline ones (before `finalize`)."""
    fp32_dir, start = Path(fp32_dir), time.perf_counter()
    with staged_dir(out_dir) as tmp, _quiet_root_logger():
        details = {f: transform(fp32_dir / f, tmp / f) for f in layout.VARIANT_FILES}
        for f in layout.MODEL_FILES:
            if (fp32_dir / f).is_file():
                shutil.copy2(fp32_dir / f, tmp / f)
        manifest = {
            "variant": name,
            "recipe": recipe,
            "source": str(fp32_dir.resolve()),  # absolute: doctor follows it from any working directory
            "details": details,
            "seconds": round(time.perf_counter() - start, 2),
            "size_mb": {f: round((tmp / f).stat().st_size / 2**20, 3) for f in layout.VARIANT_FILES},
            "versions": _versions(),
        }
        if finalize is not None:
            manifest["finalize"] = finalize(tmp)
        (tmp / layout.VARIANT_MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
        write_sums(tmp)
    return manifest


def read_manifest(variant_dir: str | Path) -> dict[str, Any]:
    """A built variant's manifest ({} when the directory has none)."""
    path = Path(variant_dir) / layout.VARIANT_MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def size_mb(variant_dir: str | Path) -> float:
    """MB of every file of a variant's directory: what a deployment copies (a tuned variant's weights live in
    weights.bin beside its graphs; a shortlisted one's lm_head columns in their own file), less the build's own
    record (variant_manifest.json: its source path and build seconds differ from one build to the next, so the same
    bytes would otherwise round to different sizes)."""
    files = [p for p in Path(variant_dir).iterdir() if p.is_file() and p.name != layout.VARIANT_MANIFEST]
    return round(sum(p.stat().st_size for p in files) / 2**20, 2)


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """onnxruntime's quantizer logs "Please consider to run pre-processing before quantization" on the root logger
    once per file. Its pre-processing (symbolic shape inference and ORT's basic graph fusions) is for graphs whose
    shapes the quantizer cannot infer; these exports carry their shapes, and ORT applies the same fusions at load
    time, so the advice does not apply here (notebook 06 says so once)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _versions() -> dict[str, str | None]:
    from mtonnx.foundation.envinfo import version_of

    return {p: version_of(p) for p in ("onnx", "onnxruntime", "torch")}


def merged_decoder_sizes(merged_path: str | Path, work_dir: str | Path) -> dict[str, float]:
    """quantize_dynamic on optimum's merged decoder with and without EnableSubgraph: MB of each result."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    sizes = {"fp32": Path(merged_path).stat().st_size}
    with _quiet_root_logger():
        for label, subgraphs in (("int8 default", False), ("int8 EnableSubgraph", True)):
            out = work_dir / f"merged-{'sub' if subgraphs else 'default'}.onnx"
            quantize_dynamic(
                str(merged_path), str(out), weight_type=QuantType.QInt8, extra_options={"EnableSubgraph": subgraphs}
            )
            sizes[label] = out.stat().st_size
    return {k: round(v / 2**20, 3) for k, v in sizes.items()}
