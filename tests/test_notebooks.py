"""Notebook hygiene: committed without outputs, parameters cell first, the project kernel, no sys.path hacks."""

from __future__ import annotations

import nbformat
import pytest

from conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_exist():
    assert NOTEBOOKS and NOTEBOOKS[0].name == "01_inspect_model.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean_and_parameterized(path):
    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert {"params_path", "run_dir", "models_dir"} <= {
        line.split("=")[0].strip() for line in code[0].source.splitlines()
    }
    assert all(not c.outputs and c.execution_count is None for c in code), "strip outputs before committing"
    assert notebook.metadata.kernelspec.name == "mtonnx"
    assert not any("sys.path" in c.source for c in code)
