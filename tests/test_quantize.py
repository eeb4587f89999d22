"""Quantized variants: each builds and translates; the lm_head fix makes the logits MatMul integer where the
naive call dequantizes the embedding every step; subgraph quantization really shrinks the merged decoder;
calibration feeds match the sessions; the quality gate flags a damaged variant."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mtonnx import data, quant_eval, quantize
from mtonnx.runtime import SessionSettings, Translator

SOURCES = [p.en for p in data.eval_set({"hsk_size": 6, "techdocs_size": 2, "eval_split": "test"})]
CALIBRATION = data.calibration_set({"calibration_size": 8})


@pytest.fixture(scope="module")
def feeds(hand_export):
    return quantize.capture_feeds(hand_export, CALIBRATION, max_new_tokens=6)


def recipes(feeds):
    return {
        "fp32": quantize.copy_fp32, "fp32-ortopt": quantize.ort_optimized(4, 64), "int8-naive": quantize.naive_int8,
        "int8": quantize.dynamic_int8(), "int8-per-channel": quantize.dynamic_int8(per_channel=True),
        "int8-with-embeddings": quantize.dynamic_int8(op_types=("MatMul", "Gather")),
        "int8-static": quantize.static_int8(feeds), "fp16": quantize.fp16,
        "static-enc-dynamic-dec": quantize.per_file(quantize.static_int8(feeds), quantize.dynamic_int8()),
        "lm_head-only": quantize.dynamic_int8(groups=("lm_head",)),
    }


def test_every_variant_builds_and_translates(hand_export, feeds, tmp_path):
    for name, transform in recipes(feeds).items():
        manifest = quantize.build_variant(name, hand_export, tmp_path / name, transform, {"name": name})
        assert sorted(manifest["size_mb"]) == sorted(quantize.FILES)
        out = Translator(tmp_path / name).translate(SOURCES, num_beams=2, max_new_tokens=8)
        assert len(out) == len(SOURCES) and all(isinstance(t, str) for t in out), name
    sizes = {n: sum(quantize.build_variant(n, hand_export, tmp_path / n, t, {})["size_mb"].values())
             for n, t in recipes(feeds).items() if n in ("fp32", "int8-with-embeddings", "fp16")}
    assert sizes["int8-with-embeddings"] < 0.6 * sizes["fp32"] and sizes["fp16"] < 0.6 * sizes["fp32"]


def test_lm_head_fix_makes_the_logits_matmul_integer(tiny_dir, tmp_path):
    from mtonnx import export

    # the torch.export-based export keeps MatMul(hidden, Transpose(embedding)), the pattern the fix is for
    source = tmp_path / "dynamo"
    export.export_manual(tiny_dir, source, exporter="dynamo", files=["decoder_with_past_model.onnx"])
    naive, fixed = tmp_path / "naive.onnx", tmp_path / "fixed.onnx"
    quantize.naive_int8(source / "decoder_with_past_model.onnx", naive)
    quantize.dynamic_int8()(source / "decoder_with_past_model.onnx", fixed)
    before = quantize.lm_head_report(naive)
    after = quantize.lm_head_report(fixed)
    assert before["lm_head_op"] == "MatMul" and before["dequantizes_embedding_every_step"]
    assert after["lm_head_op"] == "MatMulInteger" and not after["dequantizes_embedding_every_step"]


def test_subgraph_quantization_shrinks_the_merged_decoder(optimum_dir, tmp_path):
    sizes = quantize.merged_decoder_sizes(optimum_dir / "decoder_model_merged.onnx", tmp_path)
    assert sizes["int8 default"] > 0.9 * sizes["fp32"]  # silently left fp32
    assert sizes["int8 EnableSubgraph"] < 0.7 * sizes["fp32"]


def test_calibration_feeds_match_session_inputs(hand_export, feeds):
    translator = Translator(hand_export)
    sessions = {"encoder_model.onnx": translator.decoder.encoder, "decoder_model.onnx": translator.decoder.first,
                "decoder_with_past_model.onnx": translator.decoder.with_past}
    for file, session in sessions.items():
        expected = {i.name: ("int64" if "int64" in i.type else "float32") for i in session.get_inputs()}
        assert feeds[file], file
        for feed in feeds[file]:
            assert {k: str(v.dtype) for k, v in feed.items()} == expected, file
    assert len(feeds["decoder_with_past_model.onnx"]) > len(feeds["decoder_model.onnx"])
    reader = quantize.FeedsReader(feeds["encoder_model.onnx"])
    assert reader.get_next() is not None


def add_noise(src, dst):
    model = onnx.load(str(src))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.ndim == 2 and array.dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(array + rng.normal(0, 1.0, array.shape).astype(np.float32), init.name))
    onnx.save(model, str(dst))
    return {}


def test_gate_flags_a_damaged_variant(hand_export, tmp_path):
    fp32 = Translator(hand_export).translate(SOURCES, num_beams=1, max_new_tokens=12)
    damaged = tmp_path / "damaged"
    quantize.build_variant("damaged", hand_export, damaged, add_noise, {"damage": "N(0, 1) on every weight"})
    kwargs = dict(max_new_tokens=12, session=SessionSettings(), beam_sentences=1, fp32_texts=fp32, rss=False)
    rows = {"fp32": quant_eval.measure(hand_export, SOURCES, fp32, **kwargs),  # references = fp32's own output
            "damaged": quant_eval.measure(damaged, SOURCES, fp32, **kwargs)}
    assert rows["fp32"]["exact_match"] == 1.0 and rows["damaged"]["exact_match"] < 0.5
    flags = quant_eval.gate(rows)
    assert flags == {"fp32": False, "damaged": True}
    assert quant_eval.recommend(rows, flags) == "fp32"
