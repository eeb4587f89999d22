"""Nothing machine-specific in what is published: docs/, and a run's notebooks, report, metrics, env.json and model
card, name paths relative to the project root or the run directory, never where a machine keeps them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from conftest import REPO, cli_env, mtonnx_cmd
from mtonnx import deploy, report
from mtonnx.lab import environment, kernel
from test_deploy import facts

DOCS_SUFFIXES = (".md", ".json", ".ipynb", ".html", ".yml", ".yaml")
# Where machines keep checkouts, homes and temp files: an absolute path into one is a machine's (`../tmp/` too).
MACHINE = re.compile(r"(?<![\w])/(?:work|root|home|tmp|Users|var/folders|private/var)/[^\s\"'<>)\]\\]*")
# What a run publishes: the executed notebooks, the report, metrics, env.json, the model card and its facts.
PUBLISHED = (
    "notebooks/*.ipynb",
    "notebooks/*.html",
    "index.html",
    "metrics.json",
    "env.json",
    "deploy/model_card.md",
    "deploy/deploy.json",
)


def machine_dirs(*more: str | Path) -> list[str]:
    """The directories whose absolute paths would tell which machine made a file: the project root, the temp dir,
    the home dir, where Python keeps the libraries, and `more` (a run dir, a models dir)."""
    found = [REPO, tempfile.gettempdir(), Path.home(), sysconfig.get_paths()["purelib"], *more]
    return sorted({str(Path(d).resolve()) for d in found} - {"/"})


def absolute_paths(text: str, dirs: list[str]) -> list[str]:
    """Each absolute path into one of `dirs` in `text` (a `..` climb into one is relative: not counted)."""
    pattern = "|".join(re.escape(d) for d in dirs)
    return re.findall(rf"(?<![\w.])(?:{pattern})(?![\w.-])[^\s\"'<>)\]\\]*", text)


def machine_paths(run_dir: Path, *more: str | Path) -> list[str]:
    """`file: path` for each absolute path of this machine in the files a run publishes."""
    dirs = machine_dirs(run_dir, *more)
    files = [p for pattern in PUBLISHED for p in sorted(run_dir.glob(pattern))]
    return [f"{p.relative_to(run_dir)}: {hit}" for p in files for hit in absolute_paths(p.read_text("utf-8"), dirs)]


def test_docs_name_no_path_of_a_machine():
    """docs/ holds what `make docs-refresh` and `make scale-refresh` published (and the prose around it): it must
    not say where they ran."""
    files = sorted(p for p in (REPO / "docs").rglob("*") if p.suffix in DOCS_SUFFIXES and p.is_file())
    assert files
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        hits = MACHINE.findall(text) + absolute_paths(text, machine_dirs())
        found += [f"{path.relative_to(REPO)}: {hit}" for hit in dict.fromkeys(hits)]
    assert not found, f"{len(found)} machine paths in docs/, e.g.\n" + "\n".join(found[:20])


def test_the_patterns_find_absolute_paths_and_leave_relative_ones(tmp_path):
    assert MACHINE.findall('"params_file": "/work/wt/r/params/default.yaml"') == ["/work/wt/r/params/default.yaml"]
    assert MACHINE.findall("see https://example.org/home/page and ../../tmp/x") == ["/tmp/x"]
    text = f"PosixPath('{tmp_path}/figures/a.png') ../..{tmp_path}/b figures/c.png {tmp_path}-other"
    assert absolute_paths(text, [str(tmp_path)]) == [f"{tmp_path}/figures/a.png"]


def test_env_json_names_the_params_file_and_a_local_model_relative_to_the_project_root(tmp_path):
    root, elsewhere = tmp_path / "checkout", tmp_path / "models" / "opus"
    params = {
        "name": "p",
        "model": {"name": "opus", "path": str(elsewhere)},
        "_file": str(root / "params" / "p.yaml"),
        "_root": str(root),
        "_hash": "h",
    }
    env = environment.collect(params)
    assert env["params_file"] == "params/p.yaml" and env["params"]["model"]["path"] == "../models/opus"
    assert params["model"]["path"] == str(elsewhere)  # the params themselves keep the path that works
    assert absolute_paths(json.dumps(env), machine_dirs(tmp_path)) == []
    assert env["cpu"]["logical_cores"] and env["packages"]["onnxruntime"]  # the machine's facts stay
    assert environment.collect({"_root": str(root), "_file": None})["params_file"] is None


def test_the_model_card_names_its_run_from_the_project_root(tmp_path):
    root = tmp_path / "checkout"
    params = {"_root": str(root)}
    outside = report.run_path(tmp_path / "runs" / "y", params)
    assert (report.run_path(root / "outputs" / "x", params), outside) == ("outputs/x", "../runs/y")
    card = deploy.card(facts(outside))
    assert "mtonnx translate --run ../runs/y -i in.txt" in card and str(tmp_path) not in card


def test_a_warning_names_its_file_by_import_path():
    assert kernel.import_path(json.__file__) == "json/__init__.py"
    assert kernel.import_path(nbformat.__file__) == "nbformat/__init__.py"
    assert kernel.import_path("/nowhere/on/sys/path/thing.py") == "thing.py"


def test_a_run_gives_its_notebooks_paths_relative_to_the_run_dir_and_they_work(tmp_path, models_dir):
    """The parameters papermill injects, and the paths it records, are relative to the run dir (the kernel's
    working directory), and they open the params file and the models; a library's warning names its file by
    import path. Nothing the run publishes holds an absolute path of this machine."""
    notebooks, out = tmp_path / "notebooks", tmp_path / "run"
    notebooks.mkdir()
    cells = [
        new_code_cell('params_path = ""\nrun_dir = ""\nmodels_dir = ""', metadata={"tags": ["parameters"]}),
        new_code_cell(
            "import json, warnings\nfrom mtonnx import lab, report\n"
            "ctx = lab.context(params_path, run_dir, models_dir)\n"
            "print(ctx.params['name'], ctx.model['dir'], report.run_path(run_dir, ctx.params))\n"
            "warnings.warn_explicit('a library warns', UserWarning, json.__file__, 1)"
        ),
    ]
    metadata = {"kernelspec": {"name": "mtonnx", "display_name": "mtonnx", "language": "python"}}
    nbformat.write(new_notebook(cells=cells, metadata=metadata), notebooks / "01_paths.ipynb")
    params = REPO / "params" / "ci.yaml"
    done = subprocess.run(
        mtonnx_cmd("run", "--params", str(params), "--out", str(out), "--notebooks", str(notebooks)),
        capture_output=True,
        text=True,
        env=cli_env(models_dir),
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    executed = nbformat.read(out / "notebooks" / "01_paths.ipynb", as_version=4)
    recorded = executed.metadata.papermill
    models = os.path.relpath(models_dir, out)
    assert recorded.parameters == {"params_path": os.path.relpath(params, out), "run_dir": ".", "models_dir": models}
    assert (recorded.input_path, recorded.output_path) == ("../notebooks/01_paths.ipynb", "notebooks/01_paths.ipynb")
    streams = {o.name: o.text for o in executed.cells[-1].outputs if o.output_type == "stream"}
    name, model_dir, run = streams["stdout"].split()
    assert name == "ci" and Path(model_dir).parent == Path(models) and (out / model_dir / "config.json").is_file()
    assert run == os.path.relpath(out, REPO)
    assert "json/__init__.py:1: UserWarning: a library warns\n" in streams["stderr"]
    assert json.loads((out / "env.json").read_text())["params_file"] == "params/ci.yaml"
    assert machine_paths(out, models_dir) == []
