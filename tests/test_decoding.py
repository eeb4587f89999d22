"""The decoding loop's fast paths are exact: top-k with ties and -inf, screened beam candidates and candidates from
the search head's top log-probabilities equal to scoring every continuation (same indices, bit-identical float32
scores), and beam search with screening and the head on and off choosing the same tokens. The loop is transformers'
search: fed the PyTorch model's own logits it chooses generate's tokens (Marian, M2M100 and T5, greedy and beam 4,
every length_penalty / early_stopping regime, hypotheses ended by the length limit without eos included), and the
exported models through the Translator match generate on unseen sentences at short limits."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from mtonnx.check.parity import runtime_ids
from mtonnx.runtime import Translator, decoding, families
from mtonnx.runtime.decoding import NEG, GenerationSettings
from mtonnx.sources import models, reference


def reference_top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Full sort per row: value descending, then index ascending."""
    return np.array([np.lexsort((np.arange(values.shape[1]), -row))[:k] for row in values])


def reference_candidates(logits, running, cur_len, s, keep):
    """Score every continuation the plain way: log-softmax, processors, + running score, full sort."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = decoding.process(shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True)), cur_len, s)
    batch, beams = running.shape
    totals = (log_probs.reshape(batch, beams, -1) + running[:, :, None]).reshape(batch, -1)
    flat = reference_top_k(totals, keep)
    return flat, np.take_along_axis(totals, flat, axis=1)


@pytest.mark.parametrize("seed", range(40))
def test_top_k_is_exact_with_ties_and_inf(seed):
    rng = np.random.default_rng(seed)
    rows, n, k = int(rng.integers(1, 6)), int(rng.choice([3, 40, 700, 20000])), int(rng.integers(1, 9))
    k = min(k, n)
    values = (
        rng.integers(-3, 3, size=(rows, n)).astype(np.float32)
        if seed % 2
        else rng.standard_normal((rows, n)).astype(np.float32)
    )
    if seed % 3 == 0:  # the forced-eos step: everything -inf but one column
        values[0] = -np.inf
        values[0, n // 2] = 0.0
    np.testing.assert_array_equal(decoding._top_k(values, k), reference_top_k(values, k))


def random_step(seed: int, vocabs: list[int], last_len: int):
    """Settings, a position below `last_len`, logits (every third seed: rounded, many exact ties, and a banned token on
    top) and running scores (every fourth: the first step, only beam 0 live) for a random beam-search step."""
    rng = np.random.default_rng(seed)
    batch, beams, vocab = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.choice(vocabs))
    s = GenerationSettings(
        decoder_start_token_id=vocab - 1,
        eos_token_id=0,
        pad_token_id=vocab - 1,
        num_beams=beams,
        max_length=10,
        min_length=int(rng.integers(0, 6)),
        bad_token_ids=(vocab - 1,) if seed % 3 else (vocab - 1, int(rng.integers(1, vocab - 1))),
        forced_eos_token_id=0 if seed % 2 else None,
    )
    cur_len = int(rng.integers(1, last_len))
    logits = (rng.standard_normal((batch * beams, vocab)) * 2).astype(np.float32)
    if seed % 3 == 0:
        logits = np.round(logits)  # many exact ties
        logits[:, s.bad_token_ids[1]] += 10  # a banned token that would top its group and its row
    running = (rng.standard_normal((batch, beams)) * 3).astype(np.float32)
    if seed % 4 == 0:
        running[:, 1:] = NEG  # the first step: only beam 0 is live
    return s, cur_len, logits, running


@pytest.mark.parametrize("seed", range(24))
def test_screened_candidates_equal_scoring_every_continuation(seed):
    s, cur_len, logits, running = random_step(seed, [300, 5000, 65001], 10)
    beams = s.num_beams
    expected = reference_candidates(logits.copy(), running, cur_len, s, 2 * beams)
    got = decoding._candidates(logits.copy(), running, cur_len, s, np.empty_like(logits), 2 * beams)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])  # bit-identical scores, not just close


@pytest.mark.parametrize("seed", range(12))
def test_forced_eos_step_ranks_without_scoring_equal_to_scoring_every_continuation(seed):
    rng = np.random.default_rng(seed)
    batch, beams, vocab = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.choice([300, 65001]))
    eos = int(rng.choice([0, 3, vocab - 2]))
    s = GenerationSettings(
        decoder_start_token_id=vocab - 1,
        eos_token_id=eos,
        pad_token_id=vocab - 1,
        num_beams=beams,
        max_length=8,
        min_length=int(rng.integers(0, 9)),
        bad_token_ids=(vocab - 1,),
        forced_eos_token_id=eos,
    )
    logits = (rng.standard_normal((batch * beams, vocab)) * 2).astype(np.float32)
    running = (rng.standard_normal((batch, beams)) * 3).astype(np.float32)
    running[:, int(rng.integers(0, beams)) :] = NEG if seed % 2 else running[:, :1]  # start scores / exact ties
    expected = reference_candidates(logits.copy(), running, s.max_length - 1, s, 2 * beams)
    got = decoding._candidates(logits.copy(), running, s.max_length - 1, s, np.empty_like(logits), 2 * beams)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


class RandomRun:
    """A stand-in model: logits drawn from a generator seeded by the step, wide enough to screen."""

    def __init__(self, rows: int, vocab: int, seed: int):
        self.rows, self.vocab, self.rng = rows, vocab, np.random.default_rng(seed)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        return (self.rng.standard_normal((self.rows, self.vocab)) * 4).astype(np.float32)

    def reorder(self, rows: np.ndarray) -> None:
        self.rows = len(rows)  # retired sentences leave


def head_of(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """What the search head (passes.search_head) returns for these logits, computed in numpy."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    cols = reference_top_k(log_probs, k)
    return np.take_along_axis(log_probs, cols, axis=1), cols


@pytest.mark.parametrize("seed", range(24))
def test_head_candidates_equal_scoring_every_continuation(seed):
    s, cur_len, logits, running = random_step(seed, [30, 300, 5000], 9)  # not the forced-eos step: no head there
    keep = 2 * s.num_beams
    logits[:, 0] += 3 * (seed % 2)  # eos near the top: banned below min_length
    banned = decoding._banned(cur_len, s)
    expected = reference_candidates(logits.copy(), running, cur_len, s, keep)
    got = decoding._candidates_from_head(head_of(logits, keep + len(banned)), running, banned, logits.shape[1], keep)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])  # bit-identical given the same log-softmax


class HeadRandomRun(RandomRun):
    """RandomRun with a search head on the same logits."""

    has_head = True

    def step_top(self, tokens: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
        return head_of(self.step(tokens), k)


@pytest.mark.parametrize("early_stopping", [False, True])
@pytest.mark.parametrize("fast_path", ["screen_candidates", "search_head"])
def test_beam_search_with_and_without_each_fast_path_chooses_the_same_tokens(early_stopping, fast_path):
    s = GenerationSettings(
        decoder_start_token_id=9999,
        eos_token_id=0,
        pad_token_id=9999,
        num_beams=4,
        max_length=12,
        min_length=3,
        bad_token_ids=(9999,),
        forced_eos_token_id=0,
        early_stopping=early_stopping,
        search_head=fast_path == "search_head",
    )
    for seed in range(5):
        fast = decoding.beam_search(HeadRandomRun(12, 10000, seed), 3, s)
        plain = decoding.beam_search(HeadRandomRun(12, 10000, seed), 3, replace(s, **{fast_path: False}))
        assert fast == plain


@pytest.mark.parametrize("seed", range(12))
def test_forced_first_step_ranks_without_scoring_equal_to_scoring_every_continuation(seed):
    """The forced_bos step (M2M100's target language) takes the forced-step shortcut, with generate's ranking."""
    rng = np.random.default_rng(seed)
    batch, beams, vocab = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.choice([300, 65001]))
    forced = int(rng.integers(1, vocab))
    s = GenerationSettings(
        decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, num_beams=beams, forced_bos_token_id=forced
    )
    logits = (rng.standard_normal((batch * beams, vocab)) * 2).astype(np.float32)
    running = np.zeros((batch, beams), dtype=np.float32)
    running[:, 1:] = NEG  # the first step: only beam 0 live
    expected = reference_candidates(logits.copy(), running, 1, s, 2 * beams)
    got = decoding._candidates(logits.copy(), running, 1, s, np.empty_like(logits), 2 * beams)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert (got[0][:, 0] == forced).all()


@pytest.mark.parametrize("beams", [1, 4])
def test_the_forced_first_token_comes_first_and_forced_eos_wins_where_both_fall(beams):
    s = GenerationSettings(
        decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, num_beams=beams, forced_bos_token_id=77
    )
    rows = decoding.generate(RandomRun(3 * beams, 300, 0), 3, s.with_options(max_new_tokens=6))
    assert [row[0] for row in rows] == [77, 77, 77] and all(2 not in row[1:-1] for row in rows)
    last = replace(s.with_options(max_new_tokens=1), forced_eos_token_id=2)  # the first step is also the last
    assert decoding.generate(RandomRun(3 * beams, 300, 0), 3, last) == [[2], [2], [2]]


# Marian (eos forced at the length limit), M2M100 (the target-language token forced first), T5 (nothing forced)
FAMILIES = ("tiny", "tiny-m2m100", "tiny-t5")
UNSEEN = [  # sentences in no eval set or training set of the tiny models
    "The cat sleeps on the warm windowsill every afternoon.",
    "Please restart the server after installing the update.",
    "My grandmother grows tomatoes and beans in her garden.",
    "We could not open the file because the disk was full.",
    "He forgot his umbrella, so he got wet on the way home.",
    "Click the blue button to save your changes.",
    "A small boat drifted slowly across the quiet lake.",
    "Set the timeout to thirty seconds and try again.",
]


@functools.cache
def pytorch(directory: Path):
    """(model, tokenizer) of a built model, loaded once per test session."""
    return models.load_pretrained(directory)


class TorchRun:
    """A Run over the PyTorch model itself, its cache reordered as generate reorders it: the loop then sees generate's
    own logits, so a token that differs from generate's is the search's doing, not the export's float rounding."""

    def __init__(self, model, encoded, beams: int):
        self.model = model
        with torch.no_grad():
            hidden = model.get_encoder()(**encoded).last_hidden_state
        self.hidden = hidden.repeat_interleave(beams, 0)
        self.mask = encoded.attention_mask.repeat_interleave(beams, 0)
        self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())

    def step(self, tokens: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = self.model(
                encoder_outputs=(self.hidden,),
                attention_mask=self.mask,
                decoder_input_ids=torch.from_numpy(tokens)[:, None],
                past_key_values=self.cache,
            )
        return out.logits[:, -1].float().numpy().copy()

    def reorder(self, rows: np.ndarray) -> None:
        rows = torch.from_numpy(rows)
        self.cache.reorder_cache(rows)
        self.hidden, self.mask = self.hidden[rows], self.mask[rows]


def generated(model, encoded, **options) -> list[list[int]]:
    """generate's token ids for a padded batch: without the start token, up to and including eos."""
    with torch.no_grad():
        rows = model.generate(**encoded, **options).tolist()
    return [decoding._until_eos(row[1:], model.generation_config.eos_token_id) for row in rows]


@pytest.mark.parametrize("name", FAMILIES)
def test_fed_generate_s_own_logits_the_search_chooses_generate_s_tokens(name, family_model):
    """The loop is transformers' beam search, finalization at the length limit and the early-stop heuristic
    included, for every length_penalty / early_stopping regime: on word salads (unseen by construction) that often
    run to the limit without eos (T5 has no forced eos), its tokens are generate's."""
    directory = family_model(name)
    model, tokenizer = pytorch(directory)
    prefix, settings = families.of_dir(directory).source_prefix, GenerationSettings.from_dir(directory)
    words = sorted(w.strip("▁") for w in tokenizer.get_vocab() if w.strip("▁").isalpha())
    rng = np.random.default_rng(0)
    eos, at_limit = model.generation_config.eos_token_id, 0
    for length_penalty, early_stopping in [(1.0, False), (1.0, True), (2.0, "never"), (-1.0, False), (0.0, True)]:
        sentences = [" ".join(rng.choice(words, int(rng.integers(2, 14)))) for _ in range(8)]
        encoded = reference.batch(tokenizer, sentences, prefix)
        options = {"length_penalty": length_penalty, "early_stopping": early_stopping}
        for beams, max_new_tokens in [(4, 4), (4, 9), (1, 6)]:
            expected = generated(model, encoded, num_beams=beams, max_new_tokens=max_new_tokens, **options)
            search = settings.with_options(num_beams=beams, max_new_tokens=max_new_tokens, **options)
            assert decoding.generate(TorchRun(model, encoded, beams), len(sentences), search) == expected, options
            at_limit += sum(len(row) == max_new_tokens and row[-1] != eos for row in expected)
    assert at_limit >= 24 or settings.forced_eos_token_id is not None  # unforced, the limit ends many without eos


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("beams", [1, 4], ids=["greedy", "beam4"])
def test_the_runtime_is_token_identical_with_generate_on_unseen_sentences_at_the_length_limit(
    name, beams, family_model, family_export
):
    """The exported model through the Translator (ONNX Runtime, its fast paths on), on sentences of no eval set, with
    limits short enough that the length limit, not eos, ends some of them."""
    directory = family_model(name)
    model, tokenizer = pytorch(directory)
    translator = Translator(family_export(name))
    prefix = families.of_dir(directory).source_prefix
    for max_new_tokens in (4, 8):
        expected = generated(
            model, reference.batch(tokenizer, UNSEEN, prefix), num_beams=beams, max_new_tokens=max_new_tokens
        )
        got = runtime_ids(
            translator,
            tokenizer,
            UNSEEN,
            num_beams=beams,
            batch_size=8,
            max_new_tokens=max_new_tokens,
            source_prefix=prefix,
        )
        assert got == expected
        assert any(len(row) == max_new_tokens for row in expected)  # the limit ends some
