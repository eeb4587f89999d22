"""The tuned decoding step: decoder_with_past rewritten so a beam-search step moves fewer bytes, same logits.

`tuned_step` applies two rewrites to a torch.export decoder_with_past (after the key-transpose fold and, for int8,
dynamic quantization) and marks the result in its metadata so the runtime feeds it accordingly:
- `time_major_keys`: no per-step copy of the self-attention key cache (Concat(past, new) is gone for keys);
- `shared_cross_attention`: one copy of each sentence's cross-attention K/V serves all its beams.
Both keep every attention score and weighted sum the same MLAS computation as before (checked bit for bit in
the tests): they change where operands are read from, never the arithmetic. Hand-written because no library
pass does this to an exported graph: onnxruntime.transformers' attention fusions replace the arithmetic itself
(and target TorchScript exports), which moves int8 tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mtonnx.passes.graph import consumers_and_producers, prune, replace_nodes, scalar_constants, toposort
from mtonnx.runtime import layout


def tuned_step(model: onnx.ModelProto) -> dict[str, Any]:
    """Both rewrites, in place, plus the metadata the runtime reads; ValueError if the graph does not match."""
    details = {
        "time_major_key_layers": time_major_keys(model),
        "shared_cross_attention_layers": shared_cross_attention(model),
    }
    finish_step(model, {layout.SELF_KEYS_KEY: layout.SELF_KEYS_TIME_MAJOR})
    return details


def finish_step(model: onnx.ModelProto, self_attention: dict[str, str]) -> None:
    """After a step rewrite: ORT's contrib domain, the metadata that tells the runtime how to feed the caches
    (`self_attention` beside per-sentence cross-attention), topological order, no dead nodes."""
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    del model.metadata_props[:]
    for key, value in {**self_attention, layout.CROSS_ATTENTION_KEY: layout.CROSS_PER_SENTENCE}.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    toposort(model.graph)
    prune(model)


def time_major_keys(model: onnx.ModelProto) -> int:
    """Feed the self-attention keys time-major and read them in place; returns the layers rewritten.

    Exported, every step runs present_key = Concat(past_key, new_key) and attends over it: a copy of the whole key
    cache per layer per step (quadratic over a decode). Here past_key is [past_len, batch, heads, head_dim] (the
    runtime appends to a preallocated buffer and feeds the filled prefix, which is contiguous); FusedMatMul reads
    it in place (transBatchB) for the scores over the past, the new key's score is computed on its own and the two
    are concatenated ([batch, heads, 1, t+1], small), and present_key is only the new key. Every score is the same
    64-term dot product with the scale ORT itself folds into the exported MatMul (alpha = the two sqrt-scale Muls
    multiplied in float32). Values keep their Concat: the weighted sum over t+1 positions cannot be split into
    past + new without changing MLAS's summation order (from 7 positions on), and with it the tokens.
    """
    graph = model.graph
    consumers, producers = consumers_and_producers(graph)
    constants = scalar_constants(graph)
    past_keys = [i.name for i in graph.input if i.name.endswith(f".{layout.SELF_KEY}")]
    added, removed = [], []
    for past in past_keys:
        for shape in [n for n in consumers.get(past, []) if n.op_type == "Shape"]:  # batch / past-length reads
            bounds = {a.name: a.i for a in shape.attribute}
            start, end = bounds.get("start", 0), bounds.get("end", 4)
            if end - start != 1:
                raise ValueError(f"{shape.name} reads {end - start} dims of {past}")
            moved = {0: 1, 1: 2, 2: 0, 3: 3}[start]  # [batch, heads, time, dim] -> [time, batch, heads, dim]
            del shape.attribute[:]
            shape.attribute.extend([helper.make_attribute("start", moved), helper.make_attribute("end", moved + 1)])
        concat, transpose, scale_k, matmul = _chain(past, consumers, ("Concat", "Transpose", "Mul", "MatMul"))
        query, alpha = _query_and_alpha(matmul, scale_k, producers, constants)
        new_key, stem = concat.input[1], f"tuned.{past}"
        added += [
            helper.make_node(
                "FusedMatMul",
                [query, past],
                [f"{stem}.scores_past"],
                domain="com.microsoft",
                alpha=alpha,
                transB=1,
                transBatchB=1,
            ),
            helper.make_node(
                "FusedMatMul", [query, new_key], [f"{stem}.scores_new"], domain="com.microsoft", alpha=alpha, transB=1
            ),
            helper.make_node("Concat", [f"{stem}.scores_past", f"{stem}.scores_new"], [matmul.output[0]], axis=-1),
            helper.make_node("Identity", [new_key], [concat.output[0]]),
        ]
        removed += [concat, transpose, scale_k, matmul]
    replace_nodes(graph, removed, added)
    for value in [*graph.input, *graph.output]:
        if value.name.endswith(f".{layout.SELF_KEY}"):
            _set_dims(value, [2, 0, 1, 3] if value in graph.input else [0, 1, None, 3])
    return len(past_keys)


def shared_cross_attention(model: onnx.ModelProto) -> int:
    """Take each layer's cross-attention K/V once per sentence ([batch, heads, src_len, head_dim]) and attend
    with every beam's query against it; returns the layers rewritten.

    Beam search repeated them per beam: 4x the bytes read per step at beam 4. The scores become one
    FusedMatMul per sentence and head with the beams as rows (M = beams; MLAS computes each row's dot products
    exactly as with M = 1), the weighted sums a 5-D MatMul that broadcasts the values over the beams (still one
    M = 1 product per beam and head, the same as before). Beams are rows / sentences, so greedy works unchanged.
    """
    graph = model.graph
    consumers, producers = consumers_and_producers(graph)
    constants = scalar_constants(graph)
    keys, heads, head_dim = cache_inputs(graph, layout.CROSS_KEY)
    ints = {"x.minus1": -1, "x.heads": heads, "x.head_dim": head_dim, "x.one": 1}
    graph.initializer.extend(numpy_helper.from_array(np.array([v], np.int64), n) for n, v in ints.items())
    first = keys[0].name
    added = [
        helper.make_node("Shape", [first], ["x.batch"], start=0, end=1),
        helper.make_node("Shape", [first], ["x.src_len"], start=2, end=3),
        helper.make_node("Concat", ["x.batch", "x.minus1", "x.heads", "x.head_dim"], ["x.query_shape"], axis=0),
        helper.make_node("Concat", ["x.minus1", "x.heads", "x.one", "x.src_len"], ["x.scores_shape"], axis=0),
        helper.make_node(
            "Concat", ["x.batch", "x.minus1", "x.heads", "x.one", "x.src_len"], ["x.weights_shape"], axis=0
        ),
        helper.make_node("Concat", ["x.minus1", "x.heads", "x.one", "x.head_dim"], ["x.out_shape"], axis=0),
    ]
    removed = []
    for key in keys:
        value, (transpose, scale_k, matmul, weighted), query, alpha = cross_attention(
            key.name, consumers, producers, constants
        )
        s = f"tuned.{key.name}."
        added += [
            helper.make_node("Reshape", [query, "x.query_shape"], [s + "query"]),  # [batch, beams, heads, d]
            helper.make_node("Transpose", [s + "query"], [s + "query_t"], perm=[0, 2, 1, 3]),
            helper.make_node(
                "FusedMatMul", [s + "query_t", key.name], [s + "scores"], domain="com.microsoft", alpha=alpha, transB=1
            ),  # [batch, heads, beams, src_len]
            helper.make_node("Transpose", [s + "scores"], [s + "scores_t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [s + "scores_t", "x.scores_shape"], [matmul.output[0]]),
            helper.make_node("Reshape", [weighted.input[0], "x.weights_shape"], [s + "weights"]),
            helper.make_node("Unsqueeze", [value, "x.one"], [s + "value"]),  # [batch, 1, heads, src_len, d]
            helper.make_node("MatMul", [s + "weights", s + "value"], [s + "out"]),
            helper.make_node("Reshape", [s + "out", "x.out_shape"], [weighted.output[0]]),
        ]
        removed += [transpose, scale_k, matmul, weighted]
    replace_nodes(graph, removed, added)
    per_sentence_inputs(graph)
    return len(keys)


def per_sentence_inputs(graph: onnx.GraphProto) -> None:
    """The cross K/V inputs' first dim becomes "sentences": one row per sentence, whatever the beams."""
    for value in graph.input:
        if value.name.endswith(layout.CROSS):
            value.type.tensor_type.shape.dim[0].Clear()
            value.type.tensor_type.shape.dim[0].dim_param = "sentences"


def cross_attention(key: str, consumers, producers, constants) -> tuple[str, list[onnx.NodeProto], str, float]:
    """An exported cross-attention from its key input: the value input, the nodes Transpose(K), Mul(K^T, c),
    MatMul (scores) and MatMul(weights, value), the unscaled query and the scores' alpha; ValueError if no match."""
    value = key.replace(layout.CROSS_KEY, layout.CROSS_VALUE)
    transpose, scale_k, scores = _chain(key, consumers, ("Transpose", "Mul", "MatMul"))
    (weighted,) = consumers.get(value, [None])
    if weighted is None or weighted.op_type != "MatMul" or weighted.input[1] != value:
        raise ValueError(f"{value}: expected MatMul(weights, value)")
    query, alpha = _query_and_alpha(scores, scale_k, producers, constants)
    return value, [transpose, scale_k, scores, weighted], query, alpha


def cache_inputs(graph: onnx.GraphProto, kind: str) -> tuple[list[onnx.ValueInfoProto], int, int]:
    """The graph's cache inputs of one kind (layout.KV), their heads and head_dim; ValueError if none or not static."""
    inputs = [i for i in graph.input if i.name.endswith(f".{kind}")]
    if not inputs:
        raise ValueError(f"no {kind} inputs")
    dims = inputs[0].type.tensor_type.shape.dim
    heads, head_dim = dims[1].dim_value, dims[3].dim_value
    if not heads or not head_dim:
        raise ValueError(f"{inputs[0].name}: heads and head_dim are not static")
    return inputs, heads, head_dim


def _chain(start: str, consumers: dict[str, list[onnx.NodeProto]], ops: tuple[str, ...]) -> list[onnx.NodeProto]:
    """The single-consumer chain of `ops` from `start` (Shape readers aside), or ValueError."""
    chain, name = [], start
    for op in ops:
        nodes = [n for n in consumers.get(name, []) if n.op_type != "Shape"]
        if len(nodes) != 1 or nodes[0].op_type != op or (op == "Concat" and nodes[0].input[0] != start):
            raise ValueError(f"{start}: expected {op} after {name}, found {[n.op_type for n in nodes]}")
        chain.append(nodes[0])
        name = nodes[0].output[0]
    return chain


def _query_and_alpha(matmul: onnx.NodeProto, scale_k: onnx.NodeProto, producers, constants) -> tuple[str, float]:
    """MatMul(Mul(q, c), Mul(K^T, c)): the unscaled query and the alpha ORT's MatMulScaleFusion would use."""
    scale_q = producers.get(matmul.input[0])
    if (
        matmul.input[1] != scale_k.output[0]
        or scale_q is None
        or scale_q.op_type != "Mul"
        or scale_q.input[1] not in constants
        or scale_k.input[1] not in constants
    ):
        raise ValueError(f"{matmul.name}: the scores are not MatMul(Mul(q, c), Mul(K^T, c))")
    alpha = np.float32(1.0) * np.float32(constants[scale_q.input[1]]) * np.float32(constants[scale_k.input[1]])
    return scale_q.input[0], float(alpha)


def _set_dims(value: onnx.ValueInfoProto, order: list[int | None]) -> None:
    """Permute a value's dims (None: a static 1)."""
    dims = value.type.tensor_type.shape.dim
    old = [(d.dim_param, d.dim_value) for d in dims]
    for dim, source in zip(dims, order):
        param, size = old[source] if source is not None else ("", 1)
        dim.Clear()
        if param:
            dim.dim_param = param
        else:
            dim.dim_value = size
