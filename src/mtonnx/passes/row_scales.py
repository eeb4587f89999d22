"""One activation scale per row: dynamic int8's DynamicQuantizeLinear (one scale and zero point for the whole
tensor) replaced by a symmetric quantization of each row on its own.

Why: with one scale per tensor, every sentence of a batch (every beam, every padding row) is quantized with the
scale its largest neighbour sets, so a sentence's tokens depend on what it is batched with. Quantized per row, a
row's integers depend on that row alone, the integer product is exact, and what follows is elementwise, so a row's
logits are the same in any batch. CTranslate2 quantizes its activations the same way (symmetric, one scale per
row, shifted by 128 into uint8 for the u8s8 kernels).

Written by hand because onnxruntime's quantizers offer one activation scale per tensor only (quantize_dynamic) or
a calibrated constant (quantize_static), and MatMulInteger's CPU kernel takes one zero point per tensor: per-row
scales have to be built from standard ops around it. Two steps:
1. `per_row_activations`, in standard ONNX ops, keeping dynamic int8's three outputs and their roles, so the
   MatMulInteger, Cast and scale Muls after it (and the passes that read that form) are unchanged:
       range   = ReduceMax(|x|, last axis)                    [..., 1]
       x_q     = QuantizeLinear(x / range, 1/127, 128)        round(127 x / range) + 128, in [1, 255]
       x_scale = range, with 1/127 folded into the weight scale it is multiplied with
       x_zp    = 128 (one uint8 scalar)
   x / range is in [-1, 1], so one per-tensor QuantizeLinear with a constant scale rounds and shifts every row.
   A row of zeros has range 0: its integers are whatever NaN quantizes to, and its product is scaled by 0.
2. `fuse_row_scaled`, last, once every other pass has read the standard form: each MatMulInteger -> Cast ->
   Mul(Mul(x_scale, w_scale)) becomes ORT's MatMulIntegerToFloat, with the bias Add left after it. ONNX Runtime
   fuses that chain itself, but it takes the bias into the kernel, which adds the bias before it multiplies by a
   scale that is not a scalar: every row's bias would be scaled by the row's range. Fused here without the bias,
   the kernel is exact; leaving the chain to ORT with its fusion off would cost three kernels per product.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mtonnx.passes.graph import consumers_and_producers

LEVELS = 127  # symmetric int8: [-127, 127]
ROW_RANGE = ".row_range"  # the suffix of every per-row scale this pass writes; fuse_row_scaled keys on it
MS_DOMAIN = "com.microsoft"


def graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """`graph` and every graph nested in its nodes (an If's branches: optimum's merged decoder keeps both steps
    there), outermost first."""
    found = [graph]
    for node in graph.node:
        for attribute in node.attribute:
            nested = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
            for sub in nested:
                found += graphs(sub)
    return found


def per_row_activations(model: onnx.ModelProto) -> int:
    """Replace every DynamicQuantizeLinear of `model`, in its main graph and its subgraphs, with per-row symmetric
    quantization; returns how many were replaced. ValueError for an opset before 18 or a scale used other than as
    Mul(x_scale, weight scale initializer)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 18:
        raise ValueError(f"per-row activation scales need opset 18 or later (ReduceMax's axes input); this is {opset}")
    every = graphs(model.graph)
    targets = [n for g in every for n in g.node if n.op_type == "DynamicQuantizeLinear"]
    if not targets:
        return 0
    _fold_levels(every, {n.output[1] for n in targets})
    constants = {
        "row_scales.axis": np.array([-1], np.int64),
        "row_scales.step": np.array(1 / LEVELS, np.float32),
        "row_scales.zero_point": np.array(128, np.uint8),
    }
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())  # seen by subgraphs
    renamed = {}
    for node in targets:
        renamed.update({node.output[1]: node.output[1] + ROW_RANGE, node.output[2]: "row_scales.zero_point"})
    for graph in reversed(every):  # innermost first: rebuilding a graph copies the subgraphs of its nodes
        for node in graph.node:  # a scale made in the main graph may be read in a branch
            node.input[:] = [renamed.get(i, i) for i in node.input]
        nodes = []
        for node in graph.node:
            if node.op_type != "DynamicQuantizeLinear":
                nodes.append(node)
                continue
            x, (quantized, scale, _) = node.input[0], node.output
            row_range = scale + ROW_RANGE
            nodes += [
                helper.make_node("Abs", [x], [quantized + ".abs"]),
                helper.make_node("ReduceMax", [quantized + ".abs", "row_scales.axis"], [row_range], keepdims=1),
                helper.make_node("Div", [x, row_range], [quantized + ".unit"]),
                helper.make_node(
                    "QuantizeLinear", [quantized + ".unit", "row_scales.step", "row_scales.zero_point"], [quantized]
                ),
            ]
        if len(nodes) != len(graph.node):
            del graph.node[:]
            graph.node.extend(nodes)
    return len(targets)


def _fold_levels(every: list[onnx.GraphProto], scales: set[str]) -> None:
    """Every Mul(x_scale, weight_scale) reading one of `scales`, in any of the graphs, gets its own weight scale
    divided by 127 (added beside the original, once however many branches read it), since x_scale becomes the
    row's range instead of range / 127; a weight scale no node reads any more is removed."""
    owners = {i.name: (i, g) for g in every for i in g.initializer}
    replaced = set()
    for node in (n for g in every for n in g.node):
        hits = [i for i, name in enumerate(node.input) if name in scales]
        if not hits:
            continue
        other = node.input[1 - hits[0]] if node.op_type == "Mul" and len(hits) == 1 else None
        if other not in owners:
            raise ValueError(f"{node.name}: an activation scale used other than as Mul(x_scale, weight scale)")
        name = f"{other}.per_row"
        if name not in owners:
            initializer, owner = owners[other]
            folded = numpy_helper.to_array(initializer) / np.float32(LEVELS)
            owner.initializer.append(numpy_helper.from_array(folded.astype(np.float32), name))
            owners[name] = (owner.initializer[-1], owner)
        node.input[1 - hits[0]] = name
        replaced.add(other)
    read = {i for g in every for n in g.node for i in n.input}
    for name in replaced - read:
        initializer, owner = owners[name]
        owner.initializer.remove(initializer)


def fuse_row_scaled(model: onnx.ModelProto) -> int:
    """Each MatMulInteger whose activation scale is per row (Cast, then Mul by Mul(row range, weight scale))
    becomes one MatMulIntegerToFloat without a bias, in the main graph and its subgraphs; returns how many. A model
    without them is left alone."""
    count = sum(_fuse_graph(graph) for graph in reversed(graphs(model.graph)))  # innermost first
    if count and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return count


def _fuse_graph(graph: onnx.GraphProto) -> int:
    """fuse_row_scaled on one graph's own nodes."""
    consumers, producers = consumers_and_producers(graph)
    fused, dropped = {}, set()
    for integer in (n for n in graph.node if n.op_type == "MatMulInteger"):
        casts = consumers.get(integer.output[0], [])
        cast = casts[0] if len(casts) == 1 and casts[0].op_type == "Cast" else None
        muls = consumers.get(cast.output[0], []) if cast is not None else []
        mul = muls[0] if len(muls) == 1 and muls[0].op_type == "Mul" else None
        scales = next((i for i in mul.input if i != cast.output[0]), None) if mul is not None else None
        product = producers.get(scales)
        if product is None or product.op_type != "Mul" or len(consumers[scales]) != 1:
            continue
        row_range = next((i for i in product.input if i.endswith(ROW_RANGE)), None)
        if row_range is None:
            continue
        weight_scale = next(i for i in product.input if i != row_range)
        inputs = [integer.input[0], integer.input[1], row_range, weight_scale, *integer.input[2:4]]
        fused[id(integer)] = helper.make_node(
            "MatMulIntegerToFloat",
            inputs,
            [mul.output[0]],
            name=f"{integer.name or integer.output[0]}.to_float",
            domain=MS_DOMAIN,
        )
        dropped.update({id(cast), id(mul), id(product)})
    if not fused:
        return 0
    nodes = [fused.get(id(n), n) for n in graph.node if id(n) not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    return len(fused)
