"""The name contract (runtime.layout): every export and variant the project writes has exactly the files and
cache tensors the contract names, and the translator loads every layout through it."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from conftest import tuned_variants
from mtonnx import data
from mtonnx.runtime import Translator, families, layout, layouts

SOURCES = [p.en for p in data.eval_set({"hsk_size": 4, "techdocs_size": 2, "eval_split": "test"})]


@pytest.fixture(scope="module")
def directories(dynamo_export, optimum_dir, tmp_path_factory):
    tuned = tuned_variants(dynamo_export, tmp_path_factory.mktemp("layout"))["int8-tuned"]
    return {"hand": dynamo_export, "optimum": optimum_dir, "tuned": tuned}


def test_exports_hold_the_files_the_contract_names(directories):
    assert {p.name for p in directories["hand"].glob("*.onnx")} == set(layout.HAND_EXPORT)
    assert {p.name for p in directories["optimum"].glob("*.onnx")} == set(layout.OPTIMUM_EXPORT)
    tuned = {p.name for p in Path(directories["tuned"]).glob("*.onnx")}
    assert tuned == set(layout.VARIANT_FILES) | {
        layout.CROSS_KV,
        layout.TUNED_STEP,
        layout.INPLACE_STEP,
        layout.SEARCH_HEAD,
    }
    marian = ("config.json", "generation_config.json", *families.MARIAN.tokenizers[0].files, "tokenizer_config.json")
    assert set(marian) <= set(layout.MODEL_FILES)
    for name in (layout.EXPORT_MANIFEST, *marian):
        assert (directories["hand"] / name).is_file(), name


def test_cache_tensor_names_and_order_are_the_contract(directories, tiny):
    layers = tiny[0].config.decoder_layers
    step = onnx.load(str(directories["hand"] / layout.DECODER_WITH_PAST), load_external_data=False).graph
    assert [i.name for i in step.input][2:] == layout.past_names(layers)
    assert [o.name for o in step.output][1:] == layout.present_names(layers, layout.SELF)
    first = onnx.load(str(directories["hand"] / layout.DECODER), load_external_data=False).graph
    assert [o.name for o in first.output][1:] == layout.present_names(layers)
    assert layout.layers_of([i.name for i in step.input]) == layers
    assert layout.by_kind(layout.present_names(layers))[layout.CROSS_VALUE] == [
        f"present.{i}.encoder.value" for i in range(layers)
    ]


@pytest.mark.parametrize("name", list(layouts.BY_NAME))
def test_every_layout_loads_through_the_contract_and_translates_alike(directories, name):
    where = {
        "inplace": "tuned",
        "tuned": "tuned",
        "lean": "tuned",
        "split": "hand",
        "merged": "optimum",
        "no-cache": "hand",
    }[name]
    translator = Translator(directories[where], decoder=name)
    head = {layout.SEARCH_HEAD} if where == "tuned" else set()  # the tuned variant's beam-search head, loaded too
    assert translator.layout == name and set(translator.sessions) == set(layouts.BY_NAME[name].files) | head
    reference = Translator(directories["hand"], decoder="split").translate(SOURCES, num_beams=2, max_new_tokens=10)
    if where != "tuned":  # the tuned variant is int8: its own layouts must agree with each other instead
        assert translator.translate(SOURCES, num_beams=2, max_new_tokens=10) == reference
    else:
        other = Translator(directories["tuned"], decoder="split").translate(SOURCES, num_beams=2, max_new_tokens=10)
        assert translator.translate(SOURCES, num_beams=2, max_new_tokens=10) == other


def test_auto_picks_the_first_layout_present(directories):
    assert Translator(directories["tuned"]).layout == layouts.AUTO_ORDER[0] == "inplace"
    assert Translator(directories["hand"]).layout == "split"


def test_the_command_lines_offer_the_public_layouts_only():
    """The layouts on the way to the in-place step and the no-cache baseline are kept for the lessons, not offered."""
    from mtonnx.cli import build_parser

    assert layouts.PUBLIC == ("inplace", "split", "merged")
    decoder = next(
        a for a in build_parser()._subparsers._group_actions[0].choices["translate"]._actions if a.dest == "decoder"
    )
    assert tuple(decoder.choices) == ("auto", *layouts.PUBLIC)
    assert all(
        set(entry.files)
        <= {*layout.HAND_EXPORT, *layout.OPTIMUM_EXPORT, layout.CROSS_KV, layout.TUNED_STEP, layout.INPLACE_STEP}
        for entry in layouts.REGISTRY
    )
