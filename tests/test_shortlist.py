"""The lexical shortlist (variants.shortlist, passes.output_rows.columns_as_inputs, runtime.shortlist): what is
learned from sentence pairs, the kept logits are bit-identical columns of the full ones, a list holding every id
decodes the full model's tokens at any beam count, greedy keeps every sentence whose tokens are all listed, and
a broken shortlist fails at load with one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import tuned_variants
from mtonnx import data
from mtonnx.measure import step_bytes
from mtonnx.measure.restriction import same_tokens
from mtonnx.runtime import Translator, layout
from mtonnx.runtime.tokenizer import MarianSpmTokenizer
from mtonnx.runtime.translator import ModelDirError
from mtonnx.sources import train
from mtonnx.variants.shortlist import build_shortlisted, learn_shortlist, vmap_text

VOCAB = 2998  # the tiny model's vocab.json
SOURCES = [p.en for p in data.eval_set({"hsk_size": 24, "techdocs_size": 8, "eval_split": "test"})]


@pytest.fixture(scope="module")
def full(dynamo_export, tmp_path_factory):
    return tuned_variants(dynamo_export, tmp_path_factory.mktemp("shortlist"))["int8-tuned"]


@pytest.fixture(scope="module")
def learned(full):
    return learn_shortlist(train.training_pairs(train.RECIPE), MarianSpmTokenizer(full), frequent=200, per_source=20)


@pytest.fixture(scope="module")
def listed(full, learned, tmp_path_factory):
    out = tmp_path_factory.mktemp("shortlisted") / "cut"
    build_shortlisted(full, out, learned)
    return out


def test_dice_ranks_a_source_pieces_own_translation_above_a_common_piece(tiny_dir):
    tokenizer = MarianSpmTokenizer(tiny_dir)
    ids = lambda text: [tokenizer.encoder[p] for p in tokenizer.target.encode(text, out_type=str)]  # noqa: E731
    pairs = [("apples", "苹果的")] * 3 + [("apples", "的")] + [("bananas", "香蕉的")] * 7
    apple = tokenizer.encoder["▁appl"]
    fruit, common = ids("苹果")[1:], ids("的")  # "▁" + the characters; "▁" + 的: in all 11 sentences
    shortlist = learn_shortlist(pairs, tokenizer, frequent=0, per_source=2)
    # 的 co-occurs with "apples" 4 times and 苹 3 times: by count 的 would come first, by Dice (0.53 < 0.86) not
    assert shortlist["by_source"][str(apple)] == sorted(fruit)
    assert shortlist["always"] == sorted(tokenizer.special_ids)
    again = learn_shortlist(pairs, tokenizer, frequent=2, per_source=2)
    assert again["always"] == sorted(tokenizer.special_ids | set(common))  # the two pieces of every sentence
    assert not set(common) & {t for targets in again["by_source"].values() for t in targets}
    assert again == learn_shortlist(pairs, tokenizer, frequent=2, per_source=2)  # ties go to the lower id
    with pytest.raises(ValueError, match="no sentence pairs"):
        learn_shortlist([], tokenizer, 1, 1)
    with pytest.raises(ValueError, match=">= 0"):
        learn_shortlist(pairs, tokenizer, -1, 1)


def test_kept_logits_are_bit_identical_columns_of_the_full_ones(full, listed):
    whole, cut = Translator(full), Translator(listed)
    ids, mask = whole.tokenizer.batch(SOURCES[:5])
    rows = cut.shortlist.rows(ids, mask)
    assert len(cut.shortlist.always) < len(rows) < whole.tokenizer.vocab_size
    runs = whole.decoder.begin(ids, mask), cut.decoder.begin(ids, mask)
    runs[1].feed_columns(cut.shortlist.feeds(rows))
    assert runs[1].vocab == len(rows)
    tokens = np.full(len(SOURCES[:5]), whole.settings.decoder_start_token_id)
    for _ in range(4):
        a, b = (run.step(tokens) for run in runs)
        assert b.shape == (len(tokens), len(rows))
        np.testing.assert_array_equal(b, a[:, rows.ids])
        tokens = rows.ids[b.argmax(-1)]


def test_a_shortlist_of_every_id_decodes_the_full_models_tokens(full, tmp_path):
    whole = Translator(full)
    everything = {"always": list(range(whole.tokenizer.vocab_size)), "by_source": {}}
    build_shortlisted(full, tmp_path / "all", everything)
    cut = Translator(tmp_path / "all")
    ids, mask = whole.tokenizer.batch(SOURCES[:8])
    for beams in (1, 3):
        expected = whole.generate(ids, mask, num_beams=beams, max_new_tokens=12)
        assert cut.generate(ids, mask, num_beams=beams, max_new_tokens=12) == expected


def test_greedy_ids_are_identical_wherever_only_listed_ids_were_chosen(full, listed):
    check = same_tokens(Translator(full), Translator(listed), SOURCES, beams=1, max_new_tokens=16)
    assert check["differ_otherwise"] == 0 and check["identical"] > 0, check
    assert sum(check[k] for k in ("identical", "differ_removed_row_chosen", "differ_otherwise")) == len(SOURCES)


def test_the_variant_reads_a_batchs_columns_of_the_lm_head(full, listed, learned):
    assert MarianSpmTokenizer(full).vocab_size == VOCAB
    shortlist = json.loads((listed / layout.SHORTLIST).read_text())
    assert shortlist == {k: learned[k] for k in ("always", "by_source")}
    config = json.loads((listed / "config.json").read_text())
    assert step_bytes.column_bytes(listed) == config["d_model"] + 4  # an int8 weight column and an fp32 bias entry
    assert step_bytes.step_bytes(listed) < step_bytes.step_bytes(full)  # the lm_head left the step file
    assert listed.name not in step_bytes.per_variant(listed.parent)
    tokenizer = MarianSpmTokenizer(listed)
    lines = vmap_text(learned, tokenizer).splitlines()
    assert lines[0] == "\t" + " ".join(tokenizer.decoder[i] for i in learned["always"])
    assert len(lines) == 1 + len(learned["by_source"])
    assert all(p in tokenizer.encoder for line in lines for p in line.replace("\t", " ").split())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: (d / layout.SHORTLIST).write_text('{"always": [1, 99999], "by_source": {}}'), "outside the"),
        (lambda d: (d / layout.HEAD_COLUMNS).unlink(), "not a usable shortlist"),
        (lambda d: (d / layout.SHORTLIST).write_text('{"always": [5], "by_source": {}}'), "leaves out"),
        (lambda d: (d / layout.OUTPUT_ROWS).write_text(json.dumps(list(range(VOCAB)))), "also has output_rows.json"),
    ],
)
def test_a_broken_shortlist_fails_at_load_with_one_line(listed, tmp_path, change, message):
    broken = tmp_path / "broken"
    shutil.copytree(listed, broken)
    (broken / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    change(broken)
    with pytest.raises(ModelDirError, match=message) as err:
        Translator(broken)
    assert "\n" not in str(err.value) and "rebuild" in str(err.value)
