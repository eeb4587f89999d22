"""The pipeline runner: notebooks in order, a failing one named with its cell, a non-zero exit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import REPO, cli_env, mtonnx_cmd, run_cli
from mtonnx.lab import prerequisites, runner

PARAMS = '# parameters\nparams_path = ""\nrun_dir = ""\nmodels_dir = ""'


def write_notebook(path: Path, *sources: str, needs: tuple[str, ...] = (), records: tuple[str, ...] = ()) -> None:
    cells = [new_code_cell(PARAMS, metadata={"tags": ["parameters"]})] + [new_code_cell(s) for s in sources]
    metadata = {
        "kernelspec": {"name": "mtonnx", "display_name": "mtonnx", "language": "python"},
        "mtonnx": {"needs": list(needs), "records": list(records)},
    }
    nbformat.write(new_notebook(cells=cells, metadata=metadata), path)


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
    seconds = metrics["run"]["notebook_seconds"]  # the times the report lists, the failed notebook's included
    assert list(seconds) == ["01_ok", "02_boom"] and all(s > 0 for s in seconds.values())
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


def record_cell(section: str, *reads: str) -> str:
    """A cell that fails unless the sections `reads` were recorded before it, then records `section`."""
    checks = "".join(f"assert report.recorded(run_dir, {r!r}), 'ran on nothing: {r} missing'\n" for r in reads)
    return f"from mtonnx import report\n{checks}report.record(run_dir, {section!r}, {{'ran': True}})"


@pytest.fixture
def course(tmp_path) -> Path:
    """Three lessons: 02 reads what 01 recorded, 03 what 02 recorded."""
    folder = tmp_path / "course"
    folder.mkdir()
    write_notebook(folder / "01_first.ipynb", record_cell("first"), records=("first",))
    write_notebook(folder / "02_second.ipynb", record_cell("second", "first"), needs=("01",), records=("second",))
    write_notebook(folder / "03_third.ipynb", record_cell("third", "second"), needs=("02",), records=("third",))
    return folder


def test_plan_adds_the_prerequisites_that_have_not_run_and_theirs(course, tmp_path):
    found = runner.select_notebooks(course)
    first, second, third = found
    assert prerequisites.plan([third], found, tmp_path / "fresh") == ([first, second, third], [first, second])
    ran = tmp_path / "ran"
    (ran / "metrics").mkdir(parents=True)
    (ran / "metrics" / "first.json").write_text("{}")
    assert prerequisites.plan([third], found, ran) == ([second, third], [second])  # 01 ran there: met
    assert prerequisites.plan([first, third], found, tmp_path / "fresh")[1] == [second]  # 01 runs first anyway


def test_a_need_that_no_earlier_notebook_meets_is_one_line(course):
    write_notebook(course / "04_fourth.ipynb", "x = 1", needs=("05",), records=("fourth",))
    write_notebook(course / "05_fifth.ipynb", "x = 1", records=("fifth",))
    with pytest.raises(prerequisites.PrerequisiteError, match="04_fourth.ipynb needs notebook 05, which does not"):
        prerequisites.plan(runner.select_notebooks(course, ["04"]), runner.select_notebooks(course), "nowhere")
    write_notebook(course / "04_fourth.ipynb", "x = 1", needs=("09",), records=("fourth",))
    with pytest.raises(prerequisites.PrerequisiteError, match="needs notebook 09, which is not among"):
        prerequisites.plan(runner.select_notebooks(course, ["04"]), runner.select_notebooks(course), "nowhere")


def test_only_a_later_lesson_on_a_fresh_run_runs_its_prerequisites_first_and_says_so(course, tmp_path, models_dir):
    out = tmp_path / "run"

    def only(numbers: str) -> subprocess.CompletedProcess:
        args = ("run", "--params", str(REPO / "params" / "ci.yaml"), "--out", str(out), "--notebooks", str(course))
        return subprocess.run(
            mtonnx_cmd(*args, "--only", numbers),
            capture_output=True,
            text=True,
            env=cli_env(models_dir),
            cwd=tmp_path,
            timeout=300,
        )

    done = only("03")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "needed first" in line]
    assert said == [f"not yet run in {out}, needed first: 01_first.ipynb, 02_second.ipynb"]
    assert "[3/3] 03_third.ipynb ok" in done.stderr
    assert set(json.loads((out / "metrics.json").read_text())) >= {"first", "second", "third"}
    again = only("03")  # its prerequisites ran in this directory: only 03 runs
    assert again.returncode == 0 and "needed first" not in again.stderr and "[1/1] 03_third.ipynb ok" in again.stderr
