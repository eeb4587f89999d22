"""The web export and the JavaScript runtime: the tokenizer.json, and Node translating as the Python runtime does.

The tokenizer.json checks run in Python (Rust `tokenizers`); the rest needs Node with js/'s packages (`make js`)
and skips without them, except in CI (MTONNX_REQUIRE_NODE=1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
import tokenizers

from conftest import REPO, needs_browser, needs_node, run_cli
from mtonnx.data import eval_set
from mtonnx.lab.webpage import PageSession
from mtonnx.runtime.tokenizer import MarianSpmTokenizer
from mtonnx.runtime.translator import Translator
from mtonnx.serve.process import ServiceProcess
from mtonnx.web.export import ISOLATION_HEADERS, MANIFEST, write_web
from mtonnx.web.node import NodeRuntime
from mtonnx.web.parity import EDGE_CASES

HSK = REPO / "models" / "hsk-enzh"
EVAL = {"eval_split": "test", "hsk_size": "all", "techdocs_size": "all"}
# Marian looks up the text of a run of uncovered characters in vocab.json, which a tokenizer.json cannot say: a
# loader that takes the file as it is gives the target side's pieces for the run. The JavaScript runtime adds it.
RUST_DIFFERS = {"Hello 世界 world"}


@pytest.fixture(scope="module")
def web_dir(hsk_optimum) -> Path:
    """The default model's web export, where deploy/ keeps it: inside the model directory it was made from."""
    out = hsk_optimum / "web"
    write_web(hsk_optimum, hsk_optimum, out, model="hsk-enzh", variant="fp32")
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


def test_transformersjs_loads_the_web_export_offline_and_translates_as_greedy_does(node, hsk_optimum, sources):
    python = Translator(hsk_optimum, decoder="merged")
    texts = sources[:50]
    expected = [
        python.tokenizer.decode(r)
        for r in python.generate_sorted([python.tokenizer.encode(t) for t in texts], 8, num_beams=1, max_new_tokens=64)
    ]
    assert node.transformersjs(texts, max_new_tokens=64) == expected


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
