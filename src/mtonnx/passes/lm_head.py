"""The tied lm_head made quantizable, and a report of how a decoder computes its logits.

Marian ties the output projection to the shared embedding: exported, the logits are
`MatMul(hidden, Transpose(embedding))`. `quantize_dynamic` makes a MatMul integer only when its weight is a
constant, so that MatMul stays fp32 while the embedding's Gather gets quantized, and every step dequantizes the
whole table (notebook 06). Storing the transposed table as its own initializer fixes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper


def untie_lm_head(model: onnx.ModelProto) -> int:
    """Replace MatMul(x, Transpose(W)) by MatMul(x, W_T) with W_T a new initializer; returns how many."""
    inits = {i.name: i for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, int] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers[i] = consumers.get(i, 0) + 1
    changed = 0
    for node in [n for n in model.graph.node if n.op_type == "MatMul"]:
        transpose = producers.get(node.input[1])
        if transpose is None or transpose.op_type != "Transpose" or transpose.input[0] not in inits:
            continue
        weight = numpy_helper.to_array(inits[transpose.input[0]])
        if weight.ndim != 2:
            continue
        name = f"{transpose.input[0]}_transposed"
        if name not in inits:
            inits[name] = numpy_helper.from_array(np.ascontiguousarray(weight.T), name)
            model.graph.initializer.append(inits[name])
        node.input[1] = name
        consumers[transpose.output[0]] -= 1
        if consumers[transpose.output[0]] == 0:
            model.graph.node.remove(transpose)
        changed += 1
    return changed


def lm_head_report(path: str | Path) -> dict[str, Any]:
    """How the decoder computes its logits: the op of the lm_head product, and whether the whole embedding
    table is dequantized to feed it (the naive int8 pitfall: a 65001 x 512 dequantize every step)."""
    model = onnx.load(str(path), load_external_data=False)  # the graph and the dims are enough
    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: list(i.dims) for i in model.graph.initializer}
    vocab = max((d[0] for d in inits.values() if len(d) == 2), default=0)
    logits = next(n for n in model.graph.node if "logits" in n.output)
    node = logits
    while node is not None and node.op_type not in ("MatMul", "MatMulInteger", "DynamicQuantizeMatMul", "Gemm"):
        node = next((producers.get(i) for i in node.input if producers.get(i) is not None), None)
    chain, feeding = [], producers.get(node.input[1]) if node is not None else None
    while feeding is not None and len(chain) < 4:
        chain.append(feeding.op_type)
        feeding = producers.get(feeding.input[0])
    # DequantizeLinear straight off an int8 initializer is QDQ: ORT fuses it into an integer MatMul at load.
    # Anything computed between the table and the DequantizeLinear/MatMul (a Transpose) runs every step.
    return {
        "lm_head_op": node.op_type if node is not None else None,
        "weight_path": chain,
        "dequantizes_embedding_every_step": "DequantizeLinear" in chain and len(chain) > 1 and vocab > 0,
    }
