"""The restricted output vocabulary (passes.output_rows, variants.restricted, runtime.output_rows): the kept logits
are bit-identical columns of the full ones, greedy ids are identical wherever the full model chose only kept rows,
bytes per token count the kept rows, and a broken restriction fails at load with one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import tuned_variants
from mtonnx import data
from mtonnx.check.parity import CASES, file_parity
from mtonnx.measure import benchmark, restriction, step_bytes
from mtonnx.measure.restriction import same_tokens
from mtonnx.passes.output_rows import restrict, target_rows
from mtonnx.runtime import Translator, layout
from mtonnx.runtime.translator import ModelDirError
from mtonnx.variants.restricted import build_restricted

SOURCES = [p.en for p in data.eval_set({"hsk_size": 24, "techdocs_size": 8, "eval_split": "test"})]


@pytest.fixture(scope="module")
def variants(dynamo_export, tmp_path_factory):
    work = tmp_path_factory.mktemp("restricted")
    full = tuned_variants(dynamo_export, work)["int8-tuned"]
    build_restricted(full, work / "cut")
    return full, work / "cut"


def test_target_rows_are_the_target_pieces_and_the_special_tokens(tiny_dir):
    rows = target_rows(tiny_dir)
    vocab = json.loads((tiny_dir / "vocab.json").read_text())
    assert rows == sorted(rows) and len(set(rows)) == len(rows) and 0 < len(rows) < len(vocab)
    assert {vocab["</s>"], vocab["<unk>"], vocab["<pad>"]} <= set(rows)


def test_kept_logits_are_bit_identical_columns_of_the_full_ones(variants):
    full, cut = (Translator(d) for d in variants)
    rows = cut.output_rows.ids
    assert len(rows) < full.tokenizer.vocab_size
    ids, mask = full.tokenizer.batch(SOURCES[:5])
    runs = full.decoder.begin(ids, mask), cut.decoder.begin(ids, mask)
    tokens = np.full(len(SOURCES[:5]), full.settings.decoder_start_token_id)
    for _ in range(4):
        whole, kept = (run.step(tokens) for run in runs)
        assert kept.shape == (len(tokens), len(rows))
        np.testing.assert_array_equal(kept, whole[:, rows])
        tokens = rows[kept.argmax(-1)]  # a kept row, fed to both as its vocabulary id


def test_greedy_ids_are_identical_wherever_only_kept_rows_were_chosen(variants):
    full, cut = (Translator(d) for d in variants)
    check = same_tokens(full, cut, SOURCES, beams=1)
    assert check["differ_otherwise"] == 0 and check["identical"] > 0, check
    assert sum(check[k] for k in ("identical", "differ_removed_row_chosen", "differ_otherwise")) == len(SOURCES)
    kept = set(cut.output_rows.ids.tolist())
    ids, mask = cut.tokenizer.batch(SOURCES)
    assert all(set(row) <= kept for row in cut.generate(ids, mask, num_beams=4))  # beams too: vocabulary ids


def test_bytes_per_token_count_the_kept_rows(variants, tiny_dir):
    full, cut = variants
    config = json.loads((tiny_dir / "config.json").read_text())
    before, after = benchmark.bytes_per_token(full), benchmark.bytes_per_token(cut)
    kept = len(json.loads((cut / layout.OUTPUT_ROWS).read_text()))
    assert before["decoder_weights"] == after["decoder_weights"]
    assert after["lm_head_weights"] == kept * config["d_model"]
    # measured from the step files: each removed row took its int8 weights (a byte per d_model) and its fp32 bias
    removed = config["vocab_size"] - kept
    assert step_bytes.step_bytes(full) - step_bytes.step_bytes(cut) == removed * (config["d_model"] + 4)


@pytest.mark.parametrize(
    "rows, message",
    [
        (lambda rows: rows[:5] + rows[6:], "lists"),  # fewer rows than the logits have
        (lambda rows: rows[1:], "leaves out"),  # eos (id 0) dropped
        (lambda rows: rows[::-1], "ascending"),
    ],
)
def test_a_broken_restriction_fails_at_load_with_one_line(variants, tmp_path, rows, message):
    broken = tmp_path / "broken"
    shutil.copytree(variants[1], broken)
    (broken / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    kept = json.loads((broken / layout.OUTPUT_ROWS).read_text())
    (broken / layout.OUTPUT_ROWS).write_text(json.dumps(rows(kept)))
    with pytest.raises(ModelDirError, match=message) as err:
        Translator(broken)
    assert "\n" not in str(err.value) and layout.OUTPUT_ROWS in str(err.value)


def test_a_restricted_variant_without_its_output_rows_is_named_not_blamed_on_the_tokenizer(variants, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(variants[1], broken)
    (broken / layout.OUTPUT_ROWS).unlink()
    with pytest.raises(ModelDirError, match="SHA256SUMS but missing"):  # the list names it first
        Translator(broken)
    with pytest.raises(ModelDirError) as err:
        Translator(broken, verify=False)
    assert "a restricted variant" in str(err.value) and f"{layout.OUTPUT_ROWS}, the vocabulary row" in str(err.value)
    assert "is missing: copy it back from the variant" in str(err.value)
    assert "different models" not in str(err.value)


def test_a_tied_lm_head_is_refused(dynamo_export):
    model = onnx.load(str(dynamo_export / layout.DECODER_WITH_PAST))
    with pytest.raises(ValueError, match="untie"):
        restrict(model, [0, 1, 2])


def test_restriction_sizes_keep_the_target_rows_and_as_many_more_as_asked(variants, dynamo_export):
    full, _ = variants
    target, vocab = target_rows(full), Translator(full).tokenizer.vocab_size
    small, large = len(target) + 5, vocab - 3
    tokens = Translator(full).tokenizer.encode("Hello.")
    where = Path(full).parent  # the registry's variants directory: the probes are built beside int8-tuned
    swept = restriction.sizes(dynamo_export, [1, small, large, vocab + 10], where, [tokens], 3, [(1, 1), (2, 4)], 0, 1)
    assert [r["rows"] for r in swept] == [large, small]  # only sizes between the target rows and the vocabulary
    for r in swept:
        kept = json.loads((where / f"int8-tuned-rows-{r['rows']}" / layout.OUTPUT_ROWS).read_text())
        assert len(kept) == r["rows"] and set(target) <= set(kept)
        assert [(s["batch"], s["beams"]) for s in r["speed"]] == [(1, 1), (2, 4)]
    assert swept[0]["step_mb"] > swept[1]["step_mb"]


def test_parity_with_pytorch_reads_a_restricted_variant_on_its_kept_rows(variants, tiny):
    """doctor's parity check on a deployed target-vocab variant: PyTorch's logits at the kept columns."""
    full, cut = (file_parity(tiny[0], d, cases=CASES[:2], files=[layout.DECODER]) for d in variants)
    kept, whole = (r["files"][layout.DECODER]["max_abs_diff"] for r in (cut, full))
    assert np.isfinite(kept) and kept <= whole  # its logits are bit-identical columns of the full variant's
