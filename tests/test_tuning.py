"""The tuned runtime keeps the tokens: folding the key transposes, screened beam candidates, the lean and tuned
layouts and the weights file give the same tokens as the plain variants under the same session settings on the eval
set (tiny and the trained hsk-enzh), and the runtime's default SkipLayerNormFusion off keeps fp32's tokens (int8's
go through notebook 06's gate with it); the fold really removes the per-step key-cache transposes; the weights file
stores each tensor once and ORT maps it; the ablations report every step."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from conftest import tuned_variants
from mtonnx import data
from mtonnx.measure import ablation as ablations
from mtonnx.measure.probe import import_cost
from mtonnx.passes import weightfile
from mtonnx.passes.key_transposes import fold_key_transposes
from mtonnx.runtime import SessionSettings, Translator, layout, layouts
from mtonnx.runtime.sessions import ORT_DEFAULTS
from mtonnx.variants.build import build_variant, read_manifest
from mtonnx.variants.transforms import dynamic_int8, folded, with_cross_kv

EVAL = {"hsk_size": 12, "techdocs_size": 4, "eval_split": "test"}
FUSED = SessionSettings(**ORT_DEFAULTS)  # every ORT fusion on, SkipLayerNormFusion included


def key_transposes(path) -> int:
    """3-D Transposes (perm 0,2,1) left in the graph ORT actually runs (after its own fusions)."""
    with tempfile.TemporaryDirectory() as work:  # never next to the shared export: other tests list its files
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(work) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        graph = onnx.load(options.optimized_model_filepath, load_external_data=False).graph  # nodes only
    return sum(
        1
        for n in graph.node
        if n.op_type == "Transpose"
        and [list(onnx.helper.get_attribute_value(a)) for a in n.attribute if a.name == "perm"] == [[0, 2, 1]]
    )


@pytest.fixture(scope="module")
def tuned(dynamo_export, tmp_path_factory):
    work = tmp_path_factory.mktemp("tuned")
    return {"fp32": str(dynamo_export), **tuned_variants(dynamo_export, work, ("int8", "fp32-tuned", "int8-tuned"))}


def test_fold_removes_every_key_transpose_and_only_those(dynamo_export, tuned, tiny):
    layers = tiny[0].config.decoder_layers
    manifest = read_manifest(tuned["int8-tuned"])
    for file, per_layer in ((layout.ENCODER, 1), (layout.DECODER_WITH_PAST, 2)):
        model = onnx.load(str(dynamo_export / file))
        assert fold_key_transposes(model) == per_layer * layers, file  # self (+ cross) attention keys
        assert key_transposes(dynamo_export / file) == per_layer * layers
        assert key_transposes(f"{tuned['fp32-tuned']}/{file}") == 0
        assert key_transposes(f"{tuned['int8-tuned']}/{file}") == 0
    details = manifest["details"][layout.DECODER_WITH_PAST]
    assert details["folded_key_transposes"] == 2 * layers and details["integer_matmuls"] > 0
    cross = manifest["details"][layout.DECODER]
    assert cross["cross_kv_nodes"] > 0 and cross["cross_kv_mb"] < 0.5 * manifest["size_mb"][layout.DECODER]


@pytest.mark.parametrize("beams", [1, 4])
def test_every_tuning_step_keeps_the_tokens_on_tiny(tuned, beams):
    sources = [p.en for p in data.eval_set(EVAL)]
    for plain, tuned_key in (("fp32", "fp32-tuned"), ("int8", "int8-tuned")):
        before = Translator(tuned[plain]).translate(
            sources, num_beams=beams, max_new_tokens=16, screen_candidates=False
        )
        translator = Translator(tuned[tuned_key], decoder="tuned")
        assert translator.layout == "tuned" and layout.DECODER not in translator.sessions  # never loaded
        after = translator.translate(sources, num_beams=beams, max_new_tokens=16)
        assert after == before, plain
    fused = Translator(tuned["fp32"], session=FUSED).translate(sources, num_beams=beams, max_new_tokens=16)
    assert fused == Translator(tuned["fp32"]).translate(sources, num_beams=beams, max_new_tokens=16)


class CountedRun:
    """A decoding.Run that records how many rows each step fed."""

    def __init__(self, run):
        self.run, self.rows = run, []

    @property
    def narrow_first(self) -> bool:
        return getattr(self.run, "narrow_first", False)

    def step(self, tokens):
        self.rows.append(len(tokens))
        return self.run.step(tokens)

    def reorder(self, rows):
        self.run.reorder(rows)


def retired_and_full(translator: Translator, sources: list[str], beams: int, max_new_tokens: int = 24):
    """(ids, rows fed per step) decoded with and without retiring done sentences."""
    from mtonnx.runtime import decoding

    ids, mask = translator.tokenizer.batch(sources)
    out = []
    for retire in (True, False):
        settings = translator.settings.with_options(
            num_beams=beams, max_new_tokens=max_new_tokens, retire_finished=retire
        )
        run = CountedRun(translator.decoder.begin(ids, mask, expand=beams))
        out.append((decoding.generate(run, len(ids), settings), run.rows))
    return out


def assert_retired(retired, full, label):
    """The same tokens, the same number of steps, fewer rows fed once sentences are done."""
    (ids, rows), (full_ids, full_rows) = retired, full
    assert ids == full_ids, label
    assert len(rows) == len(full_rows) and len(set(full_rows[1:])) == 1, label
    assert rows[-1] < full_rows[-1] and sum(rows) < 0.9 * sum(full_rows), (label, sum(rows), sum(full_rows))


@pytest.mark.parametrize("beams", [1, 4])
def test_retiring_done_sentences_keeps_every_token_on_tiny(tuned, beams):
    """Every layout (split files, lean with per-sentence cross K/V, tuned time-major keys) gives each sentence the
    tokens it gets when every row is decoded to the end; greedy rows leave once they hit eos (the random tiny
    model's beams rarely settle before the limit: the trained model's test below shrinks beam batches)."""
    sources = [p.en for p in data.eval_set(EVAL)]
    layouts = ((tuned["fp32"], "auto"), *((tuned["fp32-tuned"], d) for d in ("lean", "tuned", "inplace")))
    for directory, decoder in layouts:
        retired, full = retired_and_full(Translator(directory, decoder=decoder), sources, beams)
        assert len({len(t) for t in full[0]}) >= 2  # sentences end at different steps
        if beams == 1:
            assert_retired(retired, full, decoder)
        else:
            assert retired[0] == full[0], decoder


def test_tuned_step_gives_bit_identical_logits_and_the_same_beams_past_the_buffer(tuned):
    """decoder_with_past_tuned.onnx against decoder_with_past_model.onnx step by step, with 2 beams per sentence
    taking different tokens (keys fed time-major, cross K/V once per sentence), then whole decodes longer than
    the 32-position starting key buffer, beams reordering it."""
    from mtonnx.runtime.sessions import make_session
    from mtonnx.runtime.tokenizer import pad

    directory = Path(tuned["int8-tuned"])
    model = onnx.load(str(directory / layout.TUNED_STEP), load_external_data=False)
    assert {p.key: p.value for p in model.metadata_props} == {
        "mtonnx.self_attention_keys": "time-major",
        "mtonnx.cross_attention": "per-sentence",
    }
    assert not any(n.op_type == "Concat" and any(i.endswith(".decoder.key") for i in n.input) for n in model.graph.node)
    lean = Translator(directory, decoder="lean")
    d, beams = lean.decoder, 2
    plain, rewritten = d.with_past, make_session(directory / layout.TUNED_STEP)
    names = {kind: layout.past_names(d.layers, (kind,)) for kind in layout.KV}
    sources = [p.en for p in data.eval_set(EVAL)]
    ids, mask = pad([lean.tokenizer.encode(text) for text in sources[:3]], lean.tokenizer.pad_token_id)
    run = d.begin(ids, mask)  # the encoder and each sentence's cross K/V
    rows = beams * len(ids)
    empty = np.zeros((rows, d.heads, 0, d.head_dim), np.float32)
    keys, values, keys_tm = [empty] * d.layers, [empty] * d.layers, [empty.transpose(2, 0, 1, 3)] * d.layers
    rng = np.random.default_rng(0)
    tokens = np.full((rows, 1), lean.settings.decoder_start_token_id)
    for _ in range(6):
        feeds = {"input_ids": tokens, "encoder_attention_mask": np.repeat(run.mask, beams, axis=0)}
        cross = {
            **dict(zip(names[layout.CROSS_KEY], run.cache.cross_keys)),
            **dict(zip(names[layout.CROSS_VALUE], run.cache.cross_values)),
        }
        feeds.update(zip(names[layout.SELF_VALUE], values))
        logits, *present = plain.run(
            d.step_outputs,
            {
                **feeds,
                **dict(zip(names[layout.SELF_KEY], keys)),
                **{k: np.repeat(v, beams, axis=0) for k, v in cross.items()},
            },
        )
        logits_tuned, *present_tuned = rewritten.run(
            d.step_outputs, {**feeds, **cross, **dict(zip(names[layout.SELF_KEY], keys_tm))}
        )
        assert np.array_equal(logits, logits_tuned)
        plain_kinds, tuned_kinds = layout.by_kind(present, layout.SELF), layout.by_kind(present_tuned, layout.SELF)
        keys, values = plain_kinds[layout.SELF_KEY], plain_kinds[layout.SELF_VALUE]
        assert all(np.array_equal(a, b) for a, b in zip(values, tuned_kinds[layout.SELF_VALUE]))
        keys_tm = [
            np.concatenate([past, new.transpose(2, 0, 1, 3)])
            for past, new in zip(keys_tm, tuned_kinds[layout.SELF_KEY])
        ]
        assert all(np.array_equal(a.transpose(2, 0, 1, 3), b) for a, b in zip(keys, keys_tm))
        tokens = rng.integers(0, logits.shape[-1], (rows, 1))
    for beams in (1, 4):
        settings = {"num_beams": beams, "max_new_tokens": 40, "min_length": 41}
        assert Translator(directory, decoder="tuned").translate(sources, **settings) == lean.translate(
            sources, **settings
        ), beams


def test_inplace_step_attends_as_the_tuned_step_through_beams_retirement_and_growth(tuned, monkeypatch):
    """The in-place step (GroupQueryAttention over bound buffers) against the tuned step, fed the same tokens for
    more steps than the buffers' starting capacity: the first reorder widens one row per sentence to 2 beams,
    later reorders move rows, one drops a sentence; logits agree within float32 rounding of the attention (two
    kernels: ~1-2e-5 a step on the tiny model's logits of up to ~12, a few steps up to 1.1e-4). The
    buffers start as NaN where not yet filled: the step must read only the filled positions."""
    from mtonnx.runtime import inplace as runtime_inplace
    from mtonnx.runtime.inplace import CAPACITY

    monkeypatch.setattr(runtime_inplace, "_buffer", lambda shape: np.full(shape, np.nan, np.float32))

    directory = Path(tuned["fp32-tuned"])
    model = onnx.load(str(directory / layout.INPLACE_STEP), load_external_data=False)
    assert {p.key: p.value for p in model.metadata_props} == {
        "mtonnx.self_attention_keys": "in-place",
        "mtonnx.cross_attention": "per-sentence",
    }
    layers = layout.layers_of([i.name for i in model.graph.input])
    attentions = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(attentions) == layers and all(list(n.input[1:3]) == ["", ""] for n in attentions)  # q, k, v packed
    assert sum(n.op_type == "MultiHeadAttention" for n in model.graph.node) == layers  # cross-attention
    assert not any(n.op_type == "Softmax" for n in model.graph.node)  # no attention left unfused
    assert not any(n.op_type == "Concat" and any(".decoder." in i for i in n.input) for n in model.graph.node)
    inplace, plain = Translator(directory, decoder="inplace"), Translator(directory, decoder="tuned")
    sources = [p.en for p in data.eval_set(EVAL)][:3]
    ids, mask = inplace.tokenizer.batch(sources)
    runs = [t.decoder.begin(ids, mask, expand=2) for t in (inplace, plain)]
    rng = np.random.default_rng(0)
    rows, tokens, differences = 3, np.full(3, inplace.settings.decoder_start_token_id), []
    for step in range(CAPACITY + 8):
        a, b = (run.step(tokens) for run in runs)
        assert np.isfinite(a).all(), step  # (max() would skip a NaN difference)
        differences.append(float(np.abs(a - b).max()))
        if step == 0:
            order = np.repeat(np.arange(rows), 2)  # row = sentence -> its 2 beams
            rows *= 2
        elif step == 20:
            order = np.arange(2, rows)  # the first sentence retires
            rows -= 2
        else:
            order = np.arange(rows) ^ rng.integers(0, 2, rows)  # beams of a sentence swap (or not)
        for run in runs:
            run.reorder(order)
        tokens = rng.integers(4, a.shape[-1], rows)
    assert max(differences) < 2e-4 and np.median(differences) < 3e-5, differences


@pytest.mark.parametrize("variant", ["fp32-tuned", "int8-tuned"])
def test_packed_qkv_gives_the_three_projections_bit_for_bit(tuned, variant, tmp_path):
    """The in-place step with q, k and v from one packed projection against the same step fed by the three
    projections: every logit the same bit for bit through widening, reorders and growth (int8: each column keeps
    its own projection's weight scale)."""
    from mtonnx.passes.inplace_attention import fused_cross_attention, inplace_self_attention
    from mtonnx.passes.tuned_step import finish_step
    from mtonnx.runtime.inplace import CAPACITY

    source = Path(tuned[variant])
    unpacked = tmp_path / variant
    shutil.copytree(source, unpacked)
    (unpacked / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    model = onnx.load(str(source / layout.DECODER_WITH_PAST))
    inplace_self_attention(model)
    fused_cross_attention(model)
    finish_step(model, {layout.SELF_KEYS_KEY: layout.SELF_CACHE_IN_PLACE})
    onnx.save(model, str(unpacked / layout.INPLACE_STEP))
    assert sum(n.op_type == "GroupQueryAttention" and n.input[1] != "" for n in model.graph.node) > 0
    packed, plain = Translator(source, decoder="inplace"), Translator(unpacked, decoder="inplace")
    ids, mask = packed.tokenizer.batch([p.en for p in data.eval_set(EVAL)][:3])
    runs = [t.decoder.begin(ids, mask, expand=2) for t in (packed, plain)]
    rng = np.random.default_rng(1)
    rows, tokens = 3, np.full(3, packed.settings.decoder_start_token_id)
    for step in range(CAPACITY + 4):
        a, b = (run.step(tokens).copy() for run in runs)
        assert np.array_equal(a, b), (step, float(np.abs(a - b).max()))
        order = np.repeat(np.arange(rows), 2) if step == 0 else np.arange(rows) ^ rng.integers(0, 2, rows)
        rows = len(order)
        for run in runs:
            run.reorder(order)
        tokens = rng.integers(4, a.shape[-1], rows)


def test_inplace_step_needs_a_head_dim_that_gqa_takes(tuned):
    from mtonnx.passes.inplace_attention import inplace_self_attention

    model = onnx.load(str(Path(tuned["fp32-tuned"]) / layout.DECODER_WITH_PAST), load_external_data=False)
    for value in model.graph.input:
        if value.name.endswith(layout.SELF_KEY):
            value.type.tensor_type.shape.dim[3].dim_value = 12
    with pytest.raises(ValueError, match="head_dim 12: ONNX Runtime's GroupQueryAttention needs a multiple of 8"):
        inplace_self_attention(model)


def test_every_tuning_step_keeps_the_tokens_on_the_trained_model(hsk_export, tmp_path_factory):
    work = tmp_path_factory.mktemp("hsk-tuned")
    tuned = tuned_variants(hsk_export, work, ("int8", "fp32-tuned", "int8-tuned"))
    sources = [p.en for p in data.eval_set({"hsk_size": 48, "techdocs_size": 8, "eval_split": "test"})]
    for beams in (1, 4):
        for plain, tuned_key in ((hsk_export, "fp32-tuned"), (work / "variants" / "int8", "int8-tuned")):
            before = Translator(plain).translate(sources, num_beams=beams, screen_candidates=False)
            after = Translator(tuned[tuned_key], decoder="tuned").translate(sources, num_beams=beams)
            assert after == before, (beams, tuned_key)
            inplace = Translator(tuned[tuned_key]).translate(sources, num_beams=beams)  # the default layout
            same = sum(a == b for a, b in zip(inplace, after))
            assert same == len(sources) if tuned_key == "fp32-tuned" else same >= 0.95 * len(sources), (beams, same)
        fused = Translator(tuned["fp32-tuned"], session=FUSED).translate(sources, num_beams=beams)
        assert fused == Translator(tuned["fp32-tuned"]).translate(sources, num_beams=beams), beams
    for decoder in ("lean", "tuned", "inplace"):  # beam 4 batches shrink as sentences settle, every token kept
        retired, full = retired_and_full(Translator(tuned["fp32-tuned"], decoder=decoder), sources[:16], 4, 48)
        assert_retired(retired, full, decoder)


def test_ablation_reports_every_step_for_every_config(tuned):
    from mtonnx.runtime import MarianSpmTokenizer

    tokenizer = MarianSpmTokenizer(tuned["fp32"])
    rows = [tokenizer.encode(p.en) for p in data.eval_set({"hsk_size": 3, "techdocs_size": 0, "eval_split": "test"})]
    results = ablations.ablation(tuned, rows, [(1, 1), (2, 4)], tokens=6, warmup=1, repeats=1)
    assert [(r["step"], r["batch"], r["beams"]) for r in results] == [
        (step.label, b, k) for b, k in [(1, 1), (2, 4)] for step in ablations.STEPS
    ]
    assert all(r["speedup"] == 1.0 for r in results if r["step"] == ablations.STEPS[0].label)
    assert all(r["same_tokens_as_previous"] for r in results if r["kept"] and r["exact"])
    exact = [True] * (len(ablations.STEPS) - 3) + [False, True, False]
    assert [r["exact"] for r in results[: len(ablations.STEPS)]] == exact
    assert all(r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in results)


def test_weights_file_stores_each_tensor_once_and_keeps_every_value(dynamo_export, tuned, tmp_path):
    inline = tmp_path / "inline"
    build_variant("inline", dynamo_export, inline, with_cross_kv(folded(dynamic_int8())), {})
    directory = Path(tuned["int8-tuned"])
    locations = {}
    for file in sorted(p.name for p in inline.glob("*.onnx")):
        expected = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(inline / file)).graph.initializer}
        model = onnx.load(str(directory / file))  # reads weights.bin back
        assert {t.name for t in model.graph.initializer} == set(expected), file
        for t in model.graph.initializer:
            assert np.array_equal(numpy_helper.to_array(t), expected[t.name]), (file, t.name)
        for t in onnx.load(str(directory / file), load_external_data=False).graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                info = {e.key: e.value for e in t.external_data}
                assert info["location"] == weightfile.WEIGHTS and int(info["offset"]) % weightfile.ALIGN == 0
                locations.setdefault(file, {})[t.name] = info["offset"]
    # the tied table: the encoder's and the decoder's embedding Gathers read the same bytes of weights.bin
    gathers = {
        file: next(
            n.input[0]
            for n in onnx.load(str(directory / file), load_external_data=False).graph.node
            if n.op_type == "Gather" and ("embed_tokens" in n.input[0] or n.input[0] == "lm_head.weight")
        )
        for file in (layout.ENCODER, layout.DECODER_WITH_PAST)
    }
    offsets = {locations[file][name] for file, name in gathers.items()}
    assert len(offsets) == 1, gathers
    inline_bytes = sum((inline / f).stat().st_size for f in locations)
    assert (
        directory / weightfile.WEIGHTS
    ).stat().st_size < 0.6 * inline_bytes  # decoder_model's layers stored once too
    with pytest.raises(ValueError, match="already has weights.bin"):
        weightfile.externalize(directory)


def test_ort_maps_the_weights_file_instead_of_copying_it(tmp_path):
    """A 64 MB embedding table: inline, ORT holds a copy after load; in weights.bin, only the rows read."""
    table = np.random.default_rng(0).standard_normal((32768, 512)).astype(np.float32)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Gather", ["table", "ids"], ["rows"])],
        "embedding",
        [onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["n"])],
        [onnx.helper.make_tensor_value_info("rows", onnx.TensorProto.FLOAT, ["n", 512])],
        [numpy_helper.from_array(table, "table")],
    )
    for name in ("inline", "mapped"):
        (tmp_path / name).mkdir()
        onnx.save(
            onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)]),
            str(tmp_path / name / "model.onnx"),
        )
    weightfile.externalize(tmp_path / "mapped")
    rss = {}
    for name in ("inline", "mapped"):
        code = (
            f"import numpy as np, onnxruntime as ort\n"
            f"s = ort.InferenceSession({str(tmp_path / name / 'model.onnx')!r}, providers=['CPUExecutionProvider'])\n"
            f"s.run(None, {{'ids': np.array([3, 30000])}})[0].sum()"
        )
        rss[name] = import_cost(code, repeats=1)["rss_mb"]
    assert rss["inline"] - rss["mapped"] > 48, rss


def test_memory_ablation_measures_every_step(tuned):
    rows = ablations.memory_ablation(tuned)
    assert [r["step"] for r in rows] == [label for label, _, _ in ablations.MEMORY_STEPS]
    assert all(r["rss_mb"] > 0 for r in rows)  # a torch.export variant has every layout


@pytest.mark.parametrize("option", list(ablations.REAL_LENGTH_OPTIONS))
def test_real_length_options_measure_the_corpus_with_and_without(tuned, option):
    from mtonnx.runtime import MarianSpmTokenizer

    tokenizer = MarianSpmTokenizer(tuned["int8-tuned"])
    rows = [tokenizer.encode(p.en) for p in data.eval_set(EVAL)]
    result = ablations.real_lengths(tuned["int8-tuned"], rows, 8, 1, 24, option, repeats=2)
    assert (result["option"], result["batch"], result["beams"], result["sentences"]) == (option, 8, 1, len(rows))
    assert result["sentences_per_s"] > 0 and result["sentences_per_s_without"] > 0
    assert set(result["speedup"]) == {"median", "min", "max"} and 0 <= result["same_tokens"] <= len(rows)
    with pytest.raises(ValueError, match="option must be one of retire_finished, group_encoder, got 'x'"):
        ablations.real_lengths(tuned["int8-tuned"], rows, 8, 1, 24, "x")


def test_search_head_ranks_as_numpy_with_ties_to_the_lower_column(tuned):
    from mtonnx.passes.search_head import search_head_model

    assert all((Path(tuned[name]) / layout.SEARCH_HEAD).is_file() for name in ("fp32-tuned", "int8-tuned"))
    assert Translator(tuned["int8-tuned"]).decoder.head is not None
    session = ort.InferenceSession(search_head_model().SerializeToString(), providers=["CPUExecutionProvider"])
    logits = np.round(np.random.default_rng(0).standard_normal((5, 300)) * 2).astype(np.float32)  # many exact ties
    values, cols = session.run(list(layout.HEAD_OUTPUTS), {"logits": logits, layout.HEAD_TOP_K: np.array([12])})
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    expected = np.array([np.lexsort((np.arange(300), -row))[:12] for row in log_probs])
    np.testing.assert_array_equal(cols, expected)
    np.testing.assert_allclose(values, np.take_along_axis(log_probs, expected, axis=1), atol=1e-6)


def test_length_groups_bound_the_padding_and_take_every_row_once():
    from mtonnx.runtime.decoders import PADDING, length_groups
    from mtonnx.runtime.tokenizer import pad

    lengths = [3, 9, 4, 9, 20, 2, 8, 57, 7, 7]
    _, mask = pad([[1] * n for n in lengths], 0)
    groups = length_groups(mask)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(lengths)))
    assert len(groups) > 1 and [lengths[g[-1]] for g in groups] == sorted(lengths[g[-1]] for g in groups)
    for group in groups:
        real = sum(lengths[i] for i in group)
        assert real >= (1 - PADDING) * len(group) * max(lengths[i] for i in group), group
    assert [g.tolist() for g in length_groups(mask[:, ::-1])] == [list(range(len(lengths)))]  # left-padded: whole


@pytest.mark.parametrize("beams", [1, 4])
def test_encoding_in_length_groups_keeps_fp32_tokens_and_the_encoder_output(tuned, beams):
    """The encoder on groups of similar length gives each row the output it gets in the whole batch (fp32, within
    float32 rounding) at its real positions, finite values at the others (the mask hides them), and the same tokens
    on every layout."""
    from mtonnx.runtime import decoders

    sources = [p.en for p in data.eval_set(EVAL)]
    translator = Translator(tuned["fp32-tuned"])
    ids, mask = translator.tokenizer.batch(sources)
    assert len(decoders.length_groups(mask)) > 1
    grouped = translator.decoder.encode(ids, mask)
    whole = translator.decoder.encode(ids, mask, grouped=False)
    assert np.abs((grouped - whole) * mask[:, :, None]).max() < 1e-5
    assert np.isfinite(grouped).all()
    settings = {"num_beams": beams, "max_new_tokens": 16, "batch_size": len(sources)}
    present = [e.name for e in layouts.REGISTRY if (Path(tuned["fp32-tuned"]) / e.files[-1]).is_file()]
    assert {"inplace", "tuned", "lean", "split"} <= set(present)
    expected = {name: Translator(tuned["fp32-tuned"], decoder=name).translate(sources, **settings) for name in present}
    assert len({tuple(t) for t in expected.values()}) == 1  # every layout: the same tokens
    for name, translations in expected.items():
        whole_batch = Translator(tuned["fp32-tuned"], decoder=name).translate(sources, group_encoder=False, **settings)
        assert whole_batch == translations, name
