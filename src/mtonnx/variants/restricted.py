"""A restricted variant: a built variant whose decoders' logits keep only the target side's vocabulary rows
(passes.output_rows), with layout.OUTPUT_ROWS beside them for the runtime; the encoder and cross K/V files are
unchanged. Sliced after quantization, so each kept logit is bit-identical to the source variant's."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from mtonnx.foundation.files import staged_dir
from mtonnx.passes.output_rows import restrict, target_rows
from mtonnx.passes.weightfile import externalize
from mtonnx.runtime import layout
from mtonnx.runtime.integrity import write_sums
from mtonnx.variants.build import read_manifest


def build_restricted(source_dir: str | Path, out_dir: str | Path, rows: list[int] | None = None) -> dict[str, Any]:
    """`source_dir` (a variant with an untied lm_head) with its logits restricted to `rows` (default: the target
    side's, passes.output_rows.target_rows) into `out_dir`; returns the manifest."""
    rows = target_rows(source_dir) if rows is None else sorted(set(rows))
    files = lambda: {layout.OUTPUT_ROWS: (json.dumps(rows) + "\n").encode()}  # noqa: E731
    return rewrite_decoders(source_dir, out_dir, lambda model: restrict(model, rows), files, {"output_rows": len(rows)})


def rewrite_decoders(
    source_dir: str | Path,
    out_dir: str | Path,
    rewrite: Callable[[onnx.ModelProto], dict[str, Any]],
    files: Callable[[], dict[str, bytes]],
    recipe: dict[str, Any],
) -> dict[str, Any]:
    """`source_dir` with `rewrite` applied to every graph that outputs logits, `files()` written beside them and
    `recipe` added to its manifest's, into `out_dir` (staged, then moved); returns the manifest."""
    source, start = Path(source_dir), time.perf_counter()
    manifest = read_manifest(source)
    with staged_dir(out_dir) as tmp:
        details = {}
        for path in sorted(source.glob("*.onnx")):
            model = onnx.load(str(path))  # external data too: the staged files are inline until externalize
            outputs = {o.name for o in model.graph.output}
            details[path.name] = rewrite(model) if "logits" in outputs else "unchanged (no logits)"
            onnx.save(model, str(tmp / path.name))
        for path in source.iterdir():
            if path.is_file() and path.suffix != ".onnx" and path.name not in (layout.WEIGHTS, layout.VARIANT_MANIFEST):
                shutil.copy2(path, tmp / path.name)
        for name, content in files().items():
            (tmp / name).write_bytes(content)
        name = Path(out_dir).name
        manifest = {
            **manifest,
            "variant": name,
            "recipe": {**manifest.get("recipe", {}), "name": name, **recipe, "from": source.name},
            "restriction": details,
            "seconds": round(time.perf_counter() - start, 2),
        }
        if (source / layout.WEIGHTS).is_file():
            manifest["finalize"] = externalize(tmp)
        (tmp / layout.VARIANT_MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
        write_sums(tmp)
    return manifest
