"""Same sentence, same translation: per-row activation scales (passes.row_scales) make int8 exact per row under ONNX
Runtime's full optimization, the int8-rows variants translate every sentence the same alone, batched, shuffled and
through concurrent service traffic, and the gates, the recommendation and the model card say so."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import tuned_variants
from mtonnx import data
from mtonnx.deploy import invariance_line
from mtonnx.measure import verdicts
from mtonnx.measure.variants import VariantBench, compare
from mtonnx.passes.row_scales import fuse_row_scaled, per_row_activations

K, N = 64, 24


def _quantized_linear(tmp: Path, bias: bool = True, opset: int = 18) -> onnx.ModelProto:
    """y = x @ W (+ b), dynamically quantized by onnxruntime (one scale for the whole tensor)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32), "W")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["product" if bias else "y"])]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["product", "b"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "time", N])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(tmp / "f.onnx"))
    quantize_dynamic(str(tmp / "f.onnx"), str(tmp / "q.onnx"), weight_type=QuantType.QInt8)
    return onnx.load(str(tmp / "q.onnx"))


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]


def _expected(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The per-row integer product computed in numpy: round(127 x / row max) @ W_int8, scaled, plus the bias."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weight = inits["W_quantized"].astype(np.int64)
    scale = float(inits["W_scale.per_row"]) * 127  # the weight scale with 1/127 folded in
    row_max = np.abs(x).max(-1, keepdims=True)
    quantized = np.round(x / row_max * 127).astype(np.int64)
    return (quantized @ weight) * (row_max * scale / 127) + inits.get("b", 0)


@pytest.fixture
def rows_model(tmp_path):
    model = _quantized_linear(tmp_path)
    assert per_row_activations(model) == 1
    assert fuse_row_scaled(model) == 1
    assert [n.op_type for n in model.graph.node if n.op_type.startswith(("Dynamic", "MatMul"))] == [
        "MatMulIntegerToFloat"
    ]
    return model


def test_per_row_quantization_is_the_integer_product_of_each_row_with_the_bias_added_once(rows_model):
    x = np.random.default_rng(2).standard_normal((3, 5, K)).astype(np.float32)
    x[1] *= 40  # a loud sentence beside quiet ones
    x[2, :, 7] += 30  # an outlier channel
    np.testing.assert_allclose(_run(rows_model, x), _expected(rows_model, x), rtol=1e-5, atol=1e-4)
    read = {i for n in rows_model.graph.node for i in n.input}
    assert {i.name for i in rows_model.graph.initializer} <= read, "an initializer no node reads is left behind"


def test_a_row_gives_the_same_output_bit_for_bit_whatever_it_is_batched_with(rows_model):
    rng = np.random.default_rng(3)
    row = rng.standard_normal((1, 1, K)).astype(np.float32)
    alone = _run(rows_model, row)[0, 0]
    for neighbours in (1, 4, 31):
        batch = rng.standard_normal((neighbours + 1, 1, K)).astype(np.float32) * rng.uniform(0.1, 50)
        at = int(rng.integers(neighbours + 1))
        batch[at] = row[0]
        assert np.array_equal(_run(rows_model, batch)[at, 0], alone)


def test_per_tensor_dynamic_int8_lets_a_neighbour_move_a_row(tmp_path):
    """The defect the rewrite removes: one scale for the whole batch, set by its loudest row."""
    model = _quantized_linear(tmp_path)
    row = np.random.default_rng(4).standard_normal((1, 1, K)).astype(np.float32)
    loud = np.concatenate([row, row * 50])
    assert not np.array_equal(_run(model, row)[0, 0], _run(model, loud)[0, 0])


def test_a_row_of_zeros_stays_zero_and_leaves_its_neighbours_alone(tmp_path):
    model = _quantized_linear(tmp_path, bias=False)
    per_row_activations(model)
    fuse_row_scaled(model)
    x = np.random.default_rng(5).standard_normal((2, 1, K)).astype(np.float32)
    x[0] = 0
    out = _run(model, x)
    assert np.array_equal(out[0], np.zeros_like(out[0]))
    assert np.array_equal(out[1, 0], _run(model, x[1:])[0, 0])


def test_the_rewrite_refuses_an_opset_without_reducemax_axes_as_input(tmp_path):
    model = _quantized_linear(tmp_path, opset=17)
    with pytest.raises(ValueError, match="per-row activation scales need opset 18 or later.*this is 17"):
        per_row_activations(model)


def test_a_model_without_dynamic_quantization_is_left_alone(tmp_path):
    _quantized_linear(tmp_path)
    fp32 = onnx.load(str(tmp_path / "f.onnx"))
    before = fp32.SerializeToString()
    assert per_row_activations(fp32) == 0 and fuse_row_scaled(fp32) == 0
    assert fp32.SerializeToString() == before


# ---- the gates and the words shown to users


def _row(invariance=None, exempt=None, gate="pass", fidelity="pass", ms=(10.0,) * 5):
    return {
        "gate": gate,
        "fidelity_gate": fidelity,
        "batch_invariance": invariance,
        "invariance_gate": verdicts.invariance_gate(invariance, exempt),
        "times_ms_workload": list(ms),
        "workload_ms": ms[0],
        "size_mb": 10.0,
        "bleu_delta": 0.0,
        "bleu_delta_ci": [-0.1, 0.1],
        "fidelity": {"same_as_fp32": 0.9, "same_as_fp32_ci": [0.85, 0.95]},
    }


MEASURED = {"sentences": 200, "batch": 16, "beam1": 1.0, "beam4": 1.0, "share": 1.0, "changed": {}}
MOVED = {**MEASURED, "beam4": 0.93, "share": 0.93}


@pytest.mark.parametrize(
    "measured, exempt, verdict",
    [
        (MEASURED, None, "pass"),
        (MOVED, None, "fail"),
        (None, None, "not measured"),
        (MOVED, "a tolerated difference, measured by hand", "exempt: a tolerated difference, measured by hand"),
    ],
)
def test_the_invariance_gate_passes_only_every_sentence_unchanged_or_a_stated_exemption(measured, exempt, verdict):
    assert verdicts.invariance_gate(measured, exempt) == verdict
    assert verdicts.passes(_row(measured, exempt)) == (verdict == "pass" or verdict.startswith("exempt"))


def test_the_recommendation_skips_a_faster_variant_that_moves_with_its_batch():
    rows = {
        "fp32": _row(MEASURED, ms=(30.0,) * 5),
        "int8-tuned": _row(MOVED, ms=(10.0,) * 5),
        "int8-rows-tuned": _row(MEASURED, ms=(12.0,) * 5),
    }
    choice, reason = verdicts.recommend(rows)
    assert choice == "int8-rows-tuned"
    assert "batch invariance (100% of 200 sentences identical alone, in batches of 16 and shuffled; pass)" in reason
    assert "int8-tuned (quality pass, fidelity pass, batch invariance fail)" in reason


def test_the_model_card_shows_the_invariance_gate_with_its_evidence():
    line = invariance_line(_row(MEASURED))
    assert line == (
        "- Batch invariance (the same tokens alone, in batches of 16 and shuffled, 200 sentences): **pass**; "
        "greedy 100.0%, 4 beams 100.0% of the sentences unchanged."
    )
    assert "200 sentences): **exempt: why**; greedy 100.0%, 4 beams 93.0%" in invariance_line(_row(MOVED, "why"))


# ---- the trained model: 200 evaluation sentences, and the service under concurrent traffic

SENTENCES = [p.en for p in data.eval_set({"hsk_size": "all", "techdocs_size": "all", "eval_split": "test"})][:200]


@pytest.fixture(scope="module")
def hsk_rows(hsk_export, tmp_path_factory):
    work = tmp_path_factory.mktemp("rows")
    return tuned_variants(hsk_export, work, ("int8-tuned-target-vocab", "int8-rows-tuned-target-vocab"))


def test_the_per_row_variant_translates_200_sentences_the_same_alone_batched_and_shuffled(hsk_rows):
    bench = VariantBench(SENTENCES, SENTENCES, max_new_tokens=64, invariance_sentences=200, invariance_batch=16)
    per_row = bench.invariance(hsk_rows["int8-rows-tuned-target-vocab"])
    assert per_row["sentences"] == 200
    assert per_row["changed"] == {"beam1": [], "beam4": []} and per_row["share"] == 1.0
    per_tensor = bench.invariance(hsk_rows["int8-tuned-target-vocab"])
    assert per_tensor["share"] < 1.0, "the lesson's premise: one scale per batch moves some sentences"
    names = ("int8-tuned-target-vocab", "int8-rows-tuned-target-vocab")
    examples = bench.invariance_examples(*((n, hsk_rows[n]) for n in names), per_tensor["changed"]["beam4"], 4)
    assert 1 <= len(examples) <= 5
    for row in examples:
        assert row[f"{names[0]}, alone"] != row[f"{names[0]}, in a batch of 16"], row
        assert list(row) == ["English", f"{names[0]}, alone", f"{names[0]}, in a batch of 16", f"{names[1]}, any batch"]
    quality = compare(
        {n: bench.translate(d) for n, d in [("fp32", hsk_rows["int8-rows-tuned-target-vocab"]), *hsk_rows.items()]},
        SENTENCES,
        gate_bleu=100.0,
        fidelity_min=0.0,
        invariance={"int8-rows-tuned-target-vocab": per_row, "int8-tuned-target-vocab": per_tensor},
    )["rows"]
    assert quality["int8-rows-tuned-target-vocab"]["invariance_gate"] == "pass"
    assert quality["int8-tuned-target-vocab"]["invariance_gate"] == "fail"
    assert quality["fp32"]["invariance_gate"] == "not measured"


def test_300_concurrent_requests_get_the_answers_they_get_one_at_a_time(hsk_rows):
    import httpx

    from mtonnx.runtime import Translator
    from mtonnx.serve.app import create_app
    from mtonnx.serve.settings import ServeSettings

    model_dir = hsk_rows["int8-rows-tuned-target-vocab"]
    rng = random.Random(0)
    requests = [
        {"q": rng.sample(SENTENCES, rng.randint(1, 3)), "beams": rng.choice([1, 4]), "max_new_tokens": 48}
        for _ in range(300)
    ]
    app = create_app(Translator(model_dir), ServeSettings(model_dir=model_dir, max_wait_ms=5, max_batch_size=16))

    async def session():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://serve", timeout=300) as http:
                while (await http.get("/health/ready")).status_code != 200:
                    await asyncio.sleep(0.02)
                one_at_a_time = [(await http.post("/translate", json=r)).json() for r in requests]
                concurrent = await asyncio.gather(*(http.post("/translate", json=r) for r in requests))
                return one_at_a_time, [a.json() for a in concurrent]

    sequential, concurrent = asyncio.run(session())
    assert all("translatedText" in a for a in sequential)
    differ = [i for i, (a, b) in enumerate(zip(sequential, concurrent)) if a != b]
    assert differ == [], f"{len(differ)} of 300 concurrent answers differ from the same request sent alone"


def test_the_registry_builds_per_row_variants_whose_files_hold_no_per_tensor_quantizer(hsk_rows):
    for path in Path(hsk_rows["int8-rows-tuned-target-vocab"]).glob("*.onnx"):
        ops = {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}
        assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops, path.name


def test_an_exemption_for_a_variant_the_run_does_not_build_is_refused():
    translations = {"fp32": {"texts": ["好"], "tokens_sha": "0"}, "int8": {"texts": ["好"], "tokens_sha": "0"}}
    with pytest.raises(ValueError, match=r"quant.invariance_exempt names int9, which this run does not build"):
        compare(translations, ["好"], 1.0, 0.5, invariance={}, exempt={"int9": "a typo"})
