"""Each pitfall's reproduction really fails in the documented way, and the fix really fixes it."""

from __future__ import annotations

import torch

from mtonnx import data
from mtonnx.check import pitfalls
from mtonnx.export.manual import export_model, load_for_export
from mtonnx.runtime import Translator, layout

SENTENCES = [p.en for p in data.eval_set({"hsk_size": 8, "techdocs_size": 4, "eval_split": "test"})]


def test_wrong_start_token_changes_the_output(hand_export):
    translator = Translator(hand_export)
    result = pitfalls.compare_settings(translator, SENTENCES, decoder_start_token_id=translator.settings.eos_token_id)
    assert result["changed"] > 0.5
    assert result["right"] == translator.translate(SENTENCES, num_beams=1, max_new_tokens=24)


def test_unbanned_pad_is_emitted(tiny_dir, tmp_path):
    model = load_for_export(tiny_dir)
    with torch.no_grad():
        model.final_logits_bias[0, model.config.pad_token_id] += 12.0  # a model that likes pad, as trained ones may
    export_model(
        model, tmp_path / "pad-loving", exporter="torchscript", source_dir=tiny_dir, files=list(layout.VARIANT_FILES)
    )
    result = pitfalls.compare_settings(Translator(tmp_path / "pad-loving"), SENTENCES, bad_token_ids=())
    assert result["pad_chosen_wrong"] > 0 and result["pad_chosen_right"] == 0


def test_int32_ids_are_rejected_and_int64_works(hand_export):
    result = pitfalls.int32_ids(Translator(hand_export), SENTENCES[0])
    assert "expected: (tensor(int64))" in result["error"] and result["fixed_output_shape"][0] == 1


def test_training_mode_export_is_refused_or_hidden(tiny_dir, tmp_path):
    result = pitfalls.training_mode_export(tiny_dir, tmp_path)
    assert result["dynamo"]["error"]  # torch.export will not export the dropout-active module
    assert result["torchscript"]["error"] is None and result["torchscript"]["two_runs_identical"]  # switched to eval


def test_whole_prefix_fails_on_the_hand_export_and_is_silently_accepted_by_optimum(hand_export, optimum_dir):
    hand = pitfalls.whole_prefix_to_decoder_with_past(Translator(hand_export), SENTENCES[0])
    assert "invalid dimensions for input: input_ids" in hand["error"]
    optimum = pitfalls.whole_prefix_to_decoder_with_past(Translator(optimum_dir, decoder="split"), SENTENCES[0])
    assert optimum["error"] is None and optimum["logits_shape"][1] == 4


def test_dropping_the_mask_changes_padded_rows_only(hand_export):
    result = pitfalls.ignored_padding_mask(Translator(hand_export), SENTENCES)
    assert result["changed_padded_rows"] > 0 and result["changed_unpadded_rows"] == 0


def test_special_tokens_show_unless_skipped(tiny):
    _, tokenizer = tiny
    result = pitfalls.special_tokens_in_output(tokenizer, [5, 6, tokenizer.eos_token_id, tokenizer.pad_token_id])
    assert "</s>" in result["skip_special_tokens=False"] and "<pad>" in result["skip_special_tokens=False"]
    assert "</s>" not in result["skip_special_tokens=True"]


def test_fixed_length_padding_gives_the_same_tokens(hand_export):
    result = pitfalls.padding_strategies(Translator(hand_export), SENTENCES, length=64)
    assert result["identical_outputs"] and list(result["source_width"].values())[1] == 64
    longer = [*SENTENCES, " ".join(["The quick brown fox jumps over the lazy dog."] * 6)]  # past 16 tokens
    result = pitfalls.padding_strategies(Translator(hand_export), longer, length=16)
    widths = list(result["source_width"].values())
    assert result["identical_outputs"] and widths[0] == widths[1] > 16  # padded to the longest, never cut


def test_fp16_turns_the_mask_constant_into_nan(hand_export):
    result = pitfalls.fp16_mask_overflow(hand_export)
    assert result["most_negative_fp32_constant"] < -1e38 and result["in_float16"] == float("-inf")
    assert all(v != v for v in result["softmax_of_a_fully_masked_row_fp16"])  # NaN


def test_target_language_token_is_one_id_in_front(hand_export):
    translator = Translator(hand_export)
    result = pitfalls.source_prefix_effect(translator, SENTENCES[0], ">>cmn_Hans<<")
    assert result["prefix_ids"] == [translator.tokenizer.encoder[">>cmn_Hans<<"]]
    assert result["ids_with"] == [*result["prefix_ids"], *result["ids_without"]]
