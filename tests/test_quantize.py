"""Quantized variants: each builds and translates; the lm_head fix makes the logits MatMul integer where the
naive call dequantizes the embedding every step; subgraph quantization really shrinks the merged decoder;
calibration feeds match the sessions; the quality gate flags a damaged variant."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mtonnx import data
from mtonnx.measure import step_bytes, variants, verdicts
from mtonnx.measure.variants import VariantBench, compare
from mtonnx.passes.lm_head import lm_head_report
from mtonnx.runtime import Translator, layout
from mtonnx.variants import registry, sensitivity
from mtonnx.variants.build import build_variant, merged_decoder_sizes
from mtonnx.variants.calibration import FeedsReader, capture_feeds
from mtonnx.variants.transforms import dynamic_int8, naive_int8

SOURCES = [p.en for p in data.eval_set({"hsk_size": 6, "techdocs_size": 2, "eval_split": "test"})]
CALIBRATION = data.calibration_set({"calibration_size": 8})


@pytest.fixture(scope="module")
def feeds(hand_export):
    return capture_feeds(hand_export, CALIBRATION, max_new_tokens=6)


PLAIN = [r.name for r in registry.RECIPES if r.transform is not None and r.needs not in ("groups",)]


def test_every_registered_recipe_builds_and_translates(hand_export, feeds, tmp_path):
    calibration = {"sentences": CALIBRATION, "tokens": 6}
    inputs = registry.Inputs(heads=4, hidden=64, feeds=feeds, calibration=calibration, groups=("lm_head",))
    built = registry.build(hand_export, tmp_path, inputs, [*PLAIN, "int8-mixed", "int8-tuned-target-vocab"], log=None)
    # onnxruntime's entropy calibrator cannot stack decoder feeds of different lengths: a result, not a crash
    assert set(built.failed) <= {"int8-static-entropy"} and all("\n" not in m for m in built.failed.values())
    assert set(built.manifests) == {*PLAIN, "int8-mixed", "int8-tuned-target-vocab"} - set(built.failed)
    for name in built.manifests:
        assert all((tmp_path / name / f).is_file() for f in layout.VARIANT_FILES), name
        out = Translator(tmp_path / name).translate(SOURCES, num_beams=2, max_new_tokens=8)
        assert len(out) == len(SOURCES) and all(isinstance(t, str) for t in out), name
    sizes = {n: sum(built.manifests[n]["size_mb"].values()) for n in ("fp32", "int8-with-embeddings", "fp16")}
    assert sizes["int8-with-embeddings"] < 0.6 * sizes["fp32"] and sizes["fp16"] < 0.6 * sizes["fp32"]


def test_builds_are_keyed_by_content_reused_when_unchanged_and_rebuilt_when_not(hand_export, tmp_path):
    lines: list[str] = []
    first = registry.build(hand_export, tmp_path, registry.Inputs(), ["int8", "int8-tuned"], log=lines.append)
    again = registry.build(hand_export, tmp_path, registry.Inputs(), ["int8", "int8-tuned"], log=lines.append)
    assert first.reused == [] and again.reused == ["int8", "int8-tuned"]
    assert sum(line.startswith("reused ") for line in lines) == 2
    (tmp_path / "int8" / "build_key.json").write_text('{"key": "stale"}')  # an older build of another recipe
    third = registry.build(hand_export, tmp_path, registry.Inputs(), ["int8"], log=lines.append)
    assert third.reused == [] and any("build key stale differs" in line for line in lines)


def test_a_calibrated_recipe_without_feeds_is_a_failure_not_an_exception(hand_export, tmp_path):
    built = registry.build(
        hand_export, tmp_path, registry.Inputs(heads=4, hidden=64), ["int8", "int8-static-minmax"], log=None
    )
    assert list(built.manifests) == ["int8"] and built.failed == {"int8-static-minmax": "not built: no feeds given"}


def test_lm_head_fix_makes_the_logits_matmul_integer(tiny_dir, tmp_path):
    from mtonnx.export.manual import export_manual

    # the torch.export-based export keeps MatMul(hidden, Transpose(embedding)), the pattern the fix is for
    source = tmp_path / "dynamo"
    export_manual(tiny_dir, source, exporter="dynamo", files=[layout.DECODER_WITH_PAST])
    naive, fixed = tmp_path / "naive.onnx", tmp_path / "fixed.onnx"
    naive_int8(source / layout.DECODER_WITH_PAST, naive)
    dynamic_int8()(source / layout.DECODER_WITH_PAST, fixed)
    before = lm_head_report(naive)
    after = lm_head_report(fixed)
    assert before["lm_head_op"] == "MatMul" and before["dequantizes_embedding_every_step"]
    assert after["lm_head_op"] == "MatMulInteger" and not after["dequantizes_embedding_every_step"]


def test_subgraph_quantization_shrinks_the_merged_decoder(optimum_dir, tmp_path):
    sizes = merged_decoder_sizes(optimum_dir / layout.DECODER_MERGED, tmp_path)
    assert sizes["int8 default"] > 0.9 * sizes["fp32"]  # silently left fp32
    assert sizes["int8 EnableSubgraph"] < 0.7 * sizes["fp32"]


def test_calibration_feeds_match_session_inputs(hand_export, feeds):
    translator = Translator(hand_export)
    assert sorted(feeds) == sorted(layout.VARIANT_FILES)
    for file, session in translator.sessions.items():
        expected = {i.name: ("int64" if "int64" in i.type else "float32") for i in session.get_inputs()}
        assert feeds[file], file
        for feed in feeds[file]:
            assert {k: str(v.dtype) for k, v in feed.items()} == expected, file
    assert len(feeds[layout.DECODER_WITH_PAST]) > len(feeds[layout.DECODER])
    reader = FeedsReader(feeds[layout.ENCODER])
    assert reader.get_next() is not None


def add_noise(src, dst):
    model = onnx.load(str(src))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.ndim == 2 and array.dtype == np.float32:
            init.CopyFrom(
                numpy_helper.from_array(array + rng.normal(0, 1.0, array.shape).astype(np.float32), init.name)
            )
    onnx.save(model, str(dst))
    return {}


def test_a_damaged_variant_fails_the_gate_and_is_not_recommended(hand_export, tmp_path):
    fp32 = Translator(hand_export).translate(SOURCES, num_beams=1, max_new_tokens=12)
    damaged = tmp_path / "damaged"
    build_variant("damaged", hand_export, damaged, add_noise, {"damage": "N(0, 1) on every weight"})
    bench = VariantBench(SOURCES, fp32, max_new_tokens=12, timing_sentences=2, repeats=2)  # refs: fp32
    translations = {"fp32": bench.translate(hand_export), "damaged": bench.translate(damaged)}
    side_by_side = bench.translate_all({"fp32": hand_export, "damaged": damaged}, workers=2)
    assert list(side_by_side) == ["fp32", "damaged"] and side_by_side == translations  # the same tokens, in order
    quality = compare(translations, fp32, gate_bleu=0.5, fidelity_min=0.8)["rows"]
    assert quality["fp32"]["fidelity"]["same_as_fp32"] == 1.0 and quality["damaged"]["fidelity"]["same_as_fp32"] < 0.5
    assert quality["fp32"]["gate"] == "pass" and quality["damaged"]["gate"] == "fail"
    assert quality["fp32"]["fidelity_gate"] == "pass" and quality["damaged"]["fidelity_gate"] == "fail"
    assert quality["damaged"]["bleu_delta"] < 0 and quality["damaged"]["p_value"] is not None
    speed = bench.speed({"fp32": bench.runtime(hand_export), "damaged": bench.runtime(damaged)})
    assert all(len(speed[n]["times_ms_workload"]) == 2 for n in speed)
    parts = zip(speed["fp32"]["times_ms_b1_beam4"], speed["fp32"]["times_ms_b8_beam4"])
    assert all(abs(total - (a + b)) <= 0.02 for total, (a, b) in zip(speed["fp32"]["times_ms_workload"], parts))
    rows = variants.table(
        quality,
        speed,
        {n: bench.footprint(d, rss=False) for n, d in (("fp32", hand_export), ("damaged", damaged))},
        {"fp32": True, "damaged": True},
    )
    choice, reason = verdicts.recommend(rows)
    assert choice == "fp32" and "damaged (quality fail, fidelity fail)" in reason


def test_safe_groups_keep_the_matmul_groups_that_pass_alone():
    gates = {
        "embeddings": "pass",
        "encoder": "pass",
        "lm_head": "fail",
        "decoder FFN": "inconclusive",
        "cross-attention": "pass",
    }
    assert sensitivity.safe_groups(gates) == ("encoder", "cross-attention")  # embeddings are Gathers, not MatMuls
    assert sensitivity.safe_groups({"lm_head": "fail"}) == ("lm_head",)


def test_blockwise_variants_quantize_every_weight_matmul_and_rows_never_share_a_scale(hand_export, tmp_path):
    built = registry.build(
        hand_export, tmp_path, registry.Inputs(), ["int8", "int8-blockwise-b32", "int4-blockwise-b32"], log=None
    )
    assert not built.failed
    for name in ("int8-blockwise-b32", "int4-blockwise-b32"):
        details = built.manifests[name]["details"][layout.DECODER_WITH_PAST]
        graph = onnx.load(str(tmp_path / name / layout.DECODER_WITH_PAST)).graph
        weights = {i.name for i in graph.initializer}
        plain = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights]
        assert details["matmul_nbits"] > 0 and not plain, name  # no weight MatMul left in fp32, the lm_head included
        assert details["gather_block_quantized"] == (1 if name.startswith("int4") else 0), name
    # what a step reads, from the files: 4-bit blocks under 8-bit blocks under dynamic int8 plus its 32-weight scales
    size = {name: step_bytes.step_bytes(tmp_path / name) for name in built.manifests}
    assert size["int4-blockwise-b32"] < 0.65 * size["int8-blockwise-b32"]
    assert size["int8"] < size["int8-blockwise-b32"] < 1.2 * size["int8"]
    assert step_bytes.step_bytes(hand_export) > 3.5 * size["int8"]  # fp32: four bytes a weight
    # dynamic int8 quantizes a batch's activations with one scale; MatMulNBits per block of each row: a sentence's
    # tokens do not depend on what it is batched with
    blockwise = Translator(tmp_path / "int8-blockwise-b32")
    alone = [blockwise.translate([s], num_beams=1, max_new_tokens=12)[0] for s in SOURCES]
    assert blockwise.translate(SOURCES, batch_size=len(SOURCES), num_beams=1, max_new_tokens=12) == alone
    dynamic = Translator(tmp_path / "int8")  # the contrast that makes the check meaningful (3 of 8 differ here)
    alone = [dynamic.translate([s], num_beams=1, max_new_tokens=12)[0] for s in SOURCES]
    assert dynamic.translate(SOURCES, batch_size=len(SOURCES), num_beams=1, max_new_tokens=12) != alone


def test_a_corpus_workload_times_evenly_spaced_sentences_sorted_by_length_into_its_batches():
    sources = [f"sentence {'x' * (i * 7 % 13)} {i}" for i in range(40)]
    quant = {"workload_batches": [4], "workload_beams": None, "workload_weights": None, "workload_corpus": 10}
    workload = variants.workload(quant, {"num_beams": 2})
    bench = VariantBench(sources, sources, max_new_tokens=8, repeats=2, warmup=0, workload=workload)
    seen: list[tuple[list[str], int]] = []
    speed = bench.speed({"fake": lambda batch, beams: seen.append((batch, beams))})
    assert bench.objective == "corpus10@b4;beams=2"
    assert len(speed["fake"]["times_ms_corpus_b4_beam2"]) == 2 and len(speed["fake"]["times_ms_workload"]) == 2
    one_pass = seen[: len(seen) // 2]
    assert [len(batch) for batch, _ in one_pass] == [4, 4, 2] and {beams for _, beams in one_pass} == {2}
    flat = [s for batch, _ in one_pass for s in batch]
    assert sorted(flat) == sorted(sources[i * 4] for i in range(10))  # every 4th of 40: evenly spaced
    assert [len(s) for s in flat] == sorted((len(s) for s in flat), reverse=True)  # longest first
