"""Facts read off an ONNX file without running it: node and op counts, initializer bytes, embedding copies."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper


def constant_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Initializers plus the tensors of Constant nodes (exporters store weights either way)."""
    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    return tensors


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


def embedding_fingerprints(path: str | Path, vocab_size: int, d_model: int) -> list[str]:
    """A hash per embedding-shaped tensor (transposed copies normalized), to see what files share."""
    import hashlib

    out = []
    for t in constant_tensors(onnx.load(str(path))):
        if sorted(t.dims) == sorted((vocab_size, d_model)):
            array = numpy_helper.to_array(t)
            array = array if array.shape == (vocab_size, d_model) else array.T
            out.append(hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:12])
    return out
