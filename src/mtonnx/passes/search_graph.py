"""The search inside the graph: ONNX Runtime's BeamSearch contrib op (com.microsoft, model_type 1: encoder-decoder)
driving an export's own encoder and decoders, as onnxruntime.transformers' convert_generation.py builds it for T5.

The op runs the whole loop in C++ (log-softmax, processors, top-k, beam bookkeeping, cache reorder): no Python per
step. Its two subgraphs follow ORT's T5 contract (subgraph_t5_encoder.cc, subgraph_t5_decoder.cc):
- encoder: encoder_input_ids, encoder_attention_mask, decoder_input_ids (int32) -> logits, encoder_hidden_states,
  every layer's self K/V, then every layer's cross K/V: the export's encoder and decoder_model, merged;
- decoder: input_ids, encoder_attention_mask (int32), the self K/V of every layer, then the cross K/V -> logits and
  the new self K/V: the export's decoder_with_past, its inputs renamed and cast.
Hand-written because convert_generation.py exports T5 from PyTorch itself and cannot take an existing export. It
needs the split layout (the tuned step's time-major keys and per-sentence cross K/V are this project's runtime
contract, not ORT's), and it has no forced_eos_token_id: a sentence that reaches max_length ends without eos.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, compose, helper, numpy_helper

from mtonnx.runtime import layout

INT32 = TensorProto.INT32


def build_search_model(export_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Write out_dir/layout.SEARCH_MODEL for a split export directory (its encoder and both decoders), beside the
    export's config and tokenizer files, so the directory is what runtime.search_graph.SearchGraph loads; returns
    the layers, the vocabulary, the banned tokens and the file's bytes. Written to a temporary name, then moved."""
    src, out = Path(export_dir), Path(out_dir)
    encoder = onnx.load(str(src / layout.ENCODER))
    first = onnx.load(str(src / layout.DECODER))
    with_past = onnx.load(str(src / layout.DECODER_WITH_PAST))
    config = json.loads((src / "generation_config.json").read_text(encoding="utf-8"))
    layers = layout.layers_of([i.name for i in with_past.graph.input])
    vocab = with_past.graph.output[0].type.tensor_type.shape.dim[-1].dim_value
    if not vocab:
        raise ValueError(f"{layout.DECODER_WITH_PAST}: the logits' vocabulary dimension is not static")
    allowed = np.ones(vocab, np.int32)
    for (token,) in config.get("bad_words_ids") or []:
        allowed[token] = 0
    eos = config["eos_token_id"]
    node = helper.make_node(
        "BeamSearch",
        [
            "input_ids",
            "max_length",
            "min_length",
            "num_beams",
            "num_return_sequences",
            "length_penalty",
            "repetition_penalty",
            "vocab_mask",
            "",
            "attention_mask",
        ],
        ["sequences"],
        domain="com.microsoft",
        model_type=1,
        decoder_start_token_id=config["decoder_start_token_id"],
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        pad_token_id=config["pad_token_id"],
        early_stopping=int(config.get("early_stopping") is True),
        no_repeat_ngram_size=0,
        vocab_size=vocab,
        encoder=_encoder_subgraph(encoder, first, layers),
        decoder=_decoder_subgraph(with_past.graph, layers),
    )
    scalars = [("max_length", INT32), ("min_length", INT32), ("num_beams", INT32), ("num_return_sequences", INT32)]
    inputs = [
        helper.make_tensor_value_info("input_ids", INT32, ["batch", "source"]),
        *(helper.make_tensor_value_info(name, kind, [1]) for name, kind in scalars),
        helper.make_tensor_value_info("length_penalty", TensorProto.FLOAT, [1]),
        helper.make_tensor_value_info("repetition_penalty", TensorProto.FLOAT, [1]),
        helper.make_tensor_value_info("attention_mask", INT32, ["batch", "source"]),
    ]
    graph = helper.make_graph(
        [node],
        "beam_search",
        inputs,
        [helper.make_tensor_value_info("sequences", INT32, ["batch", "returned", "length"])],
        [numpy_helper.from_array(allowed, "vocab_mask")],
    )
    opsets = [helper.make_opsetid("", with_past.opset_import[0].version), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=with_past.ir_version)
    out.mkdir(parents=True, exist_ok=True)
    for name in [f for f in layout.MODEL_FILES if (src / f).is_file()]:
        shutil.copy2(src / name, out / name)
    partial = out / f"{layout.SEARCH_MODEL}.partial"
    onnx.save(model, str(partial))
    partial.replace(out / layout.SEARCH_MODEL)
    size = (out / layout.SEARCH_MODEL).stat().st_size
    return {"layers": layers, "vocab": vocab, "banned": int((allowed == 0).sum()), "bytes": size}


def _encoder_subgraph(encoder: onnx.ModelProto, first: onnx.ModelProto, layers: int) -> onnx.GraphProto:
    """The encoder and the first decoder step as one graph with ORT's T5 encoder names (int32 ids and mask)."""
    e, d = compose.add_prefix(encoder, "e/").graph, compose.add_prefix(first, "d/").graph
    nodes = [
        helper.make_node("Cast", ["encoder_input_ids"], ["e/input_ids"], to=TensorProto.INT64),
        helper.make_node("Cast", ["encoder_attention_mask"], ["e/attention_mask"], to=TensorProto.INT64),
        helper.make_node("Identity", ["e/attention_mask"], ["d/encoder_attention_mask"]),
        helper.make_node("Cast", ["decoder_input_ids"], ["d/input_ids"], to=TensorProto.INT64),
        *e.node,
        helper.make_node("Identity", ["e/last_hidden_state"], ["d/encoder_hidden_states"]),
        *d.node,
        helper.make_node("Identity", ["d/logits"], ["logits"]),
        helper.make_node("Identity", ["e/last_hidden_state"], ["encoder_hidden_states"]),
    ]
    outputs = ["logits", "encoder_hidden_states"]
    for name, old in _present_names(layers).items():
        nodes.append(helper.make_node("Identity", [f"d/{old}"], [name]))
        outputs.append(name)
    hidden = e.output[0].type.tensor_type
    shapes = {o.name.removeprefix("d/"): o.type.tensor_type for o in d.output}
    present = {name: shapes[old] for name, old in _present_names(layers).items()}
    return helper.make_graph(
        nodes,
        "encoder",
        [
            helper.make_tensor_value_info("encoder_input_ids", INT32, ["batch", "source"]),
            helper.make_tensor_value_info("encoder_attention_mask", INT32, ["batch", "source"]),
            helper.make_tensor_value_info("decoder_input_ids", INT32, ["batch", 1]),
        ],
        [
            _value("logits", shapes["logits"]),
            _value("encoder_hidden_states", hidden),
            *(_value(name, present[name]) for name in outputs[2:]),
        ],
        [*e.initializer, *d.initializer],
    )


def _decoder_subgraph(graph: onnx.GraphProto, layers: int) -> onnx.GraphProto:
    """decoder_with_past with ORT's T5 decoder names: int32 ids and mask, self K/V of all layers before cross."""
    inputs = {i.name: i for i in graph.input}
    past = {f"past_{kind}_{i}": f"past_key_values.{i}.{old}" for kind, old, i in _kinds(layers)}
    renamed = {
        "input_ids": "d/input_ids",
        "encoder_attention_mask": "d/encoder_attention_mask",
        **{old: name for name, old in past.items()},
    }
    present = {f"present.{i}.{old}": f"present_{kind}_{i}" for kind, old, i in _kinds(layers) if "self" in kind}
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["d/input_ids"], to=TensorProto.INT64),
        helper.make_node("Cast", ["encoder_attention_mask"], ["d/encoder_attention_mask"], to=TensorProto.INT64),
    ]
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [renamed.get(n, present.get(n, n)) for n in node.input]
        copy.output[:] = [present.get(n, n) for n in node.output]
        nodes.append(copy)
    outputs = [_value(present.get(o.name, o.name), o.type.tensor_type) for o in graph.output]
    return helper.make_graph(
        nodes,
        "decoder",
        [
            helper.make_tensor_value_info("input_ids", INT32, ["batch", 1]),
            helper.make_tensor_value_info("encoder_attention_mask", INT32, ["batch", "source"]),
            *(_value(name, inputs[old].type.tensor_type) for name, old in past.items()),
        ],
        outputs,
        list(graph.initializer),
    )


def _kinds(layers: int) -> list[tuple[str, str, int]]:
    """(ORT's kind, the export's kind, layer): every layer's self key and value, then every layer's cross ones."""
    pairs = (("key_self", "decoder.key"), ("value_self", "decoder.value"))
    cross = (("key_cross", "encoder.key"), ("value_cross", "encoder.value"))
    return [(k, o, i) for i in range(layers) for k, o in pairs] + [(k, o, i) for i in range(layers) for k, o in cross]


def _present_names(layers: int) -> dict[str, str]:
    """ORT's encoder output name -> decoder_model's present output name."""
    return {f"present_{kind}_{i}": f"present.{i}.{old}" for kind, old, i in _kinds(layers)}


def _value(name: str, tensor_type: onnx.TypeProto.Tensor) -> onnx.ValueInfoProto:
    """A value info named `name` with the given tensor type."""
    value = onnx.ValueInfoProto(name=name)
    value.type.tensor_type.CopyFrom(tensor_type)
    return value
