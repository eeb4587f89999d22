"""A restricted variant: a built variant whose decoders' logits keep only the target side's vocabulary rows
(passes.output_rows), with layout.OUTPUT_ROWS beside them for the runtime; the encoder and cross K/V files are
unchanged. Sliced after quantization, so each kept logit is bit-identical to the source variant's."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import onnx

from mtonnx.passes.output_rows import restrict, target_rows
from mtonnx.passes.weightfile import externalize
from mtonnx.report.artifacts import staged_dir
from mtonnx.runtime import layout
from mtonnx.variants.build import read_manifest


def build_restricted(source_dir: str | Path, out_dir: str | Path, rows: list[int] | None = None) -> dict[str, Any]:
    """`source_dir` (a variant with an untied lm_head) with its logits restricted to `rows` (default: the target
    side's, passes.output_rows.target_rows) into `out_dir`; returns the manifest."""
    source, start = Path(source_dir), time.perf_counter()
    rows = target_rows(source) if rows is None else sorted(set(rows))
    manifest = read_manifest(source)
    with staged_dir(out_dir) as tmp:
        details = {}
        for path in sorted(source.glob("*.onnx")):
            model = onnx.load(str(path))  # external data too: the staged files are inline until externalize
            outputs = {o.name for o in model.graph.output}
            details[path.name] = restrict(model, rows) if "logits" in outputs else {"kept": "all (no logits)"}
            onnx.save(model, str(tmp / path.name))
        for path in source.iterdir():
            if path.is_file() and path.suffix != ".onnx" and path.name not in (layout.WEIGHTS, layout.VARIANT_MANIFEST):
                shutil.copy2(path, tmp / path.name)
        (tmp / layout.OUTPUT_ROWS).write_text(json.dumps(rows) + "\n", encoding="utf-8")
        name = Path(out_dir).name
        manifest = {
            **manifest,
            "variant": name,
            "recipe": {**manifest.get("recipe", {}), "name": name, "output_rows": len(rows), "from": source.name},
            "restriction": details,
            "seconds": round(time.perf_counter() - start, 2),
        }
        if (source / layout.WEIGHTS).is_file():
            manifest["finalize"] = externalize(tmp)
        (tmp / layout.VARIANT_MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    return manifest
