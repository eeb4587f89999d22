"""Facts read off an ONNX file: node and op counts, initializer bytes, embedding copies, and what ONNX Runtime's
own load-time optimizer does to it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from mtonnx.passes.graph import constant_tensors


def summary(path: str | Path, vocab_size: int, d_model: int) -> dict[str, Any]:
    """Size, node count, op histogram, and how many bytes are (copies of) the vocab x d_model embedding."""
    model = onnx.load(str(path))
    tensors = constant_tensors(model)
    embedding = [t for t in tensors if sorted(t.dims) == sorted((vocab_size, d_model))]
    nbytes = [numpy_helper.to_array(t).nbytes for t in tensors]
    return {
        "file": Path(path).name,
        "size_mb": round(Path(path).stat().st_size / 2**20, 3),
        "nodes": len(model.graph.node),
        "ops": dict(Counter(n.op_type for n in model.graph.node).most_common()),
        "weights_mb": round(sum(nbytes) / 2**20, 3),
        "embedding_copies": len(embedding),
        "embedding_mb": round(sum(numpy_helper.to_array(t).nbytes for t in embedding) / 2**20, 3),
        "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
    }


def op_counts(path: str | Path) -> Counter:
    """How many nodes of each op type a graph holds (its weights are not read)."""
    return Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)


def duplicated_mb(paths: list[str | Path]) -> dict[str, float]:
    """Bytes of weights stored more than once across (and within) files: total minus unique, by content."""
    import hashlib

    total, unique = 0, {}
    for path in paths:
        for tensor in constant_tensors(onnx.load(str(path))):
            array = numpy_helper.to_array(tensor)
            if array.nbytes < 1024:  # shapes and scalars: not weights
                continue
            total += array.nbytes
            unique[hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()] = array.nbytes
    return {
        "total_mb": round(total / 2**20, 3),
        "unique_mb": round(sum(unique.values()) / 2**20, 3),
        "duplicated_mb": round((total - sum(unique.values())) / 2**20, 3),
    }


def largest_initializers(path: str | Path, count: int = 8) -> list[dict[str, Any]]:
    """The biggest constant tensors of a file: name, shape, dtype, MB."""
    rows = [
        {
            "name": t.name or "(Constant node)",
            "shape": list(t.dims),
            "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name,
            "mb": round(numpy_helper.to_array(t).nbytes / 2**20, 3),
        }
        for t in constant_tensors(onnx.load(str(path)))
    ]
    return sorted(rows, key=lambda r: -r["mb"])[:count]


def ort_fusions(path: str | Path) -> dict[str, Any]:
    """What ONNX Runtime's own load-time optimizer (ORT_ENABLE_ALL) does to a file: op counts before/after."""
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as work:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the "hardware specific optimizations" notice is expected here
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(work) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        after = Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    before = Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    return {
        "nodes_before": sum(before.values()),
        "nodes_after": sum(after.values()),
        "new_ops": {op: n for op, n in after.items() if op not in before},
    }
