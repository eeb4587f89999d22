"""The course: every notebook is a lesson a learner can follow. It opens with what it teaches, what it needs and how
long it takes, ends with what to try next, keeps its prose short, declares the notebooks it needs in its metadata,
and never types a measurement into its prose (the run prints them)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from conftest import REPO
from mtonnx.lab import prerequisites
from mtonnx.report import prose

NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_WORDS = 900  # of markdown per notebook: what teaches (why, what to look at, what it means), no changelog
# Checks a notebook being rewritten does not pass yet, each with its reason; strict, so a fixed one must leave.
PENDING: dict[tuple[str, str], str] = {}  # (notebook, check): why it is expected to fail, until fixed


def each(check: str):
    """Every notebook as a parameter, the PENDING ones for `check` marked as expected (strictly) to fail."""
    return [
        pytest.param(path, id=path.name, marks=pytest.mark.xfail(strict=True, reason=PENDING[(path.name, check)]))
        if (path.name, check) in PENDING
        else pytest.param(path, id=path.name)
        for path in NOTEBOOKS
    ]


def markdown(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]


# A typed-in measurement: caught in any markdown cell, in any of its usual spellings; not in code, versions or ids.
TYPED_IN = [
    "it translated 67 sentences/s",
    "5 ms of wait",
    "at 1,200 tokens/s",
    "the int8 file is 3.2 MB",
    "2.5x faster",
    "at least 4× PyTorch",
    "it held 23 % of the time",
    "a 5-minute run",
    "loads in 0.4 s",
]
NOT_MEASUREMENTS = [
    "torch 2.13 and transformers 4.57, opset 18",
    "a 95 % confidence interval",
    "batch 8, beam 4, int8 and fp16, 1M sentences",
    "set `serve.max_wait_ms: 5` or run `sleep 5s`",
    "```\nmtonnx bench  # 12 ms per step\n```",
    "the hex 0x1F and the b32 block size",
]


@pytest.mark.parametrize("text", TYPED_IN)
def test_a_typed_in_measurement_is_found(text):
    assert len(prose.findings(text)) == 1, text


@pytest.mark.parametrize("text", NOT_MEASUREMENTS)
def test_code_versions_and_definitions_are_not_measurements(text):
    assert prose.findings(text) == [], text


def test_a_measurement_typed_into_a_notebooks_markdown_fails_the_check(tmp_path):
    path = tmp_path / "01_lesson.ipynb"
    cells = [new_markdown_cell("# A lesson\n\nWhat to look at."), new_code_cell("print('67 sentences/s')")]
    nbformat.write(new_notebook(cells=cells), path)
    assert prose.notebook_findings(path) == []  # printed by a cell: the run's number
    cells.append(new_markdown_cell("Batching took the model from\n67 to 44 sentences/s."))
    nbformat.write(new_notebook(cells=cells), path)
    [finding] = prose.notebook_findings(path)
    assert finding.where == "01_lesson.ipynb cell 2:2" and finding.phrase == "44 sentences/s"


def test_a_document_is_checked_outside_its_generated_blocks(tmp_path):
    doc = tmp_path / "README.md"
    table = f"{prose.GENERATED}\n| int8 | 12 ms |\n{prose.GENERATED_END}"
    doc.write_text(f"# Results\n\n{table}\n\nIt runs in 3 s.\n", encoding="utf-8")
    assert [(f.where, f.phrase) for f in prose.document_findings(doc)] == [("README.md:7", "3 s")]


@pytest.mark.parametrize("path", each("prose"))
def test_no_notebook_types_a_measurement_into_its_prose(path):
    assert [str(f) for f in prose.notebook_findings(path)] == []


@pytest.mark.parametrize("path", each("path"))
def test_each_notebook_opens_with_the_learners_path_and_ends_with_what_to_try_next(path):
    cells = nbformat.read(path, as_version=4).cells
    opening = cells[0].source
    assert cells[0].cell_type == "markdown" and opening.startswith(f"# {path.name[:2]} · ")
    for part in ("**You will learn**", "**It needs**", "**It takes**"):
        assert part in opening, part
    needs = opening.split("**It needs**")[1].split("**It takes**")[0]
    assert sorted(set(re.findall(r"\b\d\d\b", needs))) == sorted(prerequisites.declaration(path).needs)
    assert "**Try next:**" in markdown(path)[-1]  # the last words of prose (a recording cell may follow)


@pytest.mark.parametrize("path", each("words"))
def test_each_notebook_keeps_its_prose_short(path):
    assert sum(len(source.split()) for source in markdown(path)) <= MAX_WORDS


@pytest.mark.parametrize("path", each("declares"))
def test_each_notebook_declares_what_it_needs_and_records(path):
    declared = prerequisites.declaration(path)
    numbers = {p.name[:2] for p in NOTEBOOKS}
    assert declared.records, "declare the metrics sections it records"
    assert all(need in numbers and need < path.name[:2] for need in declared.needs), declared.needs
    code = " ".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert set(declared.records) <= set(re.findall(r"report\.record\(\s*run_dir,\s*\"(\w+)\"", code))
