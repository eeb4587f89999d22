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
from onnx import helper, numpy_helper

from mtonnx.passes.graph import consumers_and_producers
from mtonnx.runtime import layout
from mtonnx.runtime.tokenizer import load_tokenizer

MATMULS = ("MatMul", "MatMulInteger", "MatMulIntegerToFloat")


def target_rows(model_dir: str | Path) -> list[int]:
    """vocab.json ids of the pieces the target sentencepiece model has, plus every special token, ascending (the
    runtime's tokenizer reads the files, as the translations will)."""
    tokenizer = load_tokenizer(model_dir)
    target = tokenizer.target
    pieces = {target.id_to_piece(i) for i in range(target.get_piece_size())} | set(tokenizer.special_tokens)
    return sorted(i for piece, i in tokenizer.encoder.items() if piece in pieces)


def restrict(model: onnx.ModelProto, rows: list[int]) -> dict[str, Any]:
    """Keep columns `rows` of the logits: slice the lm_head weight (the MatMul or MatMulInteger initializer that
    produces them, [d_model, vocab], per-tensor quantized if integer) and the bias added to it, in place;
    ValueError for a graph whose logits come another way (a tied, transposed table: untie it first)."""
    head = _LmHead(model)
    keep = np.asarray(rows, dtype=np.int64)
    if keep.max() >= head.vocab:
        raise ValueError(f"row {int(keep.max())} is outside the {head.vocab}-entry vocabulary")
    for tensor in head.tensors:
        array = numpy_helper.to_array(tensor)
        tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array[..., keep]), tensor.name))
    head.set_width(len(keep))
    return {"vocab": head.vocab, "kept": len(keep), "sliced": [t.name for t in head.tensors]}


def columns_as_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The lm_head weight and bias become inputs (layout.HEAD_COLUMN_INPUTS, their last dim `columns`), in place,
    so a runtime feeds the columns a batch may choose from (runtime.shortlist); returns the full arrays, keyed by
    those input names. A quantized weight keeps its scale and zero point: each fed column's logit is the number
    the full graph computes for it."""
    head = _LmHead(model)
    arrays = {}
    for tensor, name in zip(head.tensors, layout.HEAD_COLUMN_INPUTS):
        arrays[name] = numpy_helper.to_array(tensor)
        shape = [*tensor.dims[:-1], "columns"]
        model.graph.input.append(helper.make_tensor_value_info(name, tensor.data_type, shape))
        for node in model.graph.node:
            node.input[:] = [name if i == tensor.name else i for i in node.input]
        model.graph.initializer.remove(tensor)
    if len(arrays) != len(layout.HEAD_COLUMN_INPUTS):
        raise ValueError("the logits have no final_logits_bias: not a Marian lm_head")
    head.set_width("columns")
    return arrays


class _LmHead:
    """The initializers the logits are computed from (`tensors`: the weight, then the bias if any) and the values
    between the product and the logits, found from the logits' Add back to the MatMul or MatMulInteger."""

    def __init__(self, model: onnx.ModelProto):
        graph = self.graph = model.graph
        add = consumers_and_producers(graph)[1].get("logits")
        if add is None or add.op_type != "Add":
            raise ValueError("the logits are not an Add of the lm_head product and final_logits_bias")
        _constants_to_initializers(graph, add.input)  # the TorchScript exporter adds the bias as a Constant node
        consumers, producers = consumers_and_producers(graph)
        inits = {i.name: i for i in graph.initializer}
        bias_name = next((i for i in add.input if i in inits), None)
        node = producers.get(next(i for i in add.input if i != bias_name))
        while node is not None and node.op_type not in MATMULS:  # MatMulInteger -> Cast -> Mul(scale) -> Add, or fused
            node = next((producers[i] for i in node.input if i in producers), None)
        if node is None or node.input[1] not in inits:
            raise ValueError("the lm_head weight is not an initializer of a MatMul (untie a tied lm_head first)")
        weight = inits[node.input[1]]
        if len(weight.dims) != 2 or len(consumers.get(weight.name, [])) != 1:
            raise ValueError(f"{weight.name} is not a 2-D weight read by the lm_head alone")
        self.vocab = int(weight.dims[1])
        if node.op_type in MATMULS[1:] and len(node.input) > 3 and inits.get(node.input[3]) is not None:
            if int(np.prod(inits[node.input[3]].dims)) != 1:
                raise ValueError("a per-channel quantized lm_head (its scales per column: not supported)")
        self.tensors = [weight]
        if bias_name is not None:
            if inits[bias_name].dims[-1] != self.vocab or len(consumers.get(bias_name, [])) != 1:
                raise ValueError(f"{bias_name} is not the lm_head's own [.., {self.vocab}] bias")
            self.tensors.append(inits[bias_name])
        self.chain = set()  # the values from the product to the logits: their recorded shapes say `vocab`
        while node is not add:
            self.chain.update(node.output)
            node = next(c for o in node.output for c in consumers.get(o, []))

    def set_width(self, width: int | str) -> None:
        """The logits' last dim becomes `width`; the recorded shapes along the chain are dropped."""
        for info in [v for v in self.graph.value_info if v.name in self.chain]:
            self.graph.value_info.remove(info)
        dim = next(o for o in self.graph.output if o.name == "logits").type.tensor_type.shape.dim[-1]
        dim.Clear()
        if isinstance(width, str):
            dim.dim_param = width
        else:
            dim.dim_value = width


def _constants_to_initializers(graph: onnx.GraphProto, names) -> None:
    """Each of `names` that a Constant node with a tensor `value` produces becomes an initializer of that name."""
    for node in [n for n in graph.node if n.op_type == "Constant" and n.output[0] in names]:
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        if value is not None:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(value)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
            graph.node.remove(node)


def rows_up_to(target: list[int], vocab: int, count: int) -> list[int]:
    """`target` (ascending ids) and then the lowest other ids, `count` rows in all: a restriction of that size for
    timing only (which extra rows are kept does not change the time, only which tokens are reachable)."""
    kept = set(target)
    extra = [i for i in range(vocab) if i not in kept][: max(0, count - len(kept))]
    return sorted(kept | set(extra))
