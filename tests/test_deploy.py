"""`deploy/`: the recommended variant with its model card, loaded by `--run`, checked by doctor, stamped with the
run's identity; and a run's footprint: scratch removed at its end, shared bytes counted once."""

from __future__ import annotations

import json
import os

import pytest

from conftest import run_cli
from mtonnx import deploy
from mtonnx.check.doctor import diagnose
from mtonnx.lab import footprint
from mtonnx.runtime import Translator, layout
from mtonnx.variants import registry

ROW = {
    "bleu": 10.5,
    "bleu_delta": -0.12,
    "bleu_delta_ci": [-0.31, 0.07],
    "gate": "pass",
    "fidelity": {"same_as_fp32": 0.934, "same_as_fp32_ci": [0.91, 0.955], "chrf_vs_fp32": 97.1},
    "fidelity_gate": "pass",
    "workload_ms": 123.4,
    "size_mb": 7.5,
    "rss_mb": 88.0,
}


def facts(run: str) -> dict:
    return {
        "model": "tiny",
        "family": "marian",
        "variant": "int8",
        "recipe": registry.BY_NAME["int8"].about,
        "row": ROW,
        "fp32_bleu": 10.62,
        "sentences": 40,
        "gate_bleu": 0.5,
        "fidelity_min": 0.8,
        "data": "the packaged evaluation set",
        "objective": "latency@b1,b8;beams=4",
        "repeats": 5,
        "vs_fp32": 1.8,
        "vs_peers": {"vs pytorch-fp32": 3.1, "vs ct2-int8": None},
        "reason": "int8: passes both gates",
        "layout": "split",
        "run": run,
        "source_prefix": "",
    }


@pytest.fixture(scope="module")
def run_dir(hand_export, tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    built = registry.build(hand_export, run / "variants", registry.Inputs(), ["int8", "fp16"], log=None)
    assert not built.failed
    deploy.publish(run, run / "variants" / "int8", facts(str(run)))
    return run


def test_deploy_links_the_variant_and_writes_its_card_from_the_facts(run_dir):
    target = run_dir / layout.DEPLOY
    for path in (run_dir / "variants" / "int8").iterdir():
        if path.name != layout.SUMS:  # deploy/ lists its own files
            assert os.path.samefile(path, target / path.name), path.name  # hard links: the bytes stored once
    card = (target / layout.MODEL_CARD).read_text(encoding="utf-8")
    for expected in (
        "# tiny: int8",
        "**pass**; BLEU 10.5 (fp32 10.62), delta -0.12, 95 % CI [-0.31, +0.07], margin 0.5",
        "93.4% identical, 95 % CI [91.0%, 95.5%], minimum 80%; chrF against fp32's output 97.1",
        "Objective `latency@b1,b8;beams=4`: 123.4 ms for the workload, 5 paired repetitions; 1.8x fp32, 3.1x vs "
        "pytorch-fp32 (paired medians)",
        f"mtonnx translate --run {run_dir}",
    ):
        assert expected in card, expected
    deploy.stamp(run_dir, "abc123", {"git": {"sha": "f00d", "dirty": False}, "params_hash": "p1", "cpu": {}})
    card = (target / layout.MODEL_CARD).read_text(encoding="utf-8")
    assert "- Run: fingerprint `abc123`, git `f00d`, params hash `p1`" in card


def test_translate_serve_and_batch_load_a_runs_deploy_directory(run_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("Hello, teacher!\n", encoding="utf-8")
    by_run = run_cli("translate", "--run", str(run_dir), "-i", str(source), "--max-new-tokens", "6")
    assert by_run.returncode == 0, by_run.stderr
    expected = Translator(run_dir / layout.DEPLOY).translate("Hello, teacher!", max_new_tokens=6)
    assert by_run.stdout == expected + "\n"
    for command in (["translate"], ["serve"], ["batch", "--input", str(source), "--output", str(tmp_path / "o")]):
        done = run_cli(*command, "--run", str(tmp_path))  # a directory that is not a run: no deploy/
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert "the run has no deploy/ directory; the quantization notebook writes it" in lines[0], lines[0]


def test_doctor_passes_on_deploy_and_finds_the_source_model_through_the_manifests(run_dir, tiny_dir):
    rows = diagnose(run_dir / layout.DEPLOY)
    assert not [r for r in rows if r["status"] == "fail"], rows
    assert not [r for r in rows if r["status"] == "skip" and "source" in r["evidence"]], rows  # source model found


def test_a_runs_scratch_is_removed_at_its_end_and_shared_bytes_count_once(run_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run, copy_function=os.link)  # every file a hard link, as deploy/ is to its variant
    (run / "pitfalls").mkdir()
    (run / "pitfalls" / "x.onnx").write_bytes(b"\0" * 4096)
    (run / "variants" / layout.TRANSLATIONS).write_text("{}")
    shutil.copytree(run_dir / "variants" / "int8", run / "export_manual")  # a stand-in export, its own bytes
    before = footprint.disk_mb(run)
    kept = footprint.tidy(run, ["recommended"], "int8")
    assert sorted(p.name for p in (run / "variants").iterdir()) == ["int8", layout.TRANSLATIONS]
    assert not (run / "pitfalls").exists() and kept["removed"] == ["variants/fp16", "pitfalls"]
    assert kept["disk_mb"] < before and kept["kept_variants"] == ["int8"]
    # deploy/ and variants/int8 share their bytes: counted once, so the run holds about two copies of int8, not three
    int8 = footprint.disk_mb(run / "variants" / "int8")
    assert kept["disk_mb"] < 2.5 * int8 and kept["disk_vs_export"] == round(kept["disk_mb"] / kept["export_mb"], 2)
    everything = footprint.tidy(run, ["all"], "int8")
    assert everything["removed"] == [] and everything["kept_variants"] == ["int8"]
    assert json.loads((run / "variants" / layout.TRANSLATIONS).read_text()) == {}


def test_a_deployed_variant_with_a_weights_file_can_still_be_built_from(hand_export, tmp_path):
    """The onnx library refuses external data with several hard links ("a potential hardlink attack"): deploy/
    copies weights.bin, so the registry can still derive a variant from the recommended one."""
    variants = tmp_path / "variants"
    built = registry.build(hand_export, variants, registry.Inputs(), ["int8-tuned"], log=None)
    assert not built.failed and (variants / "int8-tuned" / layout.WEIGHTS).is_file()
    deploy.publish(tmp_path, variants / "int8-tuned", facts(str(tmp_path)))
    assert not os.path.samefile(variants / "int8-tuned" / layout.WEIGHTS, tmp_path / layout.DEPLOY / layout.WEIGHTS)
    derived = registry.build(hand_export, variants, registry.Inputs(), ["int8-tuned-target-vocab"], log=None)
    assert derived.reused == ["int8-tuned"] and "int8-tuned-target-vocab" in derived.manifests, derived.failed


def test_a_deploy_directory_translates_with_the_source_prefix_its_run_used(hand_export, tmp_path):
    """opus-mt-en-zh needs >>cmn_Hans<< in front of every sentence: a run's deploy/ carries its prefix, so
    `--run` and the Python API translate as the run measured it without being told again; a flag still overrides it."""
    variants = tmp_path / "variants"
    registry.build(hand_export, variants, registry.Inputs(), ["fp32"], log=None)
    deploy.publish(tmp_path, variants / "fp32", {**facts(str(tmp_path)), "variant": "fp32", "source_prefix": "Hi"})
    source = tmp_path / "in.txt"
    source.write_text("Thank you.\n", encoding="utf-8")
    translator = Translator(tmp_path / layout.DEPLOY)
    with_prefix = translator.translate("Thank you.", source_prefix="Hi", max_new_tokens=6)
    bare = translator.translate("Thank you.", source_prefix="", max_new_tokens=6)
    assert with_prefix != bare  # the prefix changes the output
    assert translator.translate("Thank you.", max_new_tokens=6) == with_prefix  # the API reads deploy.json
    by_run = run_cli("translate", "--run", str(tmp_path), "-i", str(source), "--max-new-tokens", "6")
    assert by_run.returncode == 0 and by_run.stdout == with_prefix + "\n", by_run.stderr
    told = run_cli(
        "translate", "--run", str(tmp_path), "-i", str(source), "--max-new-tokens", "6", "--source-prefix", ""
    )
    assert told.stdout == bare + "\n"


def test_the_card_says_what_the_web_export_ships_and_how_its_gate_went(hand_export, tmp_path):
    web = tmp_path / "web"
    (web / "onnx").mkdir(parents=True)
    (web / "onnx" / "encoder_model.onnx").write_bytes(b"x")
    section = {"variant": "fp32", "dtype": "fp32", "size_mb": 31.9, "page": "index.html", "published": True}
    gate = {"sentences": 10, "tokenizer": 10, "greedy": 10, "beam4": 10, "gate": "pass"}
    deploy.publish(tmp_path, hand_export, {**facts("runs/x"), "web": {**section, "node": gate}}, web)
    card = (tmp_path / layout.DEPLOY / layout.MODEL_CARD).read_text(encoding="utf-8")
    assert "`deploy/web/` holds the model for Transformers.js" in card and "fp32 (31.9 MB), not the deployed" in card
    assert "sentences identical of 10: tokenizer 10, greedy 10, beam4 10: **pass**" in card
    assert "`mtonnx serve --run runs/x --web`" in card
    assert (tmp_path / layout.DEPLOY / "web" / "onnx" / "encoder_model.onnx").read_bytes() == b"x"
    unmeasured = {**section, "node": {"gate": "not measured", "reason": "node is not installed"}}
    assert any("not measured (node is not installed)" in line for line in deploy.web_lines(unmeasured, "r"))
    fidelity = {"same_as_fp32": 0.9, "same_as_fp32_ci": [0.85, 0.95], "chrf_vs_fp32": 97.1}
    q8 = {"node": gate, "fidelity": fidelity, "fidelity_gate": "pass"}
    browser = {"gate": "pass", "dtype": "q8", "sentences": 50, "same_as_node": 50, "fidelity": fidelity}
    shipped = deploy.web_lines(
        {**section, "variant": "int8-rows", "dtype": "q8", "node": gate, "q8": q8, "browser": browser}, "r"
    )
    assert any(
        "int8's fidelity to fp32 in Node: **pass**; 90.0% identical, 95 % CI [85.0%, 95.0%]" in x for x in shipped
    )
    assert any(
        "The page in Chromium (q8, WASM): fidelity to fp32 **pass**, 90.0% identical, 95 % CI [85.0%, 95.0%]; "
        "50 of 50 sentences with Node's ids." in x
        for x in shipped
    )
    assert any("Transformers.js (dtype `q8`)" in x and "int8-rows (31.9 MB)" in x for x in shipped)
    failed = {"published": False, "reason": "Node's tokens differ from the Python runtime's"}
    assert deploy.web_lines(failed, "r")[2] == "No web export: Node's tokens differ from the Python runtime's."
