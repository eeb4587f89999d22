"""`mtonnx doctor` passes the project's own exports and names the right check for each broken one."""

from __future__ import annotations

import json
import shutil

import onnx
import pytest
from onnx import helper

from conftest import run_cli
from mtonnx.check import doctor, pitfalls
from mtonnx.export.manual import export_manual, load_for_export
from mtonnx.runtime import layout
from mtonnx.variants.build import build_variant
from mtonnx.variants.transforms import dynamic_int8, naive_int8


def failures(rows) -> dict[str, str]:
    return {r["check"]: r["evidence"] for r in rows if r["status"] == "fail"}


@pytest.fixture
def broken(hand_export, tmp_path):
    """A fresh copy of the hand export to damage."""
    target = tmp_path / "broken"
    shutil.copytree(hand_export, target)
    (target / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    return target


def test_project_exports_pass(tiny_dir, hand_export, optimum_dir, tmp_path):
    assert failures(doctor.diagnose(hand_export, source=tiny_dir)) == {}
    assert failures(doctor.diagnose(optimum_dir, source=tiny_dir)) == {}
    build_variant("int8", hand_export, tmp_path / "int8", dynamic_int8(), {})
    rows = doctor.diagnose(tmp_path / "int8", source=tiny_dir)
    assert failures(rows) == {}
    assert {r["check"]: r["status"] for r in rows}["int8: integer lm_head, no per-step dequantize"] == "ok"


def test_static_axes_are_flagged(tiny_dir, broken):
    pitfalls.static_axes(load_for_export(tiny_dir), broken / "work", exporter="torchscript")
    shutil.copy(broken / "work" / "encoder_static.onnx", broken / "encoder_model.onnx")
    found = failures(doctor.diagnose(broken, source=tiny_dir))
    assert "fixed at [2, 7]" in found["input names, dtypes, dynamic dims"]


def test_int32_inputs_are_flagged(tiny_dir, broken):
    model = onnx.load(str(broken / "encoder_model.onnx"))
    for node in model.graph.node:
        node.input[:] = ["input_ids_int64" if i == "input_ids" else i for i in node.input]
    model.graph.node.insert(0, helper.make_node("Cast", ["input_ids"], ["input_ids_int64"], to=onnx.TensorProto.INT64))
    next(i for i in model.graph.input if i.name == "input_ids").type.tensor_type.elem_type = onnx.TensorProto.INT32
    onnx.save(model, str(broken / "encoder_model.onnx"))
    found = failures(doctor.diagnose(broken, source=tiny_dir))
    assert "encoder_model.onnx:input_ids is int32, not int64" in found["input names, dtypes, dynamic dims"]
    assert any(check.startswith("greedy tokens = generate") for check in found)  # int64 ids are rejected


def test_wrong_start_token_is_flagged(tiny_dir, broken):
    config = json.loads((broken / "generation_config.json").read_text())
    config["decoder_start_token_id"] = config["eos_token_id"]
    (broken / "generation_config.json").write_text(json.dumps(config))
    found = failures(doctor.diagnose(broken, source=tiny_dir))
    assert "decoder_start_token_id: export 0 vs model" in found["start, eos, pad, bad words"]


def test_naive_int8_is_flagged(tiny_dir, tmp_path):
    source = tmp_path / "dynamo"
    export_manual(tiny_dir, source, exporter="dynamo")
    build_variant("int8-naive", source, tmp_path / "naive", naive_int8, {})
    found = failures(doctor.diagnose(tmp_path / "naive", source=tiny_dir))
    assert "lm_head MatMul is fp32" in found["int8: integer lm_head, no per-step dequantize"]


def test_mismatched_vocab_is_flagged_and_the_cli_exits_1_with_json(tiny_dir, broken):
    vocab = json.loads((broken / "vocab.json").read_text())
    vocab["<extra>"] = len(vocab)
    (broken / "vocab.json").write_text(json.dumps(vocab))
    done = run_cli("doctor", "--model-dir", str(broken), "--source", str(tiny_dir), "--json", timeout=300)
    assert done.returncode == 1
    rows = json.loads(done.stdout)
    assert "entries but the model's logits have" in failures(rows)["tokenizer vocab = logits size"]


def test_missing_files_stop_the_diagnosis(tiny_dir, tmp_path):
    rows = doctor.diagnose(tmp_path, source=tiny_dir)
    assert [r["status"] for r in rows] == ["warn", "fail"] and "cannot be verified" in rows[0]["evidence"]
    assert rows[1]["check"] == "every ONNX file loads" and "missing encoder_model.onnx" in rows[1]["evidence"]
