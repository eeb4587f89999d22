"""Integrity (issue 49): every directory lists its files' SHA-256, a damaged file is refused by name on every surface
and nothing is written; a model that answers nothing is an error everywhere; batch keys completion on content.

One deployable directory (int8-tuned-target-vocab, with weights.bin and output_rows.json) is built once per module
from the tiny model; each fault runs on a copy of it, and the surfaces are called in-process.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
from anyio.from_thread import start_blocking_portal

from conftest import tuned_variants
from mtonnx import deploy
from mtonnx.check import doctor
from mtonnx.cli import main
from mtonnx.runtime import EmptyTranslationError, ModelDirError, Translator, integrity, layout
from mtonnx.scale import shards
from mtonnx.scale.jobs import translate_files
from mtonnx.serve.app import create_app
from mtonnx.serve.settings import ServeSettings

VARIANT = "int8-tuned-target-vocab"
TOKENS = {"max_new_tokens": 4}


@pytest.fixture(scope="module")
def run_dir(hand_export, tmp_path_factory) -> Path:
    """A run directory whose deploy/ holds the tiny model's int8-tuned-target-vocab variant."""
    from test_deploy import facts

    run = tmp_path_factory.mktemp("integrity-run")
    variants = tuned_variants(hand_export, run, (VARIANT,))
    deploy.publish(run, variants[VARIANT], {**facts(str(run)), "variant": VARIANT})
    return run


@pytest.fixture(scope="module")
def deployed(run_dir) -> Path:
    return run_dir / layout.DEPLOY


@pytest.fixture
def text_file(tmp_path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("Hello, teacher!\nI like tea.\n", encoding="utf-8")
    return path


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def zero_range(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)
    path.write_bytes(bytes(data))


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data), max(1, len(data) // 7)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


FAULTS = {"truncate": truncate, "zero a range": zero_range, "flip bytes": flip_bytes}
# Every file of the deployed variant the issue names: the ONNX files, weights.bin, the tokenizer, the configs and the
# output rows (the rest of the directory is listed and verified the same way).
FILES = (
    layout.ENCODER,
    layout.DECODER,
    layout.DECODER_WITH_PAST,
    layout.SEARCH_HEAD,
    layout.WEIGHTS,
    "source.spm",
    "target.spm",
    "vocab.json",
    "config.json",
    "generation_config.json",
    layout.OUTPUT_ROWS,
    layout.DEPLOY_FACTS,
)


def one_line(text: str) -> str:
    """The one line of `text` that is not a progress bar's."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip("\r").startswith("translating:")]
    assert len(lines) == 1, text
    return lines[0]


def test_every_directory_lists_each_file_and_verifies(hand_export, run_dir, deployed):
    variant = run_dir / "variants" / VARIANT
    for directory in (hand_export, variant, deployed):
        listed = integrity.read_sums(directory)
        assert sorted(listed) == [p.name for p in integrity.listed_files(directory)]
        assert integrity.verify(directory) == len(listed)
    assert set(FILES) <= set(integrity.read_sums(deployed))
    assert {p.name for p in deployed.glob("*.onnx")} <= set(FILES)  # each ONNX file is damaged below
    assert Translator(deployed).verified == len(integrity.read_sums(deployed))
    # the run's stamp rewrites the card: the list follows it
    deploy.stamp(run_dir, "abc", {"git": {}, "cpu": {}})
    assert integrity.verify(deployed) == len(integrity.read_sums(deployed))


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_file_is_refused_by_name_on_every_surface(deployed, tmp_path, text_file, capsys, name, fault):
    broken = tmp_path / "deploy"
    shutil.copytree(deployed, broken)
    before = (broken / name).read_bytes()
    FAULTS[fault](broken / name)
    assert (broken / name).read_bytes() != before
    expected = f"{broken / name} does not match its SHA-256 in {layout.SUMS}"

    with pytest.raises(ModelDirError) as caught:
        Translator(broken)
    assert "\n" not in str(caught.value) and expected in str(caught.value)

    out, shards = tmp_path / "out.txt", tmp_path / "shards"
    commands = {
        "translate": ["translate", "--model-dir", str(broken), "-i", str(text_file), "-o", str(out)],
        "serve": ["serve", "--model-dir", str(broken), "--port", "0"],
        "batch": ["batch", "--model-dir", str(broken), "--input", str(text_file), "--output", str(shards)],
    }
    for command, argv in commands.items():
        capsys.readouterr()
        assert main(argv) == 2, command
        line = one_line(capsys.readouterr().err)
        assert line.startswith("mtonnx: error: ") and expected in line, (command, line)
    assert not out.exists() and not shards.exists()

    rows = doctor.diagnose(broken)
    assert [(r["status"], expected in r["evidence"]) for r in rows] == [("fail", True)], rows
    capsys.readouterr()
    assert main(["doctor", "--model-dir", str(broken)]) == 1
    assert expected in capsys.readouterr().out


def test_a_missing_listed_file_is_named(deployed, tmp_path):
    broken = tmp_path / "deploy"
    shutil.copytree(deployed, broken)
    (broken / layout.WEIGHTS).unlink()
    with pytest.raises(ModelDirError, match=f"{layout.WEIGHTS} is listed in {layout.SUMS} but missing"):
        Translator(broken)


def test_the_opt_out_and_a_directory_without_a_list(deployed, tmp_path, monkeypatch):
    copy = tmp_path / "deploy"
    shutil.copytree(deployed, copy)
    config = copy / "tokenizer_config.json"
    config.write_text(config.read_text(encoding="utf-8") + " ", encoding="utf-8")  # a harmless edit: unverified
    with pytest.raises(ModelDirError, match="tokenizer_config.json does not match"):
        Translator(copy)
    assert Translator(copy, verify=False).verified is None
    monkeypatch.setenv(integrity.VERIFY_ENV, "0")
    assert Translator(copy).verified is None
    monkeypatch.delenv(integrity.VERIFY_ENV)
    (copy / layout.SUMS).unlink()  # a user's own older export: loads, and doctor says it cannot be verified
    assert Translator(copy).verified is None
    first = doctor.check_integrity(doctor.Subject(copy, None))
    assert first.status == "warn" and "cannot be verified" in first.evidence


def test_the_cost_of_verifying_is_measured(deployed):
    cost = integrity.cost(deployed, lambda d: Translator(d, verify=False))
    assert cost["files"] == len(integrity.read_sums(deployed)) and cost["verify_s"] >= 0 and cost["load_s"] > 0


# Item 4: a model that translates every sentence to empty text is an error on every surface.
@pytest.fixture
def silent(monkeypatch):
    """Every Translator answers each sentence with eos alone (what damaged weights do)."""
    monkeypatch.setattr(Translator, "generate_sorted", lambda self, encoded, *a, **k: [[] for _ in encoded])


def test_an_empty_answer_is_an_error_in_the_api_and_the_cli(deployed, tmp_path, text_file, capsys, silent):
    with pytest.raises(EmptyTranslationError, match="translated all 2 sentences to empty text") as caught:
        Translator(deployed).translate(["Hello.", "Tea?"])
    assert "\n" not in str(caught.value)
    assert Translator(deployed).translate(["", " "]) == ["", ""]  # nothing to translate is not a failure
    assert Translator(deployed).translate("Hello.") == ""  # one empty answer may be the model's own
    out = tmp_path / "out.txt"
    assert main(["translate", "--model-dir", str(deployed), "-i", str(text_file), "-o", str(out)]) == 2
    assert "to empty text" in one_line(capsys.readouterr().err) and not out.exists()


def test_an_empty_answer_fails_the_batch_file(deployed, tmp_path, text_file, silent):
    out = tmp_path / "shards"
    with pytest.raises(EmptyTranslationError):
        translate_files(deployed, str(text_file), out, options=TOKENS, progress=False, log=None)
    assert shards.read_output(out).num_rows == 0  # a claim at most: nothing complete


def test_an_empty_answer_is_a_json_500_and_the_service_is_not_ready(deployed, silent):
    app = create_app(Translator(deployed), ServeSettings(model_dir=str(deployed)))
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(app.router.lifespan_context(app)):
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve", timeout=60)
        ready = _settled(portal, http)
        assert ready.status_code == 503 and "to empty text" in ready.json()["error"]
        app.state.service.ready = True  # as if the warm-up had passed: a request that comes back empty is a 500
        request = {"q": ["Hello.", "Tea?"], "source": "en", "target": "zh"}
        answer = portal.call(lambda: http.post("/translate", json=request))
        assert answer.status_code == 500 and "to empty text" in answer.json()["error"]
        assert portal.call(lambda: http.get("/health/ready")).status_code == 503
        portal.call(http.aclose)


def test_a_request_that_comes_back_empty_from_a_working_model_leaves_the_service_ready(deployed, monkeypatch):
    generate = Translator.generate_sorted

    def silent_on_symbols(self, encoded, *args, **kwargs):  # a working model with no words for two symbols
        out = generate(self, encoded, *args, **kwargs)
        return [[] for _ in encoded] if len(encoded) == 2 and encoded[0][0] == symbols[0] else out

    app = create_app(Translator(deployed), ServeSettings(model_dir=str(deployed)))
    symbols = Translator(deployed).tokenizer.encode("§")
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(app.router.lifespan_context(app)):
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve", timeout=60)
        assert _settled(portal, http).status_code == 200
        monkeypatch.setattr(Translator, "generate_sorted", silent_on_symbols)
        request = {"q": ["§", "§"], "source": "en", "target": "zh"}
        answer = portal.call(lambda: http.post("/translate", json=request))
        assert answer.status_code == 500 and "to empty text" in answer.json()["error"]
        assert portal.call(lambda: http.get("/health/ready")).status_code == 200  # the warm-up still translates
        portal.call(http.aclose)


def _settled(portal, http: httpx.AsyncClient) -> httpx.Response:
    """/health/ready once the warm-up is over (ready, or not ready for another reason than warming up)."""
    deadline = time.monotonic() + 30
    while True:
        answer = portal.call(lambda: http.get("/health/ready"))
        if answer.status_code == 200 or "warming up" not in answer.text or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


# Item 5: batch keys completion on what the model's files hold and the decoding settings.
def test_batch_redoes_a_file_when_the_model_content_changes(deployed, tmp_path, text_file):
    model, out = tmp_path / "model", tmp_path / "shards"
    shutil.copytree(deployed, model)
    run = {"options": TOKENS, "progress": False, "log": None}
    assert translate_files(model, str(text_file), out, **run)["skipped"] == 0
    assert translate_files(model, str(text_file), out, **run)["skipped"] == 1
    generation = model / "generation_config.json"  # same size, other content, listed again
    settings = json.loads(generation.read_text(encoding="utf-8"))
    generation.write_text(json.dumps({**settings, "num_beams": 1}, indent=2), encoding="utf-8")
    integrity.write_sums(model)
    assert translate_files(model, str(text_file), out, **run)["skipped"] == 0
    assert translate_files(model, str(text_file), out, **{**run, "options": {"max_new_tokens": 3}})["skipped"] == 0
    (model / layout.SUMS).unlink()  # no list: every file is hashed
    assert translate_files(model, str(text_file), out, **run)["skipped"] == 0
    assert translate_files(model, str(text_file), out, **run)["skipped"] == 1
    reordered = dict(reversed(json.loads(generation.read_text(encoding="utf-8")).items()))
    generation.write_text(json.dumps(reordered, indent=2), encoding="utf-8")  # same size, other bytes
    assert translate_files(model, str(text_file), out, **run)["skipped"] == 0


# Item 3: doctor fails what is broken beyond the stated limits, and warns within them.
def test_doctor_fails_a_damaged_int8_model_and_states_its_limits(deployed, tiny_dir, tmp_path):
    rows = {r["check"]: r for r in doctor.diagnose(deployed, source=tiny_dir)}
    assert not [r for r in rows.values() if r["status"] == "fail"], rows
    broken = tmp_path / "deploy"
    shutil.copytree(deployed, broken)
    (broken / layout.SUMS).unlink()  # unverifiable: the numerical checks must catch it
    zero_range(broken / layout.WEIGHTS)
    rows = {r["check"]: r for r in doctor.diagnose(broken, source=tiny_dir)}
    parity, greedy = rows["logits parity at two shapes"], next(r for c, r in rows.items() if c.startswith("greedy"))
    assert parity["status"] == "fail" and f"<= {doctor.QUANTIZED_LOGITS_LIMIT} expected of int8" in parity["evidence"]
    assert f"at least {doctor.QUANTIZED_GREEDY_MIN:.0%} expected of int8" in greedy["evidence"], greedy
