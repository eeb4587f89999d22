"""One weights file per variant directory: every large initializer stored once, outside the ONNX files.

Why: the tied embedding table (vocabulary x d_model, fp32) sits in the encoder file and again in each decoder
file, and ORT copies every inline initializer into its own memory: the runtime held one copy per session
(notebook 09's memory ablation measures it). ORT memory-maps
initializers stored as external data instead of copying them, so a Gather reads only the rows it needs and the
table costs resident memory only for the pages touched. Weights that a kernel prepacks (the integer MatMuls)
are copied into the packed layout as before. Byte-identical tensors (the tied table, decoder_model's and
decoder_with_past's layers, decoder_cross_kv's projections) are written once, so the directory shrinks too.
Written by hand because onnx's external-data helpers write one file per model and never share a tensor.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import onnx
from onnx import numpy_helper

from mtonnx.runtime.layout import WEIGHTS

ALIGN = 4096  # ORT maps external data at page-aligned offsets (Linux page size)
MIN_BYTES = 64 * 1024  # smaller tensors stay inline: scales, biases, norms


def externalize(directory: str | Path, min_bytes: int = MIN_BYTES) -> dict[str, Any]:
    """Move every initializer of at least `min_bytes` of each .onnx file in `directory` into one shared,
    deduplicated, page-aligned weights file (layout.WEIGHTS); rewrite the files in place (call it on a staging
    directory)."""
    directory = Path(directory)
    if (directory / WEIGHTS).exists():
        raise ValueError(f"{directory} already has {WEIGHTS}: externalize a staging copy of inline files")
    stored: dict[tuple[int, tuple[int, ...], str], tuple[int, int]] = {}  # (dtype, dims, sha256) -> (offset, length)
    referenced = 0
    with open(directory / WEIGHTS, "wb") as out:
        for path in sorted(directory.glob("*.onnx")):
            model = onnx.load(str(path))
            for tensor in model.graph.initializer:
                data = numpy_helper.to_array(tensor).tobytes()
                if len(data) < min_bytes:
                    continue
                key = (tensor.data_type, tuple(tensor.dims), hashlib.sha256(data).hexdigest())
                if key not in stored:
                    offset = (out.tell() + ALIGN - 1) // ALIGN * ALIGN
                    out.seek(offset)
                    out.write(data)
                    stored[key] = (offset, len(data))
                offset, length = stored[key]
                referenced += length
                for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                    tensor.ClearField(field)
                tensor.data_location = onnx.TensorProto.EXTERNAL
                del tensor.external_data[:]
                for name, value in (("location", WEIGHTS), ("offset", str(offset)), ("length", str(length))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = name, value
            onnx.save(model, str(path))
    written = sum(length for _, length in stored.values())
    return {
        "weights_file_mb": round((directory / WEIGHTS).stat().st_size / 2**20, 3),
        "tensors": len(stored),
        "deduplicated_mb": round((referenced - written) / 2**20, 3),
    }
