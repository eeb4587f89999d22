"""The web export's int8 precision: the deployed recipe's quantization (int8-rows) on optimum's encoder and merged
decoder, the two files Transformers.js's `q8` dtype loads.

The deployed variant itself cannot ship: its in-place cache and its lm_head cut to the target side have no form in
that layout. What can ship is its quantization: MatMul weights int8 per tensor, activations quantized one row at a
time (variants.transforms.dynamic_int8 with row scales, then fused into MatMulIntegerToFloat), inside the merged
decoder's two branches too, so a sentence's tokens do not depend on its batch in JavaScript either. The lm_head stays
fp32: in the merged decoder it is the embedding table, tied and shared by both branches, which quantize_dynamic
leaves alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import staged_dir
from mtonnx.variants import transforms

FILES = ("encoder_model.onnx", "decoder_model_merged.onnx")
SKIPPED = ("SHA256SUMS", "build_key.json")  # facts of the source directory, not of this one


def build_int8(onnx_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """`out_dir` (staged: complete or absent) with int8-rows forms of `onnx_dir`'s encoder_model.onnx and
    decoder_model_merged.onnx beside its configs and tokenizer files, so the Python runtime loads it as it loads
    `onnx_dir`; returns what each transform did."""
    onnx_dir = Path(onnx_dir)
    details: dict[str, Any] = {}
    with staged_dir(out_dir) as stage:
        for name in FILES:
            quantize = transforms.dynamic_int8(row_scales=True, subgraphs=name.startswith("decoder"))
            details[name] = quantize(onnx_dir / name, stage / name)
        details.update(transforms.fused_row_scales(stage))
        for path in onnx_dir.iterdir():  # configs and tokenizer files
            if path.is_file() and path.suffix != ".onnx" and path.name not in SKIPPED:
                shutil.copyfile(path, stage / path.name)
    return details
