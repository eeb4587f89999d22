"""The training recipe: a smoke run of the real code path, and the committed default model checked against
the recipe in the code (so the two cannot silently drift) and against the dictionary baseline."""

from __future__ import annotations

import copy
import json
import re

import pytest

from conftest import REPO
from mtonnx import data
from mtonnx.sources import models, train

COMMITTED = REPO / "models" / "hsk-enzh"
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_recipe_trains_a_few_steps_end_to_end(tmp_path):
    recipe = copy.deepcopy(train.RECIPE)
    recipe["eval"].update(dev_sentences=4, max_new_tokens=6)
    report = train.train(
        tmp_path / "model", recipe, budget_minutes=5, max_steps=3, max_pairs=48, test_sentences=4, progress=False
    )
    assert report["steps"] == 3 and report["history"][-1]["step"] == 3
    assert report["recipe_hash"] == train.recipe_hash(recipe) != train.recipe_hash(train.RECIPE)
    assert {name: d["sentences"] for name, d in report["domains"].items()} == {"hsk": 4, "techdocs": 4}
    directory = tmp_path / "model"
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "vocab.json",
        "README.md",
        "training_report.json",
    ):
        assert (directory / name).is_file(), name
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # the temp dir was moved, nothing left behind
    model, tokenizer = models.load_pretrained(directory)
    assert model.config.pad_token_id == model.config.decoder_start_token_id == tokenizer.pad_token_id
    assert model.generation_config.bad_words_ids == [[tokenizer.pad_token_id]]


def test_lexicon_uses_train_sentences_only_and_feeds_the_baseline():
    pairs = train.lexicon(3)
    assert len(pairs) > 1000
    table = dict(pairs)
    assert train.gloss_baseline(["The teacher"], 3) == [table.get("the", "") + table["teacher"]]
    train_pairs = train.training_pairs(train.RECIPE)
    held_out = {p.en for split in ("dev", "test") for p in data.hsk_split(split)} - {
        p.en for p in data.hsk_split("train")
    }
    assert not held_out & {en for en, _ in train_pairs}


def test_committed_model_matches_the_recipe_and_beats_the_baseline():
    report = json.loads((COMMITTED / "training_report.json").read_text(encoding="utf-8"))
    assert report["recipe_hash"] == train.recipe_hash(train.RECIPE), "re-train with `make model`"
    assert report["test_bleu_beam"] > report["baseline_bleu"] + 2
    assert sum(p.stat().st_size for p in COMMITTED.iterdir()) < 20 * 2**20
    assert "CC-BY-SA-4.0" in (COMMITTED / "README.md").read_text(encoding="utf-8")
    model, tokenizer = models.load_pretrained(COMMITTED)
    assert str(next(model.parameters()).dtype) == "torch.float32"
    batch = tokenizer(["Hello, teacher!", "I like to drink tea."], return_tensors="pt", padding=True)
    out = tokenizer.batch_decode(model.generate(**batch, max_new_tokens=20), skip_special_tokens=True)
    assert all(CJK.search(text) for text in out), out


def test_default_params_use_the_trained_model():
    from mtonnx.params import load

    params = load(REPO / "params" / "default.yaml")
    assert params["model"]["name"] == "hsk-enzh"
    assert models.resolve(params["model"], REPO / "outputs" / "models", params["_root"])["source"] == "trained"
    assert params["_root"] == str(REPO)


@pytest.mark.parametrize("name", ["hsk-enzh"])
def test_missing_trained_model_names_the_fix(name, tmp_path):
    with pytest.raises(models.ModelSourceError, match="run `make model`"):
        models.resolve({"name": name, "path": None, "seed": 0}, tmp_path, project_root=tmp_path)
    with pytest.raises(models.ModelSourceError, match="give the project root"):
        models.resolve({"name": name, "path": None, "seed": 0}, tmp_path)
