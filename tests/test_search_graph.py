"""The search inside the graph (ORT's BeamSearch op over the export's own graphs): the model it builds loads and
runs, follows the runtime token for token where the two searches have the same rules (eos banned until the forced
length: greedy and a width-1 beam search then take the same argmax path), and on the trained model's eval sentences
differs from the runtime's search in at most a stated few (ORT's beam scorer and its width-1 search are its own)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from mtonnx import data
from mtonnx.measure import benchmark
from mtonnx.measure.search_graph import same_tokens
from mtonnx.passes.search_graph import build_search_model
from mtonnx.runtime import MarianSpmTokenizer, ModelDirError, SearchGraph, Translator, families, layout
from mtonnx.runtime.tokenizer import pad

SENTENCES = {"hsk_size": 48, "techdocs_size": 8, "eval_split": "test"}
MAX_DIFFERING = 2  # of the 56 sentences, per beam count (the whole eval set: 1 of 471 greedy, 3 of 471 at beam 4)


@pytest.fixture(scope="module")
def search_dir(dynamo_export, tmp_path_factory):
    out = tmp_path_factory.mktemp("search") / "fp32"
    details = build_search_model(dynamo_export, out)
    assert details["banned"] == 1 and details["bytes"] == (out / layout.SEARCH_MODEL).stat().st_size
    return out


def rows_of(directory, spec):
    tokenizer = MarianSpmTokenizer(directory)
    return [tokenizer.encode(p.en) for p in data.eval_set(spec)]


def test_a_directory_without_the_model_says_how_to_build_it(dynamo_export):
    with pytest.raises(ModelDirError, match="build_search_model"):
        SearchGraph(dynamo_export)


def test_the_model_holds_one_beam_search_over_the_exports_graphs(search_dir, dynamo_export, tiny):
    model = onnx.load(str(search_dir / layout.SEARCH_MODEL))
    (node,) = model.graph.node
    assert (node.op_type, node.domain) == ("BeamSearch", "com.microsoft")
    graphs = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    layers = tiny[0].config.decoder_layers
    decoder = graphs["decoder"]
    assert [i.name for i in decoder.input[:4]] == [
        "input_ids",
        "encoder_attention_mask",
        "past_key_self_0",
        "past_value_self_0",
    ]
    assert decoder.input[2 + 2 * layers].name == "past_key_cross_0" and len(decoder.output) == 1 + 2 * layers
    assert [o.name for o in graphs["encoder"].output[:3]] == ["logits", "encoder_hidden_states", "present_key_self_0"]
    assert all((search_dir / f).is_file() for f in (*families.MARIAN.tokenizers[0].files, "generation_config.json"))


def test_forced_lengths_follow_the_runtime_token_for_token(search_dir, dynamo_export):
    rows = rows_of(dynamo_export, {"hsk_size": 5, "techdocs_size": 2, "eval_split": "test"})
    runtime, graph = Translator(dynamo_export, decoder="split"), SearchGraph(search_dir)
    ids, mask = pad(rows, runtime.settings.pad_token_id)
    forced = {"max_new_tokens": 9, "min_length": 10}
    theirs, ours = graph.generate(ids, mask, num_beams=1, **forced), runtime.generate(ids, mask, num_beams=1, **forced)
    assert all(len(row) == 9 for row in theirs)  # no forced eos in ORT: the 9th token is the model's own
    assert [row[:-1] for row in theirs] == [row[:-1] for row in ours]  # the runtime's 9th is the forced eos
    wide = graph.generate(ids, mask, num_beams=2, **forced)  # ranked by ORT's scorer: compared on hsk-enzh below
    assert all(len(row) == 9 for row in wide) and np.asarray(wide).min() >= 0


def test_the_trained_model_keeps_the_runtimes_tokens_but_for_a_few(hsk_export, tmp_path):
    build_search_model(hsk_export, tmp_path / "search")
    rows = rows_of(hsk_export, SENTENCES)
    for beams in (1, 4):
        same = same_tokens(str(tmp_path / "search"), str(hsk_export), rows, beams, max_new_tokens=64, batch=8)
        assert same["of"] == len(rows) and same["same"] >= len(rows) - MAX_DIFFERING, (beams, same)
        assert len(same["differing"]) == min(len(rows) - same["same"], 3)


def test_metrics_name_each_config_and_engine():
    speed = [
        {"batch": 1, "beams": 1, "speedup vs mtonnx-int8": {"median": 1.5}, "speedup vs ct2-int8": {"median": 1.1}},
        {"batch": 8, "beams": 4, "speedup vs mtonnx-int8": None, "speedup vs ct2-int8": {"median": 0.8}},
    ]
    search = {"sentences": 7, "same_tokens": {1: {"same": 7}, 4: {"same": 6}}, "speed": speed}
    assert benchmark.search_graph_metrics(search) == {
        "sentences": 7,
        "same_tokens": {"beam1": 7, "beam4": 6},
        "speedup_vs_mtonnx_int8": {"b1": 1.5, "b8_beam4": None},
        "speedup_vs_ct2_int8": {"b1": 1.1, "b8_beam4": 0.8},
    }
