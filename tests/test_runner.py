"""The pipeline runner: notebooks in order, a failing one named with its cell, a non-zero exit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import REPO, cli_env, mtonnx_cmd, run_cli
from mtonnx.report import runner

PARAMS = '# parameters\nparams_path = ""\nrun_dir = ""\nmodels_dir = ""'


def write_notebook(path: Path, *sources: str) -> None:
    cells = [new_code_cell(PARAMS, metadata={"tags": ["parameters"]})] + [new_code_cell(s) for s in sources]
    notebook = new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "mtonnx", "display_name": "mtonnx", "language": "python"}}
    )
    nbformat.write(notebook, path)


@pytest.fixture
def notebooks(tmp_path) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    write_notebook(folder / "01_ok.ipynb", "from mtonnx import report\nreport.record(run_dir, 'first', {'answer': 42})")
    write_notebook(folder / "02_boom.ipynb", "x = 1", "raise ValueError('boom at step two')")
    write_notebook(
        folder / "03_never.ipynb", "from mtonnx import report\nreport.record(run_dir, 'third', {'ran': True})"
    )
    return folder


def test_failing_notebook_is_named_with_its_cell_and_the_run_exits_nonzero(tmp_path, notebooks, models_dir):
    out = tmp_path / "run"
    done = subprocess.run(
        mtonnx_cmd(
            "run", "--params", str(REPO / "params" / "ci.yaml"), "--out", str(out), "--notebooks", str(notebooks)
        ),
        capture_output=True,
        text=True,
        env=cli_env(models_dir),
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "mtonnx: error: 02_boom.ipynb failed at cell In[4] (`raise ValueError('boom at step two')`)"
    )
    assert "ValueError: boom at step two" in error
    kept = nbformat.read(out / "notebooks" / "02_boom.ipynb", as_version=4)
    assert any(o.get("ename") == "ValueError" for c in kept.cells if c.cell_type == "code" for o in c.outputs)
    assert not (out / "notebooks" / "03_never.ipynb").exists()
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"first", "run"} and metrics["first"] == {"answer": 42}  # 03 never ran
    index = (out / "index.html").read_text()
    assert "failed" in index and "notebooks/02_boom.html" in index


def test_a_params_file_outside_the_project_says_which_root_is_missing(tmp_path, models_dir):
    params = tmp_path / "elsewhere.yaml"
    params.write_text("model:\n  name: tiny\n")
    env = {k: v for k, v in cli_env(models_dir).items() if k != "MTONNX_PROJECT_ROOT"}
    done = run_cli("run", "--params", str(params), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"mtonnx: error: {tmp_path.parent / 'notebooks'} does not exist: the project root ({tmp_path.parent}) must be "
        "the checkout that holds notebooks/ and models/; set `project_root` in the params file (relative to it) or "
        "$MTONNX_PROJECT_ROOT, or pass --notebooks"
    )
    ok = run_cli(
        "run",
        "--params",
        str(params),
        "--out",
        str(tmp_path / "out"),
        "--only",
        "99",
        env={**env, "MTONNX_PROJECT_ROOT": str(REPO)},
        cwd=tmp_path,
        timeout=120,
    )
    assert "--only 99: no such notebook" in ok.stderr  # with the root given, the project's notebooks are found


def test_only_selects_notebooks_by_number(notebooks):
    assert [p.name for p in runner.select_notebooks(notebooks, ["01", "03"])] == ["01_ok.ipynb", "03_never.ipynb"]
    with pytest.raises(runner.RunFailed, match="--only 07: no such notebook"):
        runner.select_notebooks(notebooks, ["07"])


def test_missing_kernel_names_the_fix():
    with pytest.raises(runner.RunFailed, match="kernel 'no-such-kernel' is not registered: run `make install`"):
        runner.check_kernel("no-such-kernel")
