"""The web export and the JavaScript runtime: the tokenizer.json, and Node translating as the Python runtime does.

The tokenizer.json checks run in Python (Rust `tokenizers`); the rest needs Node with js/'s packages (`make js`)
and skips without them, except in CI (MTONNX_REQUIRE_NODE=1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import onnx
import pytest
import tokenizers
from onnxruntime.quantization import QuantType, quantize_dynamic

from conftest import REPO, needs_browser, needs_node, run_cli
from mtonnx.data import eval_set
from mtonnx.lab.webpage import PageSession
from mtonnx.passes.row_scales import graphs
from mtonnx.runtime import layout
from mtonnx.runtime.tokenizer import MarianSpmTokenizer
from mtonnx.runtime.translator import Translator
from mtonnx.serve.process import ServiceProcess
from mtonnx.web.doctor import diagnose_web
from mtonnx.web.export import ISOLATION_HEADERS, MANIFEST, keep_precision, write_web
from mtonnx.web.node import NodeRuntime
from mtonnx.web.parity import EDGE_CASES, _page_check, web_gate
from mtonnx.web.quantized import build_int8
from mtonnx.web.tokenizer_json import marian_tokenizer_json

HSK = REPO / "models" / "hsk-enzh"
EVAL = {"eval_split": "test", "hsk_size": "all", "techdocs_size": "all"}
# Marian looks up the text of a run of uncovered characters in vocab.json, which a tokenizer.json cannot say: a
# loader that takes the file as it is gives the target side's pieces for the run. The JavaScript runtime adds it.
# A `>>id<<` code is an added token (Transformers.js keeps a prefix whole), so Rust keeps one inside the text whole
# too, where Marian reads text; the JavaScript runtime keeps it whole only at the start, as Marian does.
RUST_DIFFERS = {"Hello 世界 world", "A code >>cmn_Hans<< inside the text"}


@pytest.fixture(scope="module")
def web_dir(hsk_optimum, int8_dir) -> Path:
    """The default model's web export with both precisions (fp32 loads by default), where deploy/ keeps it: inside
    the model directory it was made from."""
    out = hsk_optimum / "web"
    write_web(hsk_optimum, hsk_optimum, out, model="hsk-enzh", variant="fp32", quantized=int8_dir)
    return out


@pytest.fixture(scope="module")
def int8_dir(hsk_optimum) -> Path:
    out = hsk_optimum.parent / "web_int8"
    build_int8(hsk_optimum, out)
    return out


@pytest.fixture(scope="module")
def sources() -> list[str]:
    return [p.en for p in eval_set(EVAL)]


@pytest.fixture(scope="module")
def node(web_dir):
    needs_node()
    with NodeRuntime(web_dir) as runtime:
        yield runtime


def test_the_tokenizer_json_gives_the_runtime_ids_in_rust_tokenizers(web_dir, sources):
    rust = tokenizers.Tokenizer.from_file(str(web_dir / "tokenizer.json"))
    python = MarianSpmTokenizer(HSK)
    texts = [*sources, *(t for t in EDGE_CASES if not t.startswith(">>"))]
    differ = [t for t in texts if rust.encode(t).ids != python.encode(t)]
    assert set(differ) == RUST_DIFFERS
    normalizer = json.loads((web_dir / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"]["normalizers"][0]
    assert normalizer["type"] == "Precompiled" and len(normalizer["precompiled_charsmap"]) > 1000


def test_a_leading_language_code_stays_whole_in_rust_tokenizers(hand_export):
    rust = tokenizers.Tokenizer.from_str(json.dumps(marian_tokenizer_json(hand_export)))
    python = MarianSpmTokenizer(hand_export)
    for text in (">>cmn_Hans<< Run it.", ">>yue_Hant<< Where is the station?"):
        assert rust.encode(text).ids == python.encode(text), text
    assert rust.encode(">>cmn_Hans<< Run it.").tokens[0] == ">>cmn_Hans<<"


def _doctor(web_dir: Path) -> dict[str, tuple[str, str]]:
    return {r["check"].removeprefix("web: "): (r["status"], r["evidence"]) for r in diagnose_web(web_dir)}


def test_doctor_passes_the_web_export_and_names_each_javascript_pitfall(web_dir, int8_dir, hsk_optimum, tmp_path):
    assert {k: v[0] for k, v in _doctor(web_dir).items()} == {
        "the files web.json names": "ok",
        "tokenizer.json keeps the normalizer": "ok",
        "ids and masks are int64": "ok",
        "the >>id<< target-language prefix": "warn",  # the default model's vocabulary has codes it was not trained with
        "logits over the whole vocabulary": "ok",
        "int8 in both decoder branches, one scale per row": "ok",
        "the page loads offline": "ok"
        if json.loads((web_dir / MANIFEST).read_text())["page"] == "index.html"
        else "warn",
    }
    broken = tmp_path / "broken"
    shutil.copytree(web_dir, broken)
    spec = json.loads((broken / "tokenizer.json").read_text(encoding="utf-8"))
    spec["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": None}  # Transformers.js's own conversion
    spec["added_tokens"] = [t for t in spec["added_tokens"] if not t["content"].startswith(">>")]
    (broken / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    found = _doctor(broken)
    assert found["tokenizer.json keeps the normalizer"][0] == "fail"
    assert found["the >>id<< target-language prefix"] == (
        "fail",
        "6 of 6 codes (e.g. >>cmn_Hans<<) are not added tokens: Transformers.js cuts them into pieces",
    )
    (broken / "onnx" / "encoder_model.onnx").unlink()
    assert _doctor(broken) == {"the files web.json names": ("fail", "onnx/encoder_model.onnx is missing")}
    plain = tmp_path / "per-tensor"  # quantize_dynamic as tutorials call it: one scale per tensor, no subgraphs
    plain.mkdir()
    for name in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        quantize_dynamic(str(hsk_optimum / name), str(plain / name), weight_type=QuantType.QInt8)
    write_web(hsk_optimum, hsk_optimum, tmp_path / "q8", model="m", variant="int8", dtype="q8", quantized=plain)
    status, evidence = _doctor(tmp_path / "q8")["int8 in both decoder branches, one scale per row"]
    assert status == "fail" and evidence.startswith("DynamicQuantizeLinear x")
    write_web(hsk_optimum, hsk_optimum, tmp_path / "rows", model="m", variant="int8", dtype="q8", quantized=int8_dir)
    assert _doctor(tmp_path / "rows")["int8 in both decoder branches, one scale per row"] == (
        "ok",
        "2 branches with per-row integer products",
    )


def test_the_web_export_holds_what_transformersjs_loads(web_dir):
    manifest = json.loads((web_dir / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["files"] == {"encoder": "onnx/encoder_model.onnx", "decoder": "onnx/decoder_model_merged.onnx"}
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (web_dir / name).is_file(), name
    vocab = json.loads((HSK / "vocab.json").read_text(encoding="utf-8"))
    target = {p for p, i in vocab.items() if i in set(manifest["target_ids"])}
    assert "世" in target and "▁Hello" not in target  # the target side's pieces, not the source side's


def test_node_tokenizes_as_the_runtime_on_the_eval_set_and_the_edge_cases(node, sources):
    python = MarianSpmTokenizer(HSK)
    texts = [*sources, *EDGE_CASES]
    assert node.encode(texts) == [python.encode(t) for t in texts]


@pytest.mark.parametrize("beams", [1, 4])
def test_node_generates_the_runtime_tokens_on_the_whole_eval_set(node, hsk_optimum, sources, beams):
    python = Translator(hsk_optimum, decoder="merged")
    expected = python.generate_sorted([python.tokenizer.encode(t) for t in sources], 8, num_beams=beams)
    ids, texts = node.generate(sources, num_beams=beams)
    assert sum(a == b for a, b in zip(ids, expected)) == len(sources)
    assert texts == [python.tokenizer.decode(row) for row in expected]


def test_node_generates_the_runtime_int8_tokens_on_the_whole_eval_set(web_dir, int8_dir, sources):
    needs_node()
    python = Translator(int8_dir, decoder="merged")  # int8 amplifies a fusion's other summation order: js/ skips it too
    encoded = [python.tokenizer.encode(t) for t in sources]
    with NodeRuntime(web_dir, "q8") as node:
        for beams in (1, 4):
            ids, _ = node.generate(sources, num_beams=beams, max_new_tokens=32)
            expected = python.generate_sorted(encoded, 8, num_beams=beams, max_new_tokens=32)
            assert [i for i, (a, b) in enumerate(zip(ids, expected)) if a != b] == [], beams


def test_transformersjs_loads_the_web_export_offline_and_translates_as_greedy_does(node, hsk_optimum, sources):
    python = Translator(hsk_optimum, decoder="merged")
    texts = sources[:50]
    expected = [
        python.tokenizer.decode(r)
        for r in python.generate_sorted([python.tokenizer.encode(t) for t in texts], 8, num_beams=1, max_new_tokens=64)
    ]
    assert node.transformersjs(texts, max_new_tokens=64) == expected


def test_the_int8_web_files_quantize_both_decoder_branches_one_row_at_a_time(int8_dir, sources):
    for name in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        every = graphs(onnx.load(str(int8_dir / name)).graph)
        ops = [n.op_type for g in every for n in g.node]
        assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops, name  # no scale shared by rows
        products = [sum(n.op_type == "MatMulIntegerToFloat" for n in g.node) for g in every]
        assert all(products[1:]) if name.startswith("decoder") else products[0] > 0, (name, products)
    python = Translator(int8_dir, decoder="merged")
    texts = sources[:40]
    batched = python.translate(texts, num_beams=4)
    assert [python.translate([t], num_beams=4)[0] for t in texts] == batched  # a row's tokens ignore its neighbours


def test_the_web_gate_ships_int8_only_when_node_the_page_and_its_fidelity_agree(
    hsk_optimum, int8_dir, sources, tmp_path
):
    needs_node()
    needs_browser()
    out, texts = tmp_path / "web", sources[:100]
    write_web(hsk_optimum, hsk_optimum, out, model="hsk-enzh", variant="fp32", quantized=int8_dir)
    gate = web_gate(out, hsk_optimum, texts, 4, 32, 0.8, quantized_dir=int8_dir, page=PageSession)
    assert gate["node"]["gate"] == gate["q8"]["node"]["gate"] == "pass" and gate["q8"]["node"]["beam4"] == 100
    fidelity = gate["q8"]["fidelity"]
    assert fidelity["same_as_fp32_ci"][0] >= 0.8 and gate["q8"]["fidelity_gate"] == "pass" and gate["dtype"] == "q8"
    page = gate["browser"]  # the page on the int8 files, in WASM, against Node on them and fp32
    assert (page["dtype"], page["same_as_node"], page["sentences"], page["gate"]) == ("q8", 50, 50, "pass")
    strict = web_gate(out, hsk_optimum, texts, 4, 32, 1.0, quantized_dir=int8_dir)  # every sentence must match
    assert fidelity["same_as_fp32"] < 1.0 and strict["q8"]["fidelity_gate"] != "pass" and strict["dtype"] == "fp32"
    assert strict["browser"] == {
        "gate": "not measured",
        "reason": "no browser given (Chromium through Playwright is the lab's)",
    }
    manifest = keep_precision(out, gate["dtype"], "int8-rows")
    assert manifest["files"]["decoder"] == "onnx/decoder_model_merged_quantized.onnx"
    assert sorted(p.name for p in (out / "onnx").iterdir()) == [
        "decoder_model_merged_quantized.onnx",
        "encoder_model_quantized.onnx",
    ]


class _FakePage:
    """A page session stand-in that answers with given ids and translations."""

    load_s = 0.5

    def __init__(self, ids, texts):
        self.answer = ids, texts, 0.1

    def __call__(self, web_dir, dtype=None):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def generate(self, texts, num_beams=None, max_new_tokens=None):
        return self.answer


def test_the_page_is_gated_on_its_fidelity_to_fp32_with_its_ids_against_node_counted():
    sources, fp32 = [f"s{i}" for i in range(60)], [f"t{i}" for i in range(60)]
    node_ids = [[i, 0] for i in range(60)]
    args = (sources, 4, 32, "")
    other_ids = [[i, 1] for i in range(50)]  # other ids (WASM's own sums), the same translations
    kept = _page_check(_FakePage(other_ids, fp32[:50]), "w", "q8", sources, node_ids, fp32, 0.8, args)
    assert (kept["gate"], kept["same_as_node"], kept["sentences"], kept["dtype"]) == ("pass", 0, 50, "q8")
    drifted = [t if i % 2 else "x" for i, t in enumerate(fp32[:50])]  # half the translations move
    moved = _page_check(_FakePage(node_ids[:50], drifted), "w", "q8", sources, node_ids, fp32, 0.8, args)
    assert (moved["gate"], moved["same_as_node"], moved["fidelity"]["same_as_fp32"]) == ("fail", 50, 0.5)
    assert _page_check(None, "w", "q8", sources, node_ids, fp32, 0.8, args)["gate"] == "not measured"


def test_export_web_gives_an_earlier_run_the_int8_web_export_its_gates_chose(hsk_optimum, sources, tmp_path):
    needs_node()
    needs_browser()
    run = tmp_path / "run"
    shutil.copytree(hsk_optimum, run / "export_optimum", ignore=shutil.ignore_patterns("web"))
    deployed = {"model": "hsk-enzh", "family": "marian", "variant": "int8-rows-tuned", "source_prefix": ""}
    (run / "deploy").mkdir()
    (run / "deploy" / "deploy.json").write_text(json.dumps(deployed), encoding="utf-8")
    params = {"generation": {"num_beams": 4, "max_new_tokens": 32}, "quant": {"fidelity_min": 0.8}}
    (run / "env.json").write_text(json.dumps({"params": params}), encoding="utf-8")
    (run / "variants").mkdir()
    (run / "variants" / layout.TRANSLATIONS).write_text(json.dumps({"sources": sources[:60]}), encoding="utf-8")
    done = run_cli("export-web", str(run), timeout=600)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((run / "deploy" / "web" / MANIFEST).read_text(encoding="utf-8"))
    assert (manifest["variant"], manifest["dtype"]) == ("int8-rows", "q8")
    assert done.stdout.startswith(f"web export: {run / 'deploy' / 'web'}, int8-rows (q8); gate pass: Node fp32 pass")


def test_export_web_refuses_a_directory_without_an_optimum_export_in_one_line(tmp_path):
    (tmp_path / "deploy").mkdir()
    done = run_cli("export-web", str(tmp_path / "deploy"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "holds no merged decoder" in done.stderr


def test_the_page_loads_offline_in_chromium_and_translates_as_node_does(web_dir, node, sources):
    needs_browser()
    texts = sources[:50]
    with PageSession(web_dir) as page:  # every request off the local port is aborted: offline
        ids, translations, seconds = page.generate(texts)
        assert page.isolated is False and page.load_s > 0  # a plain static server: one WASM thread
    assert (ids, translations) == node.generate(texts) and seconds > 0


def test_serve_web_serves_the_page_isolated_beside_the_api(web_dir, hsk_optimum):
    service = ServiceProcess.start(hsk_optimum, "--web", "--decoder", "merged", api_key="k3y")
    try:
        service.wait_ready()
        page = httpx.get(f"{service.url}/web/")
        assert page.status_code == 200 and 'id="source"' in page.text  # public, as /health is
        assert {k: page.headers[k] for k in ISOLATION_HEADERS} == ISOLATION_HEADERS
        manifest = httpx.get(f"{service.url}/web/{MANIFEST}").json()
        assert manifest["files"]["decoder"] == "onnx/decoder_model_merged.onnx"
        assert httpx.post(f"{service.url}/translate", json={"q": "Hi"}).status_code == 401  # the API keeps its key
    finally:
        service.stop()


def test_serve_web_without_a_page_is_one_line(tmp_path, hsk_optimum):
    model = tmp_path / "model"
    shutil.copytree(hsk_optimum, model, ignore=shutil.ignore_patterns("web"))
    done = run_cli("serve", "--model-dir", str(model), "--web", "--port", "0", timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "holds no web page: make it with `mtonnx export-web RUN_DIR`" in done.stderr
