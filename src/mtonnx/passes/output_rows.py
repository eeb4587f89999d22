"""The output vocabulary restricted to some rows: the lm_head weight and final_logits_bias keep only those columns.

A Marian vocabulary is joint: vocab.json holds the pieces of the source and the target sentencepiece models, and
the lm_head scores every one of them at every step, although a translation is decoded with the target model
only. `target_rows` lists the rows the target side can emit (its pieces and the special tokens); `restrict`
slices a decoder graph to them. Applied after quantization, a per-tensor int8 weight keeps its scale and zero
point, so every kept logit is the same number as before the slice (the runtime maps columns back to ids:
runtime.output_rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from mtonnx.passes.graph import consumers_and_producers
from mtonnx.runtime.tokenizer import MarianSpmTokenizer

MATMULS = ("MatMul", "MatMulInteger")


def target_rows(model_dir: str | Path) -> list[int]:
    """vocab.json ids of the pieces the target sentencepiece model has, plus every special token, ascending (the
    runtime's tokenizer reads the files, as the translations will)."""
    tokenizer = MarianSpmTokenizer(model_dir)
    target = tokenizer.target
    pieces = {target.id_to_piece(i) for i in range(target.get_piece_size())} | set(tokenizer.special_tokens)
    return sorted(i for piece, i in tokenizer.encoder.items() if piece in pieces)


def restrict(model: onnx.ModelProto, rows: list[int]) -> dict[str, Any]:
    """Keep columns `rows` of the logits: slice the lm_head weight (the MatMul or MatMulInteger initializer that
    produces them, [d_model, vocab], per-tensor quantized if integer) and the bias added to it, in place;
    ValueError for a graph whose logits come another way (a tied, transposed table: untie it first)."""
    graph = model.graph
    consumers, producers = consumers_and_producers(graph)
    inits = {i.name: i for i in graph.initializer}
    keep = np.asarray(rows, dtype=np.int64)
    add = producers.get("logits")
    if add is None or add.op_type != "Add":
        raise ValueError("the logits are not an Add of the lm_head product and final_logits_bias")
    bias_name = next((i for i in add.input if i in inits), None)
    node = producers.get(next(i for i in add.input if i != bias_name))
    while node is not None and node.op_type not in MATMULS:  # MatMulInteger -> Cast -> Mul(scale) -> Add
        node = next((producers[i] for i in node.input if i in producers), None)
    if node is None or node.input[1] not in inits:
        raise ValueError("the lm_head weight is not an initializer of a MatMul (untie a tied lm_head first)")
    weight = inits[node.input[1]]
    if len(weight.dims) != 2 or len(consumers.get(weight.name, [])) != 1:
        raise ValueError(f"{weight.name} is not a 2-D weight read by the lm_head alone")
    vocab = weight.dims[1]
    if node.op_type == "MatMulInteger" and len(node.input) > 3 and inits.get(node.input[3]) is not None:
        if int(np.prod(inits[node.input[3]].dims)) != 1:
            raise ValueError("a per-channel quantized lm_head: slice its zero points and scales too (not supported)")
    if keep.max() >= vocab:
        raise ValueError(f"row {int(keep.max())} is outside the {vocab}-entry vocabulary")
    sliced = [weight]
    if bias_name is not None:
        if inits[bias_name].dims[-1] != vocab or len(consumers.get(bias_name, [])) != 1:
            raise ValueError(f"{bias_name} is not the lm_head's own [.., {vocab}] bias")
        sliced.append(inits[bias_name])
    for tensor in sliced:
        array = numpy_helper.to_array(tensor)
        tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array[..., keep]), tensor.name))
    chain = set()  # the values from the product to the logits: their recorded shapes still say `vocab`
    while node is not add:
        chain.update(node.output)
        node = next(c for o in node.output for c in consumers.get(o, []))
    for info in [v for v in graph.value_info if v.name in chain]:
        graph.value_info.remove(info)
    logits = next(o for o in graph.output if o.name == "logits")
    dim = logits.type.tensor_type.shape.dim[-1]
    dim.Clear()
    dim.dim_value = len(keep)
    return {"vocab": int(vocab), "kept": len(keep), "sliced": [t.name for t in sliced]}
