"""Greedy and beam search in numpy, with Hugging Face `generate`'s semantics, over any step function.

Ours because it is the lesson. The rules are transformers 4.57's, so outputs are token-identical:
- logits processors: bad_words_ids (single tokens) -> -inf, eos -> -inf below min_length, and at the last
  allowed position every token but eos -> -inf (forced_eos_token_id);
- greedy: argmax of the processed logits; finished rows continue with pad until all rows are done;
- beam search (transformers' vectorized version): log-softmax, processors, add running scores, keep the
  top 2*beams continuations, the top `beams` of those not hitting eos/max length keep running, those
  that finish join the finished set scored with sum(logprob) / length**length_penalty, and the loop ends
  when no running beam can beat the worst finished one (early_stopping False) or all are finished (True).
Everything is vectorized over batch x beams x vocabulary: no Python loop over beams or tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

NEG = np.float32(-1.0e9)  # transformers' "impossible" score, in float32 as there


@dataclass(frozen=True)
class GenerationSettings:
    """The generation_config fields decoding uses; `max_length` counts the decoder start token."""

    decoder_start_token_id: int
    eos_token_id: int
    pad_token_id: int
    num_beams: int = 1
    max_length: int = 512
    min_length: int = 0
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    bad_token_ids: tuple[int, ...] = ()
    forced_eos_token_id: int | None = None

    @classmethod
    def from_dir(cls, directory: str | Path) -> "GenerationSettings":
        """Defaults from generation_config.json (else config.json), as `generate` reads them."""
        directory = Path(directory)
        path = directory / "generation_config.json"
        config = json.loads((path if path.is_file() else directory / "config.json").read_text(encoding="utf-8"))
        bad = config.get("bad_words_ids") or []
        if any(len(words) != 1 for words in bad):
            raise ValueError("only single-token bad_words_ids are supported")
        eos = config["eos_token_id"]
        return cls(
            decoder_start_token_id=config["decoder_start_token_id"],
            eos_token_id=eos[0] if isinstance(eos, list) else eos,
            pad_token_id=config["pad_token_id"],
            num_beams=config.get("num_beams", 1),
            max_length=config.get("max_length", 20),
            min_length=config.get("min_length", 0),
            length_penalty=config.get("length_penalty", 1.0),
            early_stopping=config.get("early_stopping", False),
            bad_token_ids=tuple(words[0] for words in bad),
            forced_eos_token_id=config.get("forced_eos_token_id"),
        )

    def with_options(self, num_beams: int | None = None, max_new_tokens: int | None = None,
                     **fields) -> "GenerationSettings":
        """Overrides as `generate` takes them: max_new_tokens sets max_length = 1 + max_new_tokens."""
        if num_beams is not None:
            fields["num_beams"] = num_beams
        if max_new_tokens is not None:
            fields["max_length"] = 1 + max_new_tokens
        return replace(self, **fields)


class Run(Protocol):
    """One batch being decoded: `step` feeds one token per row and returns that step's logits."""

    def step(self, tokens: np.ndarray) -> np.ndarray: ...

    def reorder(self, rows: np.ndarray) -> None: ...


def process(scores: np.ndarray, cur_len: int, s: GenerationSettings) -> np.ndarray:
    """The logits processors generate() applies for Marian, in place; cur_len counts the start token."""
    if s.bad_token_ids:
        scores[:, list(s.bad_token_ids)] = -np.inf
    if cur_len < s.min_length:
        scores[:, s.eos_token_id] = -np.inf
    if s.forced_eos_token_id is not None and cur_len == s.max_length - 1:
        scores[:] = -np.inf
        scores[:, s.forced_eos_token_id] = 0.0
    return scores


def greedy(run: Run, batch: int, s: GenerationSettings) -> list[list[int]]:
    """Greedy decoding of `batch` rows; returns each row's generated ids up to and including eos."""
    tokens = np.full(batch, s.decoder_start_token_id, dtype=np.int64)
    unfinished = np.ones(batch, dtype=bool)
    generated = []
    cur_len = 1
    while True:
        scores = process(run.step(tokens), cur_len, s)
        tokens = np.where(unfinished, scores.argmax(-1), s.pad_token_id).astype(np.int64)
        generated.append(tokens)
        cur_len += 1
        unfinished &= tokens != s.eos_token_id
        if not unfinished.any() or cur_len >= s.max_length:
            break
    return [_until_eos(row, s.eos_token_id) for row in np.stack(generated, axis=1).tolist()]


def beam_search(run: Run, batch: int, s: GenerationSettings) -> list[list[int]]:
    """Beam search over `batch` sentences x `s.num_beams` rows (the run holds batch*beams rows)."""
    k, keep, prompt = s.num_beams, 2 * s.num_beams, 1
    running = np.full((batch, k, s.max_length), s.pad_token_id, dtype=np.int64)
    running[:, :, 0] = s.decoder_start_token_id
    finished_seq = running.copy()
    running_scores = np.zeros((batch, k), dtype=np.float32)
    running_scores[:, 1:] = NEG
    finished_scores = np.full((batch, k), NEG, dtype=np.float32)
    is_finished = np.zeros((batch, k), dtype=bool)
    can_improve = np.ones((batch, 1), dtype=bool)
    top_k_mask = np.arange(keep) < k
    row_offset = np.arange(batch)[:, None] * k
    tokens = running[:, :, 0].reshape(-1)
    cur_len = 1
    while True:
        log_probs = process(_log_softmax(run.step(tokens)), cur_len, s)
        vocab = log_probs.shape[-1]
        totals = (log_probs.reshape(batch, k, vocab) + running_scores[:, :, None]).reshape(batch, k * vocab)
        flat = _top_k(totals, keep)
        cand_scores = np.take_along_axis(totals, flat, axis=1)
        cand_beam, cand_token = flat // vocab, flat % vocab
        cand_seq = np.take_along_axis(running, cand_beam[:, :, None], axis=1)
        cand_seq[:, :, cur_len] = cand_token
        hits = (cand_token == s.eos_token_id) | (cur_len + 1 >= s.max_length)

        live_scores = cand_scores + hits.astype(np.float32) * NEG
        pick = _top_k(live_scores, k)
        running = np.take_along_axis(cand_seq, pick[:, :, None], axis=1)
        running_scores = np.take_along_axis(live_scores, pick, axis=1)
        source_beam = np.take_along_axis(cand_beam, pick, axis=1)

        just_finished = hits & top_k_mask[None, :]
        normalized = cand_scores / np.float32((cur_len + 1 - prompt) ** s.length_penalty)
        all_done = is_finished.all(axis=1, keepdims=True) & (s.early_stopping is True)
        normalized = normalized + all_done.astype(np.float32) * NEG
        normalized = normalized + (~can_improve).astype(np.float32) * NEG
        normalized = normalized + (~just_finished).astype(np.float32) * NEG
        merged_scores = np.concatenate([finished_scores, normalized], axis=1)
        best = _top_k(merged_scores, k)
        finished_seq = np.take_along_axis(np.concatenate([finished_seq, cand_seq], axis=1), best[:, :, None], axis=1)
        finished_scores = np.take_along_axis(merged_scores, best, axis=1)
        is_finished = np.take_along_axis(np.concatenate([is_finished, just_finished], axis=1), best, axis=1)

        run.reorder((source_beam + row_offset).reshape(-1))
        tokens = running[:, :, cur_len].reshape(-1)
        cur_len += 1
        length = (s.max_length - prompt) if s.early_stopping == "never" and s.length_penalty > 0 else cur_len - prompt
        best_running = running_scores[:, :1] / np.float32(length**s.length_penalty)
        worst_finished = np.where(is_finished, finished_scores.min(axis=1, keepdims=True), NEG)
        can_improve = can_improve & (best_running > worst_finished).any(axis=-1, keepdims=True)
        if not (can_improve.any() and not (is_finished.all() and s.early_stopping is True) and not hits.all()):
            break
    return [_until_eos(row[1:], s.eos_token_id) for row in finished_seq[:, 0, :cur_len].tolist()]


def generate(run: Run, batch: int, s: GenerationSettings) -> list[list[int]]:
    """Greedy when num_beams is 1, beam search otherwise."""
    return greedy(run, batch, s) if s.num_beams == 1 else beam_search(run, batch, s)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values per row, largest first; ties keep the lower index first."""
    if values.shape[1] > 4 * k:
        part = np.argpartition(-values, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(values.shape[1]), values.shape)
    part_values = np.take_along_axis(values, part, axis=1)
    order = np.lexsort((part, -part_values), axis=-1)[:, :k]
    return np.take_along_axis(part, order, axis=1)


def _until_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row
