"""Fold torch.export's key transposes so ONNX Runtime fuses them into its MatMul.

torch.export decomposes attention's `K^T` into Reshape(3-D) -> Transpose -> Reshape(4-D), which ORT cannot fuse,
so every decoding step transposed the whole self- and cross-attention key cache. A single 4-D Transpose of the
last two axes is fused by ORT into FusedMatMul(transB=1): the copy disappears. Hand-written because no library
pass matches torch.export's pattern (onnxruntime.transformers' fusions target TorchScript exports).
"""

from __future__ import annotations

import onnx
from onnx import helper

from mtonnx.passes.graph import consumers_and_producers, prune


def fold_key_transposes(model: onnx.ModelProto) -> int:
    """Replace Reshape(x, 3-D) -> Transpose(perm 0,2,1) -> Reshape(4-D) by Transpose(x, perm 0,1,3,2);
    returns how many were folded (dead shape computations are pruned)."""
    graph = model.graph
    by_input, producers = consumers_and_producers(graph)
    folded = 0
    for transpose in [n for n in graph.node if n.op_type == "Transpose"]:
        perm = next((list(helper.get_attribute_value(a)) for a in transpose.attribute if a.name == "perm"), None)
        flatten = producers.get(transpose.input[0])
        after = by_input.get(transpose.output[0], [])
        if (
            perm != [0, 2, 1]
            or flatten is None
            or flatten.op_type != "Reshape"
            or len(after) != 1
            or after[0].op_type != "Reshape"
        ):
            continue
        unflatten = after[0]
        folded_node = helper.make_node(
            "Transpose", [flatten.input[0]], [unflatten.output[0]], name=f"{transpose.name}_folded", perm=[0, 1, 3, 2]
        )
        graph.node.insert(list(graph.node).index(unflatten), folded_node)
        graph.node.remove(unflatten)
        graph.node.remove(transpose)
        folded += 1
    prune(model)
    return folded
