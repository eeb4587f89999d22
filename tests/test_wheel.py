"""Install what you deploy: the wheel with its core dependencies only, on every Python 3.10-3.13 this machine has,
translates like the lab does, with a model of every family (Marian, M2M100, T5), and brings no torch, transformers,
optimum, jupyterlab or playwright."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from mtonnx.runtime import Translator, families

pytestmark = pytest.mark.wheel
PYTHONS = ("3.10", "3.12", "3.13")
# The core venv sees only what it installed: a PYTHONPATH pointing at the checkout would satisfy `mtonnx` for pip
# and import the source tree instead of the wheel.
ISOLATED = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
SENTENCES = ["Hello, teacher!", "Run the command, then restart the server.", "", "He wears a suit."]
LAB_ONLY = ("torch", "transformers", "optimum", "optimum-onnx", "jupyterlab", "playwright", "onnx", "papermill")


def find_python(version: str) -> str | None:
    """python3.X on PATH, else pyenv's."""
    found = shutil.which(f"python{version}")
    candidates = [found] if found else []
    candidates += sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))
    for candidate in candidates:
        done = subprocess.run(
            [candidate, "-c", "import sys, venv; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if done.returncode == 0 and done.stdout.strip() == str(tuple(int(x) for x in version.split("."))):
            return candidate
    return None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (found,) = out.glob("mtonnx-*.whl")
    return found


@pytest.mark.parametrize("version", PYTHONS)
def test_the_core_wheel_translates_like_the_lab_without_the_lab(version, wheel, hand_export, family_export, tmp_path):
    python = find_python(version)
    if python is None:
        pytest.skip(
            f"Python {version} is not installed here (pyenv install {version}): the core wheel is not checked on it"
        )
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    done = subprocess.run([*pip, "install", str(wheel)], capture_output=True, text=True, timeout=900, env=ISOLATED)
    assert done.returncode == 0, done.stderr[-2000:]
    installed = {
        line.split("==")[0].lower()
        for line in subprocess.run(
            [*pip, "freeze"], capture_output=True, text=True, check=True, env=ISOLATED
        ).stdout.splitlines()
    }
    assert not installed & set(LAB_ONLY), installed & set(LAB_ONLY)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")

    def core(*args: str) -> subprocess.CompletedProcess:  # the core venv's own `mtonnx`
        return subprocess.run(
            [str(venv / "bin" / "mtonnx"), *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=ISOLATED,
        )

    exports = {"tiny": hand_export, **{name: family_export(name) for name in ("tiny-m2m100", "tiny-t5")}}
    for name, export in exports.items():  # Marian, M2M100 (its target language forced first), T5 (a task prefix)
        prefix = families.of_dir(export).source_prefix
        args = ("-i", str(source), "--max-new-tokens", "12", "--source-prefix", prefix)
        done = core("translate", "--model-dir", str(export), *args)
        assert done.returncode == 0, (name, done.stderr[-2000:])
        lab = [
            Translator(export).translate([s], max_new_tokens=12, source_prefix=prefix)[0] if s else ""
            for s in SENTENCES
        ]
        assert done.stdout.split("\n")[:-1] == lab and any(lab), name
    doctor = core("doctor", "--model-dir", str(hand_export), "--source", str(hand_export), "--json")
    rows = {r["check"]: r["status"] for r in json.loads(doctor.stdout)}
    assert doctor.returncode == 0 and rows["every ONNX file loads"] == "ok" and rows["opset"] == "skip", rows
    missing = core("run", "--params", str(REPO / "params" / "ci.yaml"))
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "mtonnx: error: `mtonnx run` needs the lab extra: pip install 'mtonnx[lab]'"
    )
