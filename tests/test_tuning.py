"""The tuned runtime keeps the tokens: folding the key transposes, screened beam candidates and (fp32 only)
ORT's SkipLayerNormFusion off give the same tokens as the unoptimized runtime on the eval set (tiny and the
trained hsk-enzh); the fold really removes the per-step key-cache transposes; the ablation reports every step."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from mtonnx import data, export, models, quantize, tuning
from mtonnx.runtime import SessionSettings, Translator

EVAL = {"hsk_size": 12, "techdocs_size": 4, "eval_split": "test"}
UNTUNED = SessionSettings()
TUNED = {"fp32-tuned": SessionSettings(**tuning.FP32_SESSION), "int8-tuned": SessionSettings(**tuning.INT8_SESSION)}


def key_transposes(path) -> int:
    """3-D Transposes (perm 0,2,1) left in the graph ORT actually runs (after its own fusions)."""
    with tempfile.TemporaryDirectory() as work:  # never next to the shared export: other tests list its files
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(work) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        graph = onnx.load(options.optimized_model_filepath).graph
    return sum(1 for n in graph.node if n.op_type == "Transpose"
               and [list(onnx.helper.get_attribute_value(a)) for a in n.attribute if a.name == "perm"] == [[0, 2, 1]])


@pytest.fixture(scope="module")
def tuned(dynamo_export, tmp_path_factory):
    work = tmp_path_factory.mktemp("tuned")
    quantize.build_variant("int8", dynamo_export, work / "variants" / "int8", quantize.dynamic_int8(), {})
    return {"fp32": str(dynamo_export), "int8": str(work / "variants" / "int8"), **tuning.build_tuned(dynamo_export, work)}


def test_fold_removes_every_key_transpose_and_only_those(dynamo_export, tuned, tiny):
    layers = tiny[0].config.decoder_layers
    manifest = json.loads((Path(tuned["int8-tuned"]) / quantize.MANIFEST).read_text())
    for file, per_layer in (("encoder_model.onnx", 1), ("decoder_with_past_model.onnx", 2)):
        model = onnx.load(str(dynamo_export / file))
        assert tuning.fold_key_transposes(model) == per_layer * layers, file  # self (+ cross) attention keys
        assert key_transposes(dynamo_export / file) == per_layer * layers
        assert key_transposes(f"{tuned['fp32-tuned']}/{file}") == 0
        assert key_transposes(f"{tuned['int8-tuned']}/{file}") == 0
    details = manifest["details"]["decoder_with_past_model.onnx"]
    assert details["folded_key_transposes"] == 2 * layers and details["integer_matmuls"] > 0
    cross = manifest["details"]["decoder_model.onnx"]
    assert cross["cross_kv_nodes"] > 0 and cross["cross_kv_mb"] < 0.5 * manifest["size_mb"]["decoder_model.onnx"]


@pytest.mark.parametrize("beams", [1, 4])
def test_every_tuning_step_keeps_the_tokens_on_tiny(tuned, beams):
    sources = [p.en for p in data.eval_set(EVAL)]
    for plain, tuned_key in (("fp32", "fp32-tuned"), ("int8", "int8-tuned")):
        before = Translator(tuned[plain], session=UNTUNED).translate(sources, num_beams=beams, max_new_tokens=16,
                                                                      screen_candidates=False)
        translator = Translator(tuned[tuned_key], session=TUNED[tuned_key])
        assert translator.layout == "lean"  # decoder_model.onnx is never loaded
        after = translator.translate(sources, num_beams=beams, max_new_tokens=16)
        assert after == before, plain


def test_every_tuning_step_keeps_the_tokens_on_the_trained_model(tmp_path_factory):
    work = tmp_path_factory.mktemp("hsk-tuned")
    source = models.TRAINED_DIR / "hsk-enzh"
    export.export_manual(source, work / "export_manual", exporter="dynamo")
    quantize.build_variant("int8", work / "export_manual", work / "variants" / "int8", quantize.dynamic_int8(), {})
    tuned = tuning.build_tuned(work / "export_manual", work)
    sources = [p.en for p in data.eval_set({"hsk_size": 48, "techdocs_size": 8, "eval_split": "test"})]
    for beams in (1, 4):
        for plain, tuned_key in ((work / "export_manual", "fp32-tuned"), (work / "variants" / "int8", "int8-tuned")):
            before = Translator(plain, session=UNTUNED).translate(sources, num_beams=beams, screen_candidates=False)
            after = Translator(tuned[tuned_key], session=TUNED[tuned_key]).translate(sources, num_beams=beams)
            assert after == before, (beams, tuned_key)


def test_ablation_reports_every_step_for_every_config(tuned):
    from mtonnx.runtime import MarianSpmTokenizer

    tokenizer = MarianSpmTokenizer(tuned["fp32"])
    rows = [tokenizer.encode(p.en) for p in data.eval_set({"hsk_size": 3, "techdocs_size": 0, "eval_split": "test"})]
    results = tuning.ablation(tuned, rows, [(1, 1), (2, 4)], tokens=6, warmup=1, repeats=1)
    assert [(r["step"], r["batch"], r["beams"]) for r in results] == [
        (step.label, b, k) for b, k in [(1, 1), (2, 4)] for step in tuning.STEPS]
    assert all(r["speedup"] == 1.0 for r in results if r["step"] == tuning.STEPS[0].label)
    assert all(r["same_tokens_as_previous"] for r in results if r["kept"])
    assert all(r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in results)
