"""Cut the cross-attention K/V out of decoder_model: the lean layouts' cross K/V file (layout.CROSS_KV).

The lean runtime runs it once per sentence and never loads decoder_model, whose weights are a second full copy
of the decoder's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnx.utils
from onnx import helper

from mtonnx.runtime import layout


def extract_cross_kv(decoder_model: Path, out: Path) -> dict[str, Any]:
    """The part of decoder_model that turns the encoder output into every layer's cross-attention K/V, as its
    own small file (the lean layout runs it once per sentence and never loads decoder_model)."""
    model = onnx.load(str(decoder_model))
    outputs = layout.present_names(layout.layers_of([o.name for o in model.graph.output]), layout.CROSS)
    sub = onnx.utils.Extractor(model).extract_model(["encoder_hidden_states"], outputs)
    # The K/V reshapes read the batch size from Shape(input_ids) (= [batch, 1], maybe sliced by start/end
    # attributes): build the same values from the encoder output's shape.
    for node in [n for n in sub.graph.node if "input_ids" in n.input]:
        if node.op_type != "Shape":
            raise ValueError(f"{decoder_model}: cross K/V depend on input_ids through {node.op_type} {node.name}")
        bounds = {a.name: a.i for a in node.attribute}
        wanted = ["batch", "one"][bounds.get("start", 0) : bounds.get("end", 2)]
        parts = []
        for item in wanted:
            name = f"{node.output[0]}_{item}"
            parts.append(name)
            sub.graph.node.insert(
                0,
                helper.make_node("Shape", ["encoder_hidden_states"], [name], end=1)
                if item == "batch"
                else helper.make_node("Constant", [], [name], value_ints=[1]),
            )
        index = list(sub.graph.node).index(node)
        sub.graph.node.remove(node)
        sub.graph.node.insert(index, helper.make_node("Concat", parts, list(node.output), axis=0))
    onnx.save(sub, str(out))
    return {"cross_kv_nodes": len(sub.graph.node), "cross_kv_mb": round(out.stat().st_size / 2**20, 3)}
