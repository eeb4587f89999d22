"""Params validation: every bad input gives one line naming the file and the key, exit code 2, fast."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from mtonnx.params import ParamsError, load


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model:\n  nmae: tiny\n", "unknown key 'model.nmae' (did you mean 'name'?)"),
        ("modle:\n  name: tiny\n", "unknown key 'modle' (did you mean 'model'?)"),
        ("data:\n  hsk_size: many\n", "'data.hsk_size' must be int, got str 'many'"),
        ("data:\n  hsk_size: true\n", "'data.hsk_size' must be int, got bool True"),
        ("generation:\n  num_beams: 0\n", "'generation.num_beams' = 0 is out of range 1..16"),
        ("data:\n  techdocs_size: 49\n", "'data.techdocs_size' = 49 is out of range 0..48"),
        ("data:\n  eval_split: train\n", "'data.eval_split' must be one of dev, test, got 'train'"),
        ("model:\n  path: no/such/dir\n", "'model.path' points to"),
        ("model: [1, 2]\n", "'model' must be a mapping, got list"),
        ("model:\n  name:\n", "'model.name' must not be empty"),
        ("quant:\n  invariance_exempt: [int8]\n", "'quant.invariance_exempt' must be dict, got list"),
        (
            "quant:\n  invariance_exempt:\n    int8: ''\n",
            "'quant.invariance_exempt' maps names to non-empty reasons; 'int8' has ''",
        ),
        ("data: {hsk_size: 5\n", "not valid YAML"),
        ("- a\n- b\n", "the top level must be a mapping"),
    ],
)
def test_bad_params_give_one_line_naming_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ParamsError) as err:
        load(path)
    assert message in str(err.value)
    assert str(err.value).startswith(f"{path}: ")
    assert "\n" not in str(err.value)


def test_missing_params_file(tmp_path):
    with pytest.raises(ParamsError, match="params file not found"):
        load(tmp_path / "nope.yaml")


def test_defaults_name_and_hash(tmp_path):
    path = write(tmp_path, "data:\n  hsk_size: 3\n")
    params = load(path)
    assert params["name"] == "run"
    assert params["data"]["hsk_size"] == 3
    assert params["generation"]["num_beams"] == 4  # default filled
    assert load(path)["_hash"] == params["_hash"]
    assert load(write(tmp_path, "data:\n  hsk_size: 4\n"))["_hash"] != params["_hash"]


def test_model_path_is_relative_to_the_params_file(tmp_path):
    (tmp_path / "local-model").mkdir()
    params = load(write(tmp_path, "model:\n  name: Helsinki-NLP/opus-mt-en-zh\n  path: local-model\n"))
    assert params["model"]["path"] == str((tmp_path / "local-model").resolve())


@pytest.mark.parametrize("path", sorted((REPO / "params").glob("*.yaml")), ids=lambda p: p.name)
def test_project_params_files_are_valid(path):
    assert load(path)["name"] == path.stem


def test_cli_rejects_misspelled_key_fast_without_heavy_imports(tmp_path):
    path = write(tmp_path, "model:\n  nmae: tiny\n")
    probe = (
        "import sys; from mtonnx.cli import main; rc = main(['run', '--params', sys.argv[1]]); "
        "heavy = [m for m in ('torch', 'transformers', 'papermill', 'onnxruntime') if m in sys.modules]; "
        "print('heavy:', heavy); sys.exit(rc)"
    )
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"mtonnx: error: {path}: unknown key 'model.nmae' (did you mean 'name'?)"
    ]
    assert "heavy: []" in done.stdout
    assert elapsed < 2.0
