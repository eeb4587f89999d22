"""The in-place step: decoder_with_past's self-attention as ONNX Runtime's GroupQueryAttention over cache buffers
that the runtime owns and binds as both the past input and the present output, so no step copies the cache.

The tuned step (passes.tuned_step) reads the keys in place but still concatenates the values, a copy of the whole
value cache per layer per step: at batch 8 x beam 4 on hsk-enzh, Concat is a fifth of the step's kernel time.
GroupQueryAttention (com.microsoft, kv_num_heads = num_heads) appends the new key and value into the buffers at
position `total_sequence_length - 1` when past and present are the same memory, and attends over the filled prefix.
Its q, k and v come packed from one projection (`packed_qkv`, bit for bit the three), and each layer's
cross-attention is one MultiHeadAttention node over the sentence's own K/V (`fused_cross_attention`): at a small
model's scale a step is mostly per-node overhead, and these take out about two nodes in five.
The arithmetic is ORT's attention kernels instead of the exported MatMul / Softmax / MatMul (scores, softmax and the
weighted sum in another summation order): logits move by float32 rounding, so tokens can move and the variant
goes through the measured comparison (the tuning ablation) instead of the tuned step's bit-for-bit check.
Hand-written because no library pass targets torch.export graphs: onnxruntime.transformers' fusions match
TorchScript exports.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mtonnx.passes.graph import consumers_and_producers, replace_nodes, scalar_constants
from mtonnx.passes.tuned_step import (
    _chain,
    _query_and_alpha,
    cache_inputs,
    cross_attention,
    finish_step,
    per_sentence_inputs,
)
from mtonnx.runtime import layout

SEQLENS, TOTAL = layout.INPLACE_INPUTS  # per row: filled positions after this step - 1; scalar: filled after it
CAPACITY = "cache_capacity"  # the buffers' time axis: the runtime allocates and grows them


def inplace_step(model: onnx.ModelProto) -> dict[str, int]:
    """Self-attention in place (`inplace_self_attention`) from one packed projection (`packed_qkv`) and
    cross-attention per sentence, one node per layer (`fused_cross_attention`), in place, plus the metadata the
    runtime reads."""
    details = {
        "inplace_self_attention_layers": inplace_self_attention(model),
        "fused_cross_attention_layers": fused_cross_attention(model),
        "packed_qkv_layers": packed_qkv(model),
    }
    finish_step(model, {layout.SELF_KEYS_KEY: layout.SELF_CACHE_IN_PLACE})
    return details


def inplace_self_attention(model: onnx.ModelProto) -> int:
    """Replace each layer's self-attention (from the q/k/v projections to the input of out_proj) with one
    GroupQueryAttention node; returns the layers rewritten, ValueError if the graph does not match.

    Exported: q, k, v are [batch, 1, d] -> Reshape -> Transpose to [batch, heads, 1, head_dim]; present = Concat(past,
    new) for keys and values; scores MatMul(Mul(q, c), Mul(K^T, c)) (+ the causal mask, all zeros at one query),
    Softmax, MatMul with the values, Transpose, Reshape to [batch, 1, d]. GroupQueryAttention takes q, k, v in
    their [batch, 1, d] form, the scale c*c, and writes the [batch, 1, d] output. Reads of the past length
    (Shape of a past cache, dim 2: the position embedding's offset) become total_sequence_length - 1: the buffers'
    time axis is their capacity.
    """
    graph = model.graph
    consumers, producers = consumers_and_producers(graph)
    constants = scalar_constants(graph)
    past_keys, heads, head_dim = cache_inputs(graph, layout.SELF_KEY)
    if head_dim % 8:
        raise ValueError(f"head_dim {head_dim}: ONNX Runtime's GroupQueryAttention needs a multiple of 8")
    past_values = [i.name.replace(layout.SELF_KEY, layout.SELF_VALUE) for i in past_keys]
    added, removed = _past_length_reads(graph, [i.name for i in past_keys] + past_values, consumers)
    for key, value in zip((i.name for i in past_keys), past_values):
        key_concat, transpose, scale_k, scores = _chain(key, consumers, ("Concat", "Transpose", "Mul", "MatMul"))
        (value_concat,) = _chain(value, consumers, ("Concat",))
        query, alpha = _query_and_alpha(scores, scale_k, producers, constants)
        weighted = [n for n in consumers.get(value_concat.output[0], []) if n.op_type == "MatMul"]
        if len(weighted) != 1:
            raise ValueError(f"{value}: expected one MatMul(weights, present value)")
        _, back = _chain(weighted[0].output[0], consumers, ("Transpose", "Reshape"))
        present_key, present_value = key_concat.output[0], value_concat.output[0]
        added.append(
            helper.make_node(
                "GroupQueryAttention",
                [
                    _unheaded(query, producers),
                    _unheaded(key_concat.input[1], producers),
                    _unheaded(value_concat.input[1], producers),
                    key,
                    value,
                    SEQLENS,
                    TOTAL,
                ],
                [back.output[0], present_key, present_value],
                domain="com.microsoft",
                num_heads=heads,
                kv_num_heads=heads,
                scale=alpha,
            )
        )
        removed += [key_concat, value_concat, back]
    replace_nodes(graph, removed, added)
    graph.input.extend(
        [
            helper.make_tensor_value_info(SEQLENS, onnx.TensorProto.INT32, ["batch_size"]),
            helper.make_tensor_value_info(TOTAL, onnx.TensorProto.INT32, []),
        ]
    )
    for value in [*graph.input, *graph.output]:
        if value.name.endswith((f".{layout.SELF_KEY}", f".{layout.SELF_VALUE}")):
            time = value.type.tensor_type.shape.dim[2]
            time.Clear()
            time.dim_param = CAPACITY
    return len(past_keys)


def fused_cross_attention(model: onnx.ModelProto) -> int:
    """Replace each layer's cross-attention (from the query projection to the input of out_proj) with one ORT
    MultiHeadAttention node over the sentence's own K/V; returns the layers rewritten, ValueError if no match.

    The cross K/V inputs become per sentence ([sentences, heads, src_len, head_dim], decoder_cross_kv's output,
    which the op takes as they are); a sentence's beams are the op's query positions ([sentences, beams, d]: the
    rows reshaped), and the padding mask is the first beam's row of encoder_attention_mask (every beam of a
    sentence has its mask). At hsk-enzh scale a step is mostly per-node overhead: the exported attention plus
    passes.tuned_step.shared_cross_attention's reshapes are 14 nodes per layer, this is one.
    """
    graph = model.graph
    consumers, producers = consumers_and_producers(graph)
    constants = scalar_constants(graph)
    keys, heads, head_dim = cache_inputs(graph, layout.CROSS_KEY)
    ints = {"mha.minus1": -1, "mha.one": 1, "mha.width": heads * head_dim}
    graph.initializer.extend(numpy_helper.from_array(np.array([v], np.int64), n) for n, v in ints.items())
    graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "mha.first"))
    added = [
        helper.make_node("Shape", [keys[0].name], ["mha.sentences"], start=0, end=1),
        helper.make_node("Concat", ["mha.sentences", "mha.minus1", "mha.width"], ["mha.query_shape"], axis=0),
        helper.make_node("Concat", ["mha.minus1", "mha.one", "mha.width"], ["mha.rows_shape"], axis=0),
        helper.make_node("Shape", ["encoder_attention_mask"], ["mha.src_len"], start=1, end=2),
        helper.make_node("Concat", ["mha.sentences", "mha.minus1", "mha.src_len"], ["mha.mask_shape"], axis=0),
        helper.make_node("Reshape", ["encoder_attention_mask", "mha.mask_shape"], ["mha.mask_beams"]),
        helper.make_node("Gather", ["mha.mask_beams", "mha.first"], ["mha.mask_first"], axis=1),
        helper.make_node("Cast", ["mha.mask_first"], ["mha.mask"], to=onnx.TensorProto.INT32),
    ]
    removed = []
    for key in keys:
        value, (*_, weighted), query, alpha = cross_attention(key.name, consumers, producers, constants)
        _, back = _chain(weighted.output[0], consumers, ("Transpose", "Reshape"))
        s = f"mha.{key.name}."
        added += [
            helper.make_node("Reshape", [_unheaded(query, producers), "mha.query_shape"], [s + "query"]),
            helper.make_node(
                "MultiHeadAttention",
                [s + "query", key.name, value, "", "mha.mask"],
                [s + "out"],
                domain="com.microsoft",
                num_heads=heads,
                scale=alpha,
            ),
            helper.make_node("Reshape", [s + "out", "mha.rows_shape"], [back.output[0]]),
        ]
        removed.append(back)
    replace_nodes(graph, removed, added)
    per_sentence_inputs(graph)
    return len(keys)


def packed_qkv(model: onnx.ModelProto) -> int:
    """Feed each GroupQueryAttention its q, k and v as one packed input, from one projection whose weights are the
    three side by side; returns the layers rewritten, ValueError if a projection does not match.

    Exported (and dynamically quantized, which quantizes their shared input once), the three projections are three
    MatMuls of [d, d]: at hsk-enzh scale, node overhead. The packed one computes each column as before: fp32 the
    same dot products; int8 the same integer sums, each column scaled by its own projection's weight scale (a
    per-column scale, which ORT's integer MatMul takes), so the packed outputs are the three outputs, bit for bit.
    """
    graph = model.graph
    _, producers = consumers_and_producers(graph)
    initializers = {i.name: i for i in graph.initializer}
    attentions = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    added = []
    for attention in attentions:
        parts = [_projection(name, producers, initializers) for name in attention.input[:3]]
        if len({(p["kind"], *p["shared"]) for p in parts}) != 1:
            raise ValueError(f"{attention.name}: q, k and v are not projections of one input")
        s = f"packed.{attention.input[3]}."
        weights = [numpy_helper.to_array(initializers[p["weight"]]) for p in parts]
        bias = np.concatenate([numpy_helper.to_array(initializers[p["bias"]]) for p in parts])
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.concatenate(weights, axis=1), s + "weight"),
                numpy_helper.from_array(bias, s + "bias"),
            ]
        )
        source = parts[0]["shared"]
        if parts[0]["kind"] == "fp32":
            added.append(helper.make_node("MatMul", [source[0], s + "weight"], [s + "projected"]))
        else:
            zero_points = {numpy_helper.to_array(initializers[p["zero_point"]]).item() for p in parts}
            if zero_points != {0}:
                raise ValueError(f"{attention.name}: int8 weights with a zero point other than 0")
            scales = [
                np.full(w.shape[1], numpy_helper.to_array(initializers[p["scale"]]), np.float32)
                for w, p in zip(weights, parts)
            ]
            graph.initializer.append(numpy_helper.from_array(np.concatenate(scales), s + "weight_scale"))
            added += [
                helper.make_node(
                    "MatMulInteger", [source[0], s + "weight", source[1], parts[0]["zero_point"]], [s + "integer"]
                ),
                helper.make_node("Cast", [s + "integer"], [s + "float"], to=onnx.TensorProto.FLOAT),
                helper.make_node("Mul", [source[2], s + "weight_scale"], [s + "scale"]),
                helper.make_node("Mul", [s + "float", s + "scale"], [s + "projected"]),
            ]
        added.append(helper.make_node("Add", [s + "projected", s + "bias"], [s + "qkv"]))
        attention.input[0], attention.input[1], attention.input[2] = s + "qkv", "", ""
    graph.node.extend(added)
    return len(attentions)


def _projection(name: str, producers: dict[str, onnx.NodeProto], initializers: dict) -> dict[str, Any]:
    """Add(MatMul(x, W), b), or dynamic int8's Add(Mul(Cast(MatMulInteger(xq, W, x_zp, W_zp)), Mul(x_scale,
    W_scale)), b): the kind, what the projections of one input share, and the weight's initializers."""
    add = producers.get(name)
    product = producers.get(add.input[0]) if add is not None and add.op_type == "Add" else None
    if product is not None and add.input[1] in initializers:
        if product.op_type == "MatMul" and product.input[1] in initializers:
            return {"kind": "fp32", "shared": (product.input[0],), "weight": product.input[1], "bias": add.input[1]}
        cast, scales = (producers.get(i) for i in product.input) if product.op_type == "Mul" else (None, None)
        integer = producers.get(cast.input[0]) if cast is not None and cast.op_type == "Cast" else None
        if (
            integer is not None
            and integer.op_type == "MatMulInteger"
            and scales is not None
            and scales.op_type == "Mul"
        ):
            return {
                "kind": "int8",
                "shared": (integer.input[0], integer.input[2], scales.input[0]),
                "weight": integer.input[1],
                "zero_point": integer.input[3],
                "scale": scales.input[1],
                "bias": add.input[1],
            }
    raise ValueError(f"{name}: not a projection (Add(MatMul(x, W), b) or its dynamic int8 form)")


def _unheaded(heads_major: str, producers: dict[str, onnx.NodeProto]) -> str:
    """[batch, heads, 1, head_dim] = Transpose(Reshape(x)) -> x, the projection's [batch, 1, d] output."""
    transpose = producers.get(heads_major)
    reshape = producers.get(transpose.input[0]) if transpose is not None and transpose.op_type == "Transpose" else None
    if reshape is None or reshape.op_type != "Reshape":
        raise ValueError(f"{heads_major}: expected Transpose(Reshape(projection))")
    return reshape.input[0]


def _past_length_reads(graph: onnx.GraphProto, pasts: list[str], consumers) -> tuple[list, list]:
    """Every Shape node that reads a self-attention past's time axis now computes total_sequence_length - 1."""
    reads = [n for past in pasts for n in consumers.get(past, []) if n.op_type == "Shape" and 2 in range(*_dims(n))]
    if not reads:
        return [], []
    for n in reads:
        if _dims(n) != (2, 3):
            raise ValueError(f"{n.name} reads more than the past length of {n.input[0]}")
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([0], np.int64), "inplace.axis0"),
            numpy_helper.from_array(np.array([1], np.int64), "inplace.one"),
        ]
    )
    added = [
        helper.make_node("Cast", [TOTAL], ["inplace.total64"], to=onnx.TensorProto.INT64),
        helper.make_node("Unsqueeze", ["inplace.total64", "inplace.axis0"], ["inplace.total_1d"]),
    ]
    added += [helper.make_node("Sub", ["inplace.total_1d", "inplace.one"], [n.output[0]]) for n in reads]
    return added, reads


def _dims(shape: onnx.NodeProto) -> tuple[int, int]:
    """The [start, end) of the 4-D cache dims a Shape node reads."""
    bounds = {a.name: a.i for a in shape.attribute}
    return bounds.get("start", 0), bounds.get("end", 4)
