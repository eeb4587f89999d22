"""The tables typed into the docs that name the repository's own files and models stay true: the params page lists
every file in params/ with the model it names, and the model tables name only models the code builds, trains or
loads, and params files that exist."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from mtonnx import params as params_module
from mtonnx.sources import models


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table after `heading`, header and separator left out."""
    rows = []
    for line in text[text.index(heading) :].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif rows:
            break
    return rows[2:]


def test_the_params_page_lists_every_params_file_with_its_model():
    rows = table_rows((REPO / "docs" / "params.md").read_text(encoding="utf-8"), "## The params files in this")
    listed = {re.match(r"`([^`]+)`", row[0]).group(1): row[1] for row in rows}
    assert sorted(listed) == sorted(p.name for p in (REPO / "params").glob("*.yaml"))
    for name, model in listed.items():
        named = re.match(r"`([^`]+)`", model)
        if named:  # train.yaml trains a model rather than running one: no model named
            assert named.group(1) == params_module.load(REPO / "params" / name)["model"]["name"], name


@pytest.mark.parametrize(("page", "heading"), [("README.md", "## Supported models"), ("docs/models.md", "# Models")])
def test_a_model_table_names_models_that_exist_and_params_files_that_exist(page, heading):
    text = (REPO / page).read_text(encoding="utf-8")
    rows = table_rows(text, heading)
    names = [name for row in rows for name in re.findall(r"`([^`]+)`", row[0])]
    known = set(models.RECIPES) | set(models.TRAINED) | {"t5-small"}  # t5-small: the hub's name of google-t5/t5-small
    assert names and [n for n in names if n not in known and "/" not in n] == []  # other hub names have their owner
    named = re.findall(r"`(params/[\w.-]+\.yaml)`", text)
    assert named and [path for path in named if not (REPO / path).is_file()] == []
