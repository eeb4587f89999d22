"""Weight bytes one decoding step reads, measured from a variant's step file as stored: int8 or 4-bit packing,
scales and zero points included, the lm_head as kept (restricted variants; a shortlisted variant's is fed per
batch: column_bytes). `benchmark.bytes_per_token` counts parameters for the bandwidth bound; this compares variants
whose storage differs (MatMulNBits blocks, fp16).

An embedding table read by a Gather (or GatherBlockQuantized) costs one row per token, so it is left out unless
another node (a tied lm_head) reads it whole. The cross-attention K/V projections are not in the step files of the
lean and tuned layouts, and the split layout's decoder_with_past takes their outputs as inputs: never counted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from mtonnx.runtime import layout

# The file every step runs on, preferred first.
STEP_FILES = (layout.INPLACE_STEP, layout.TUNED_STEP, layout.DECODER_WITH_PAST)
GATHERS = ("Gather", "GatherBlockQuantized")
HALF_BYTE = (TensorProto.INT4, TensorProto.UINT4)


def step_bytes(model_dir: str | Path) -> int | None:
    """Bytes of the initializers a step reads whole, from the directory's step file; None without one."""
    found = [Path(model_dir) / f for f in STEP_FILES if (Path(model_dir) / f).is_file()]
    if not found:
        return None
    graph = onnx.load(str(found[0]), load_external_data=False).graph
    read_whole = {name for node in graph.node if node.op_type not in GATHERS for name in node.input}
    return sum(_nbytes(t) for t in graph.initializer if t.name in read_whole)


def per_variant(variants_dir: str | Path) -> dict[str, int]:
    """step_bytes of every variant directory under `variants_dir` that has a step file, by name; shortlisted
    variants are left out (the lm_head columns they read depend on the batch: column_bytes)."""
    dirs = [d for d in sorted(Path(variants_dir).iterdir()) if d.is_dir() and not (d / layout.SHORTLIST).is_file()]
    sizes = {d.name: step_bytes(d) for d in dirs}
    return {name: size for name, size in sizes.items() if size is not None}


def column_bytes(model_dir: str | Path) -> int:
    """Bytes a shortlisted variant's step reads per lm_head column it is fed: a weight column and a bias entry."""
    with np.load(Path(model_dir) / layout.HEAD_COLUMNS) as head:
        weight, bias = (head[name] for name in layout.HEAD_COLUMN_INPUTS)
        return weight.shape[0] * weight.itemsize + bias.itemsize


def _nbytes(tensor: onnx.TensorProto) -> int:
    count = int(np.prod(tensor.dims, dtype=np.int64))
    if tensor.data_type in HALF_BYTE:
        return (count + 1) // 2
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
