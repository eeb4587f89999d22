"""Greedy and beam search in numpy, with Hugging Face `generate`'s semantics, over any step function.

Ours because it is the lesson. The rules are transformers 4.57's, so outputs are token-identical:
- logits processors: bad_words_ids (single tokens) -> -inf, eos -> -inf below min_length, at the first generated
  position every token but forced_bos_token_id -> -inf (M2M100/NLLB's target-language token), and at the last
  allowed position every token but eos -> -inf (forced_eos_token_id; it wins when both fall on one step);
- greedy: argmax of the processed logits; finished rows continue with pad until all rows are done;
- beam search (transformers' vectorized version): log-softmax, processors, add running scores, keep the
  top 2*beams continuations, the top `beams` of those not hitting eos/max length keep running, those
  that finish join the finished set scored with sum(logprob) / length**length_penalty, and the loop ends
  when no running beam can beat the worst finished one (early_stopping False) or all are finished (True).
Everything is vectorized over batch x beams x vocabulary: no Python loop over beams or tokens. Beam search
scores in full only the continuations that can reach the top 2*beams (`_candidates`: exact, the same
indices and float32 scores as scoring every continuation; the tuning ablation measures what it saves).
Sentences that are done (greedy: eos; beam search: no running beam can change the finished set) leave the batch
once they are RETIRE_SHARE of its rows (`retire_finished`): `generate` keeps computing them to the end of the
batch's longest sentence, though their output can no longer change. The run drops their rows (`Run.reorder`
with fewer rows); the others' tokens are the same, since every row is computed on its own (dynamic int8 is the
exception: its activation scale spans the batch, so its tokens move with the batch as they already do).
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

NEG = np.float32(-1.0e9)  # transformers' "impossible" score, in float32 as there


PROMPT = 1  # beam search scores lengths without the decoder start token
SEARCH_KEYS = ("num_beams", "max_length", "length_penalty", "early_stopping")  # named when taken from elsewhere


class MissingGenerationConfig(UserWarning):
    """A model directory without generation_config.json: the search settings came from config.json or defaults."""


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
    forced_bos_token_id: int | None = None  # the first generated token (M2M100/NLLB: the target language's)
    screen_candidates: bool = True  # beam search: score only the candidates that can win (False: score all)
    search_head: bool = True  # beam search: top log-probabilities from the search head, if the run has one (Run)
    retire_finished: bool = True  # stop decoding the rows of done sentences (False: every row to the end, as generate)
    group_encoder: bool = True  # encode rows of similar length together (False: the whole batch, padding included)

    @classmethod
    def from_dir(cls, directory: str | Path) -> GenerationSettings:
        """Defaults from generation_config.json, as `generate` reads them. Without that file, `generate` takes what
        config.json holds and its own defaults for the rest, and so does this, with a MissingGenerationConfig warning
        that names the settings taken: they decide the search (num_beams 1 is greedy)."""
        directory = Path(directory)
        path = directory / "generation_config.json"
        config = json.loads((path if path.is_file() else directory / "config.json").read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError(f"the top level is {type(config).__name__}, not an object")
        bad = config.get("bad_words_ids") or []
        if any(len(words) != 1 for words in bad):
            raise ValueError("only single-token bad_words_ids are supported")
        eos = config["eos_token_id"]
        settings = cls(
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
            forced_bos_token_id=config.get("forced_bos_token_id"),
        )
        if not path.is_file():
            taken = ", ".join(
                f"{key} {getattr(settings, key)} ({'config.json' if key in config else 'default'})"
                for key in SEARCH_KEYS
            )
            warnings.warn(
                f"{directory} has no generation_config.json: decoding with {taken}; copy the source model's "
                "generation_config.json beside the ONNX files to decode as it does",
                MissingGenerationConfig,
                stacklevel=2,
            )
        return settings

    def with_options(
        self, num_beams: int | None = None, max_new_tokens: int | None = None, **fields
    ) -> GenerationSettings:
        """Overrides as `generate` takes them: max_new_tokens sets max_length = 1 + max_new_tokens."""
        if num_beams is not None:
            fields["num_beams"] = num_beams
        if max_new_tokens is not None:
            fields["max_length"] = 1 + max_new_tokens
        return replace(self, **fields)


class Run(Protocol):
    """One batch being decoded: `step` feeds one token per row and returns that step's logits.

    A run may set `narrow_first`: beam search then feeds the first step one row per sentence (every beam of a
    sentence starts from the same state) and the first `reorder` widens the rows to the beams. A run with the
    search head (mtonnx.passes.search_head) sets `has_head` and `vocab`, and its `step_top(tokens, k)` steps as
    `step` but returns each row's k largest log-probabilities and their columns ([rows, k], largest first, ties to
    the lower column).
    """

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Feed one token per row; the step's logits, [rows, vocab]."""

    def reorder(self, rows: np.ndarray) -> None:
        """Row i continues row rows[i] (beam search). Fewer rows than the run holds: the rows left out belong to
        retired sentences (all beams of each) and are decoded no more."""


def _forced(cur_len: int, s: GenerationSettings) -> int | None:
    """The one token a step allows, if it allows one: eos at the last allowed position (forced_eos_token_id), else
    forced_bos_token_id at the first generated one (generate applies the forced-eos processor after the other)."""
    if s.forced_eos_token_id is not None and cur_len == s.max_length - 1:
        return s.forced_eos_token_id
    return s.forced_bos_token_id if cur_len == 1 else None


def _banned(cur_len: int, s: GenerationSettings) -> list[int]:
    """The tokens `process` sets to -inf at this step (outside the forced-eos step)."""
    return [*s.bad_token_ids, *([s.eos_token_id] if cur_len < s.min_length else [])]


def process(scores: np.ndarray, cur_len: int, s: GenerationSettings) -> np.ndarray:
    """The logits processors generate() applies for these models, in place; cur_len counts the start token."""
    banned = _banned(cur_len, s)
    if banned:
        scores[:, banned] = -np.inf
    forced = _forced(cur_len, s)
    if forced is not None:
        scores[:] = -np.inf
        scores[:, forced] = 0.0
    return scores


def greedy(run: Run, batch: int, s: GenerationSettings) -> list[list[int]]:
    """Greedy decoding of `batch` rows; returns each row's generated ids up to and including eos."""
    tokens = np.full(batch, s.decoder_start_token_id, dtype=np.int64)
    unfinished = np.ones(batch, dtype=bool)
    held = np.arange(batch)  # the row of the batch that each row of the run decodes
    generated = np.full((batch, s.max_length), s.pad_token_id, dtype=np.int64)
    cur_len = 1
    while True:
        scores = process(run.step(tokens), cur_len, s)
        tokens = np.where(unfinished, scores.argmax(-1), s.pad_token_id).astype(np.int64)
        generated[held, cur_len - 1] = tokens
        cur_len += 1
        unfinished &= tokens != s.eos_token_id
        if not unfinished.any() or cur_len >= s.max_length:
            break
        if s.retire_finished and _retire(~unfinished):
            keep = np.flatnonzero(unfinished)
            run.reorder(keep)
            held, tokens, unfinished = held[keep], tokens[keep], unfinished[keep]
    return [_until_eos(row, s.eos_token_id) for row in generated[:, : cur_len - 1].tolist()]


RETIRE_SHARE = 0.25  # done sentences leave the batch once they are this share of it (each retirement copies the cache)


def _retire(done: np.ndarray) -> bool:
    """Whether the done sentences are worth dropping now: enough of the batch that the copy of the others' cache
    (a gather of every row kept) costs less than decoding the done rows to the end."""
    return bool(done.any()) and done.sum() >= RETIRE_SHARE * len(done)


def beam_search(run: Run, batch: int, s: GenerationSettings) -> list[list[int]]:
    """Beam search over `batch` sentences x `s.num_beams` rows (the run holds batch*beams rows)."""
    k, keep, prompt = s.num_beams, 2 * s.num_beams, PROMPT
    running = np.full((batch, k, s.max_length), s.pad_token_id, dtype=np.int64)
    running[:, :, 0] = s.decoder_start_token_id
    finished_seq = running.copy()
    running_scores = np.zeros((batch, k), dtype=np.float32)
    running_scores[:, 1:] = NEG
    finished_scores = np.full((batch, k), NEG, dtype=np.float32)
    is_finished = np.zeros((batch, k), dtype=bool)
    can_improve = np.ones((batch, 1), dtype=bool)
    top_k_mask = np.arange(keep) < k
    sentence = np.arange(batch)[:, None]  # with a [batch, n] index array: each sentence's own entries
    row_offset = sentence * k
    held = np.arange(batch)  # the batch's sentence that each sentence of the run is (retired ones leave)
    retired: dict[int, np.ndarray] = {}
    tokens = running[:, :, 0].reshape(-1)
    scratch = None
    cur_len = 1
    narrow = k > 1 and getattr(run, "narrow_first", False)
    head = s.search_head and getattr(run, "has_head", False)
    while True:
        banned = _banned(cur_len, s)
        if head and _forced(cur_len, s) is None and run.vocab - len(banned) >= keep:
            top = run.step_top(tokens[::k] if narrow else tokens, keep + len(banned))
            scored = running_scores[:, :1] if narrow else running_scores  # as below: all beams extend beam 0
            vocab, narrow = run.vocab, False
            flat, cand_scores = _candidates_from_head(top, scored, banned, vocab, keep)
        else:
            logits = run.step(tokens[::k] if narrow else tokens)
            vocab = logits.shape[-1]
            scored = running_scores
            if narrow:  # beams 1.. start at -1e9: the top 2*beams continuations all extend beam 0 (row = sentence) ...
                if (
                    _forced(cur_len, s) is not None or vocab - len(banned) < keep
                ):  # ... unless too few tokens are allowed
                    logits = np.repeat(logits, k, axis=0)
                else:
                    scored = running_scores[:, :1]
                narrow = False
            if scratch is None or scratch.shape != logits.shape:
                scratch = np.empty_like(logits)
            flat, cand_scores = _candidates(logits, scored, cur_len, s, scratch, keep)
        cand_beam, cand_token = flat // vocab, flat % vocab
        cand_seq = running[sentence, cand_beam]
        cand_seq[:, :, cur_len] = cand_token
        hits = (cand_token == s.eos_token_id) | (cur_len + 1 >= s.max_length)

        live_scores = cand_scores + hits.astype(np.float32) * NEG
        pick = _top_k(live_scores, k)
        running = cand_seq[sentence, pick]
        running_scores = live_scores[sentence, pick]
        source_beam = cand_beam[sentence, pick]

        just_finished = hits & top_k_mask[None, :]
        if just_finished.any() or finished_scores.min() < NEG:  # else the merge keeps the set (_merge_finished)
            finished = (finished_seq, finished_scores, is_finished)
            finished_seq, finished_scores, is_finished = _merge_finished(
                finished, cand_seq, cand_scores, just_finished, can_improve, cur_len, s
            )

        cur_len += 1
        length = (s.max_length - prompt) if s.early_stopping == "never" and s.length_penalty > 0 else cur_len - prompt
        best_running = running_scores[:, :1] / np.float32(length**s.length_penalty)
        worst_finished = np.where(is_finished, finished_scores.min(axis=1, keepdims=True), NEG)
        can_improve = can_improve & (best_running > worst_finished).any(axis=-1, keepdims=True)
        if not (can_improve.any() and not (is_finished.all() and s.early_stopping is True) and not hits.all()):
            break
        rows = source_beam + row_offset
        # done: the finished set can no longer change (nothing excluded from it can enter it any more)
        done = ~can_improve[:, 0] | (is_finished.all(axis=1) & (s.early_stopping is True))
        if s.retire_finished and _retire(done):
            retired.update(zip(held[done].tolist(), finished_seq[done, 0]))
            live = np.flatnonzero(~done)
            rows, held, running, running_scores = rows[live], held[live], running[live], running_scores[live]
            finished_seq, finished_scores = finished_seq[live], finished_scores[live]
            is_finished, can_improve = is_finished[live], can_improve[live]
            sentence = np.arange(len(live))[:, None]
            row_offset = sentence * k
        run.reorder(rows.reshape(-1))
        tokens = running[:, :, cur_len - 1].reshape(-1)
    retired.update(zip(held.tolist(), finished_seq[:, 0, :cur_len]))
    return [_until_eos(retired[i][1:].tolist(), s.eos_token_id) for i in range(batch)]


def _merge_finished(
    finished: tuple[np.ndarray, np.ndarray, np.ndarray],
    cand_seq: np.ndarray,
    cand_scores: np.ndarray,
    just_finished: np.ndarray,
    can_improve: np.ndarray,
    cur_len: int,
    s: GenerationSettings,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The finished set (sequences, scores, flags) after this step's candidates that ended: each scored by its
    length-normalized score, the ones that cannot enter it pushed below NEG (not just finished, a sentence that
    can no longer improve, or one whose beams are all finished under early_stopping=True), the best `beams` kept.

    A step where no candidate ended leaves the set as it is when no entry of it scores below NEG: every new entry
    is then NEG plus a score of at most 0 (at most NEG in float32), and the top-k keeps the existing, lower-index,
    entries on ties; so the caller skips that step's merge."""
    finished_seq, finished_scores, is_finished = finished
    batch, k = finished_scores.shape
    sentence = np.arange(batch)[:, None]
    normalized = cand_scores / np.float32((cur_len + 1 - PROMPT) ** s.length_penalty)
    all_done = is_finished.all(axis=1, keepdims=True) & (s.early_stopping is True)
    normalized = normalized + all_done.astype(np.float32) * NEG
    normalized = normalized + (~can_improve).astype(np.float32) * NEG
    normalized = normalized + (~just_finished).astype(np.float32) * NEG
    merged_scores = np.concatenate([finished_scores, normalized], axis=1)
    best = _top_k(merged_scores, k)
    return (
        np.concatenate([finished_seq, cand_seq], axis=1)[sentence, best],
        merged_scores[sentence, best],
        np.concatenate([is_finished, just_finished], axis=1)[sentence, best],
    )


def generate(run: Run, batch: int, s: GenerationSettings) -> list[list[int]]:
    """Greedy when num_beams is 1, beam search otherwise."""
    return greedy(run, batch, s) if s.num_beams == 1 else beam_search(run, batch, s)


def _candidates(
    logits: np.ndarray, running_scores: np.ndarray, cur_len: int, s: GenerationSettings, scratch: np.ndarray, keep: int
) -> tuple[np.ndarray, np.ndarray]:
    """The `keep` best continuations per sentence: flat indices into beams x vocabulary and their scores
    (running score + log-softmax after the processors), best first, ties to the lower index.

    Exactly what scoring every continuation and taking the top `keep` gives, without scoring them all:
    a continuation's score is a monotone function of its logit within a row, so the top of a sentence lies in
    the groups of 64 logits (strided) whose maximum scores highest; only the log-sum-exp needs a full pass.
    A forced step (one token allowed) needs no scores at all (`_forced_candidates`); small vocabularies take the
    full path.
    """
    batch, beams = running_scores.shape
    rows, vocab = logits.shape
    groups = vocab // GROUP
    forced = _forced(cur_len, s)
    if forced is not None:
        if s.screen_candidates:
            return _forced_candidates(running_scores, vocab, forced, keep)
        return _candidates_full(logits, running_scores, cur_len, s, scratch, keep)
    if not s.screen_candidates or groups < 4 * keep:
        return _candidates_full(logits, running_scores, cur_len, s, scratch, keep)
    grouped = logits[:, : groups * GROUP].reshape(rows, GROUP, groups)
    maxima = grouped.max(axis=1)
    # the row maximum from the group maxima: one pass over the logits fewer (a max is exact in any order)
    peak = np.maximum(maxima.max(axis=1), logits[:, groups * GROUP :].max(axis=1, initial=-np.inf))[:, None]
    np.subtract(logits, peak, out=scratch)
    log_total = np.log(np.exp(scratch, out=scratch).sum(axis=-1, keepdims=True))
    offset = running_scores.reshape(rows, 1)
    process(logits, cur_len, s)  # -inf where a processor bans a token; log-sum-exp was taken before, as in generate()
    banned = [c for c in _banned(cur_len, s) if c < groups * GROUP]
    for group in {c % groups for c in banned}:  # groups holding a banned token: their maxima again, after process
        maxima[:, group] = grouped[:, :, group].max(axis=1)
    best = ((maxima - peak) - log_total) + offset  # the same float32 operations, in the same order, as the full path
    # The keep-th best group maximum of a sentence is <= its keep-th best score: groups below it cannot win
    # (per sentence, not per row: beams still at the -1e9 start score drop out at once).
    per_sentence = best.reshape(batch, beams * groups)
    threshold = np.partition(per_sentence, beams * groups - keep, axis=1)[:, beams * groups - keep]
    threshold = np.repeat(threshold, beams)[:, None]
    chosen = best >= threshold
    if chosen.sum() > 4 * keep * rows:  # many ties at the threshold: screening would not pay
        return _candidates_full(
            logits, running_scores, cur_len, s, scratch, keep, processed=True, peak=peak, log_total=log_total
        )
    row, group = np.nonzero(chosen)
    strides, left_rows, left_cols = _screen_indices(rows, vocab)
    row = np.concatenate([np.repeat(row, GROUP), left_rows])
    col = np.concatenate([(group[:, None] + strides).ravel(), left_cols])
    scores = ((logits[row, col] - peak[row, 0]) - log_total[row, 0]) + offset[row, 0]
    above = scores >= threshold[row, 0]
    row, col, scores = row[above], col[above], scores[above]
    sentence, flat = row // beams, (row % beams) * vocab + col
    order = np.lexsort((flat, -scores, sentence))
    starts = np.searchsorted(sentence[order], np.arange(batch))
    pick = order[starts[:, None] + np.arange(keep)]
    return flat[pick], scores[pick]


def _candidates_from_head(
    top: tuple[np.ndarray, ...], running_scores: np.ndarray, banned: list[int], vocab: int, keep: int
) -> tuple[np.ndarray, np.ndarray]:
    """`_candidates` from the search head's per-row top log-probabilities (a row's best `keep` allowed continuations
    lie in its top keep + len(banned)): the same float32 operations, ranked the same way; only the log-softmax is
    ORT's (MLAS: (logit - max) - log(sum(exp)), its own exp and order of summation)."""
    log_probs, cols = top
    batch, beams = running_scores.shape
    scores = log_probs + running_scores.reshape(-1, 1)
    for column in banned:  # one or two tokens: a comparison each (np.isin costs ~50 us a call at this size)
        scores[cols == column] = -np.inf
    flat = (cols + (np.arange(len(cols)) % beams * vocab)[:, None]).reshape(batch, -1)
    scores = scores.reshape(batch, -1)
    sentence = np.arange(batch)[:, None]
    # A stable sort of the scores ranks as the lexsort below unless two of the first keep + 1 are equal: the head
    # lists each row's ties by column, but two different log-probabilities can round to one score.
    pick = np.argsort(-scores, axis=1, kind="stable")[:, : keep + 1]
    ranked = scores[sentence, pick]
    if (ranked[:, 1:] == ranked[:, :-1]).any():
        pick = np.lexsort((flat, -scores))
    pick = pick[:, :keep]
    return flat[sentence, pick], scores[sentence, pick]


@functools.lru_cache(maxsize=64)
def _screen_indices(rows: int, vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What `_candidates` indexes with at every step of a batch: a group's column offsets, and the rows and columns
    of the leftover logits (past the last whole group), which are always scored. Read-only, shared."""
    groups = vocab // GROUP
    leftover = np.arange(groups * GROUP, vocab)
    arrays = groups * np.arange(GROUP), np.repeat(np.arange(rows), len(leftover)), np.tile(leftover, rows)
    for array in arrays:
        array.flags.writeable = False
    return arrays


def _forced_candidates(running_scores: np.ndarray, vocab: int, token: int, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """`_candidates` at a forced step, where the processors leave every score -inf but the forced token's (0 + the
    running score): only each beam's forced token and the lowest flat indices (the -inf ties `_top_k` keeps) can be
    chosen, so those few columns are ranked instead of log-softmaxing beams x vocabulary scores thrown away after."""
    batch, beams = running_scores.shape
    forced_cols = np.arange(beams) * vocab + token
    cols = np.union1d(forced_cols, np.arange(keep + beams))  # ascending, so ties still go to the lower flat index
    values = np.full((batch, len(cols)), -np.inf, dtype=np.float32)
    values[:, np.searchsorted(cols, forced_cols)] = running_scores
    pick = _top_k(values, keep)
    return cols[pick], np.take_along_axis(values, pick, axis=1)


def _candidates_full(
    logits: np.ndarray,
    running_scores: np.ndarray,
    cur_len: int,
    s: GenerationSettings,
    scratch: np.ndarray,
    keep: int,
    processed: bool = False,
    peak: np.ndarray | None = None,
    log_total: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`_candidates` by scoring every continuation: log-softmax, processors, + running score, top `keep`."""
    batch, beams = running_scores.shape
    if processed:  # logits already hold -inf where banned; peak and log-sum-exp come from before that
        logits -= peak
        logits -= log_total
    else:
        _log_softmax(logits, scratch)
        process(logits, cur_len, s)
    totals = logits.reshape(batch, beams, -1)
    totals += running_scores[:, :, None]
    totals = totals.reshape(batch, -1)
    flat = _top_k(totals, keep)
    return flat, np.take_along_axis(totals, flat, axis=1)


def _log_softmax(logits: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """log_softmax over the last axis, in place (the step's logits are not needed after it); `scratch`
    (same shape) holds the exponentials, so no logits-sized temporaries are allocated per step."""
    logits -= logits.max(axis=-1, keepdims=True)
    logits -= np.log(np.exp(logits, out=scratch).sum(axis=-1, keepdims=True))
    return logits


SMALL_ROW = 256  # _top_k sorts rows of at most this many values (beam bookkeeping: 2-3 x beams per sentence)
GROUP = 64  # screening works on groups of 64 scores (about 1,000 group maxima per 65,001-entry row)


def _top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values per row, largest first; ties keep the lower index first (exact).

    Rows of at most SMALL_ROW values are sorted (a stable sort of the negated values). Longer rows: a partition
    finds k of the largest; when the row holds more values equal to the k-th than the partition
    kept (a tie across the boundary), the ties are filled from the lowest index instead. When fewer than k
    scores per row are above -inf (the forced-eos step), the rest are the lowest-index -inf columns, all
    within the first 2k columns.
    """
    rows, n = values.shape
    if n <= SMALL_ROW:  # a stable sort of the negated values is the same order, in far fewer numpy calls
        return np.argsort(-values, axis=1, kind="stable")[:, :k]
    finite = values > -np.inf
    if (finite.sum(axis=1) < k).all():
        finite[:, : 2 * k] = True
        row, col = np.nonzero(finite)
    else:
        part = np.argpartition(values, n - k, axis=1)[:, n - k :]
        kept = np.take_along_axis(values, part, axis=1)
        kth = kept.min(axis=1, keepdims=True)
        ties = values == kth
        if (ties.sum(axis=1) == (kept == kth).sum(axis=1)).all():
            row, col = np.repeat(np.arange(rows), k), part.ravel()  # no tie crosses the boundary
        else:
            above = values > kth
            row, col = np.nonzero(above | (ties & (np.cumsum(ties, axis=1) <= k - above.sum(axis=1, keepdims=True))))
    order = np.lexsort((col, -values[row, col], row))
    starts = np.searchsorted(row[order], np.arange(rows))
    return col[order][starts[:, None] + np.arange(k)]


def _until_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row
