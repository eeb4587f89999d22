"""The ways to run the exported decoder step by step (each returns a `decoding.Run` per batch).

- `CachedDecoder`: the encoder once (on groups of rows of similar length); the first step on decoder_model (or
  the merged file's no-cache branch), every later step on decoder_with_past (or its cache branch) with only the
  new token. Cross-attention K/V come out of the first step and are reused, never recomputed; self-attention K/V
  grow by one each step.
  Lean layout (tuned variants): the cross K/V file (layout.CROSS_KV) computes the cross K/V from the encoder
  output, once per sentence (beams share it), and every step, the first included, runs on decoder_with_past (an
  empty self-attention past gives bit-identical first-step logits): decoder_model's weights are never loaded.
  Tuned layout (layout.TUNED_STEP, mtonnx.passes.tuned_step): the self-attention keys live
  time-major in a preallocated buffer that each step appends one position to (the graph reads the filled
  prefix in place), and each sentence's cross K/V are fed once for all its beams.
  In-place layout (layout.INPLACE_STEP): runtime.inplace's InPlaceDecoder, a CachedDecoder whose runs own the
  self-attention buffers.
- `NoCacheDecoder`: the plain loop over the translation step (layout.TRANSLATION_STEP) that tutorials stop at:
  every step re-runs the encoder and the whole decoder prefix. Correct, and quadratically slower: the baseline.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from mtonnx.runtime import layout
from mtonnx.runtime.cache import KVCache, TimeMajorKeys, reorder_rows

PADDING = 0.25  # the share of padding positions an encoder group may hold (CachedDecoder.encode)


class CachedDecoder:
    """Encoder + first-step decoder + decoder-with-past (split files, optimum's merged file, or lean:
    `first` None and a `cross_kv` session)."""

    def __init__(
        self,
        encoder: ort.InferenceSession,
        first: ort.InferenceSession | None,
        with_past: ort.InferenceSession,
        cross_kv: ort.InferenceSession | None = None,
        head: ort.InferenceSession | None = None,
    ):
        self.encoder, self.with_past, self.cross_kv, self.head = encoder, with_past, cross_kv, head
        self.merged = first is None and cross_kv is None  # one file, switching on its use_cache_branch input
        self.first = with_past if first is None else first
        inputs = {i.name: i for i in with_past.get_inputs()}
        self.layers = layout.layers_of(list(inputs))
        self.past_names = layout.past_names(self.layers)
        self.first_outputs = ["logits", *layout.present_names(self.layers)]
        self.step_outputs = ["logits", *layout.present_names(self.layers, layout.SELF)]
        self.cross_outputs = layout.present_names(self.layers, layout.CROSS)
        value = inputs[layout.past_names(1, (layout.SELF_VALUE,))[0]]  # values are never time-major
        self.heads, self.head_dim = value.shape[1], value.shape[3]
        metadata = with_past.get_modelmeta().custom_metadata_map
        self.time_major_keys = metadata.get(layout.SELF_KEYS_KEY) == layout.SELF_KEYS_TIME_MAJOR
        self.shared_cross = metadata.get(layout.CROSS_ATTENTION_KEY) == layout.CROSS_PER_SENTENCE
        vocab = with_past.get_outputs()[0].shape[-1]
        self.vocab = vocab if isinstance(vocab, int) else None  # the search head needs it before the first step

    def begin(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, expand: int = 1, grouped: bool = True
    ) -> CachedRun:
        """Run the encoder on a batch (`grouped`: see `encode`); the run decodes `expand` rows (beams) per
        sentence."""
        if self.cross_kv is not None:
            # Beams: every beam of a sentence starts from the same state, so the run starts with one row per
            # sentence (each sentence's cross K/V computed once) and the first reorder widens it to the beams.
            run = CachedRun(self, None, attention_mask)
            run.widen = expand
            cross = self.cross_attention_kv(input_ids, attention_mask, grouped)
            run.cache = KVCache.empty_self(cross, len(run.mask), self.heads, self.head_dim)
            if self.time_major_keys:
                run.keys = TimeMajorKeys(self.layers, len(run.mask), self.heads, self.head_dim)
            return run
        hidden = self.encode(input_ids, attention_mask, grouped)
        if expand > 1:  # beams: the encoder ran once per sentence, its output is shared by the sentence's beams
            hidden, attention_mask = np.repeat(hidden, expand, axis=0), np.repeat(attention_mask, expand, axis=0)
        return CachedRun(self, hidden, attention_mask)

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray, grouped: bool = True) -> np.ndarray:
        """The encoder's output for a batch, [rows, positions, d_model], run on groups of rows of similar length
        (`length_groups`), each cut to its longest row; zeros past it (the mask hides every padding position).
        `grouped` False: the whole batch in one run, padding included (decoding.GenerationSettings.group_encoder).

        The encoder's work grows with every position, padding included, while batching more rows into it buys
        little (a long sentence is already many rows of its matrix products), so a batch of mixed lengths costs
        far less in groups (the encoder-groups study measures it). The decoder keeps the whole batch,
        where batching pays. Every layout
        encodes this way, so the same batch gives the same tokens on each (dynamic int8 scales each tensor by its
        range: which rows share an encoder run can move its last bits)."""
        groups = length_groups(attention_mask) if grouped else []
        if len(groups) <= 1:
            return self._encode(input_ids, attention_mask)
        lengths = attention_mask.sum(axis=1)
        hidden = None
        for rows in groups:
            width = max(int(lengths[rows].max()), 1)  # a group of empty rows still gets one (masked) position
            part = self._encode(input_ids[rows, :width], attention_mask[rows, :width])
            if hidden is None:
                hidden = np.zeros((len(input_ids), input_ids.shape[1], part.shape[2]), part.dtype)
            hidden[rows, :width] = part
        return hidden

    def cross_attention_kv(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, grouped: bool = True
    ) -> list[np.ndarray]:
        """The lean layouts' cross K/V of a batch (cross_outputs order): the cross K/V file on `encode`'s output."""
        hidden = self.encode(input_ids, attention_mask, grouped)
        return self.cross_kv.run(self.cross_outputs, {"encoder_hidden_states": hidden})

    def _encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """The encoder on one batch as given."""
        return self.encoder.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": attention_mask})[0]


def length_groups(attention_mask: np.ndarray, padding: float = PADDING) -> list[np.ndarray]:
    """The rows of a batch in groups of similar source length, shortest first, each group at most `padding` padding
    when cut to its longest row; one group of every row when the mask is not right-padded (it cannot be cut)."""
    lengths = attention_mask.sum(axis=1)
    if not np.array_equal(attention_mask != 0, np.arange(attention_mask.shape[1]) < lengths[:, None]):
        return [np.arange(len(attention_mask))]
    groups: list[list[int]] = [[]]
    real = 0
    for row in np.argsort(lengths, kind="stable").tolist():
        n = int(lengths[row])
        if groups[-1] and (len(groups[-1]) + 1) * n * (1 - padding) > real + n:  # sorted: n is the group's longest
            groups.append([])
            real = 0
        groups[-1].append(row)
        real += n
    return [np.array(group) for group in groups]


class CachedRun:
    """One batch being decoded: the encoder output (None on the lean layouts, which need only the cross K/V made
    from it) and mask, and the cache (None before the first step; with the tuned step, its self-attention keys are
    only the last step's: the keys live in `keys`)."""

    def __init__(self, decoder: CachedDecoder, hidden: np.ndarray | None, mask: np.ndarray):
        self.decoder, self.hidden, self.mask = decoder, hidden, mask
        self.cache: KVCache | None = None
        self.keys: TimeMajorKeys | None = None
        self.columns: dict[str, np.ndarray] = {}  # a shortlisted variant's lm_head columns (runtime.shortlist)
        self.widen = 1  # > 1: one row per sentence so far; the first reorder repeats each for its beams

    @property
    def narrow_first(self) -> bool:
        """beam_search feeds the first step one row per sentence (decoding.Run)."""
        return self.widen > 1

    @property
    def has_head(self) -> bool:
        """Whether `step_top` can answer beam search (decoding.Run): the variant has the search head file."""
        return self.decoder.head is not None and self.vocab is not None

    @property
    def vocab(self) -> int | None:
        """The logits' columns: the shortlisted columns fed, else as the step graph states them."""
        return self.columns[layout.HEAD_COLUMN_INPUTS[1]].shape[-1] if self.columns else self.decoder.vocab

    def feed_columns(self, columns: dict[str, np.ndarray]) -> None:
        """Feed these lm_head columns (layout.HEAD_COLUMN_INPUTS) at every step of this run."""
        self.columns = columns

    def step_top(self, tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """As `step`, then the search head (passes.search_head) on its logits: each row's k largest
        log-probabilities and their columns, [rows, k], largest first."""
        logits = self.step(tokens)
        feeds = {"logits": logits, layout.HEAD_TOP_K: np.array([k], np.int64)}
        return tuple(self.decoder.head.run(list(layout.HEAD_OUTPUTS), feeds))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Feed one token per row; returns the logits of that step, [rows, vocab]."""
        d = self.decoder
        ids = tokens.reshape(-1, 1).astype(np.int64, copy=False)
        if self.cache is None:
            feeds = {"input_ids": ids, "encoder_hidden_states": self.hidden, "encoder_attention_mask": self.mask}
            feeds.update(self.columns)
            if d.merged:
                empty = np.zeros((ids.shape[0], d.heads, 0, d.head_dim), dtype=np.float32)
                feeds.update(dict.fromkeys(d.past_names, empty), use_cache_branch=np.array([False]))
            logits, *present = d.first.run(d.first_outputs, feeds)
            self.cache = KVCache.from_present(present)  # the cross K/V: computed once, reused every step
        else:
            feeds = {"input_ids": ids, "encoder_attention_mask": self.mask, **self.columns}
            feeds.update(zip(d.past_names, self.cache.tensors(self.keys.pasts() if self.keys is not None else None)))
            if d.merged:
                feeds.update(encoder_hidden_states=self.hidden, use_cache_branch=np.array([True]))
            logits, *present = d.with_past.run(d.step_outputs, feeds)
            self.cache.update_self(present)
            if self.keys is not None:
                self.keys.append(self.cache.self_keys)
        return logits[:, -1, :]

    def reorder(self, rows: np.ndarray) -> None:
        """Row i continues row rows[i] (beam search). Beams only move within their sentence, whose rows share
        one source: cross K/V need no reorder. Fewer rows than held: retired sentences leave (decoding.Run)."""
        if self.widen > 1:  # the first step ran one row per sentence: row i continues sentence rows[i] // beams
            self._gather(rows // self.widen, sentences=rows[:: self.widen] // self.widen)
            self.widen = 1
            return
        held = len(self.cache.self_values[0])
        if len(rows) < held:
            beams = held // len(self.cache.cross_keys[0]) if self.decoder.shared_cross else 1
            self._gather(rows, sentences=rows[::beams] // beams)
            return
        moved = np.flatnonzero(rows != np.arange(len(rows)))
        if self.keys is not None:  # the keys live in the buffer
            self.keys.reorder(rows, moved)
        else:
            self.cache.self_keys = reorder_rows(self.cache.self_keys, rows, moved)
        self.cache.self_values = reorder_rows(self.cache.self_values, rows, moved)

    def _gather(self, source: np.ndarray, sentences: np.ndarray) -> None:
        """Row i becomes a copy of row source[i]; a shared cross K/V keeps the rows of `sentences`."""
        self.mask = self.mask[source]
        if self.decoder.merged:  # the merged file is fed the encoder output at every step
            self.hidden = self.hidden[source]
        self.cache.select(source, cross=not self.decoder.shared_cross)
        if self.decoder.shared_cross and len(sentences) < len(self.cache.cross_keys[0]):
            self.cache.select_cross(sentences)
        if self.keys is not None:
            self.keys.widen(source)


class NoCacheDecoder:
    """The baseline: the translation step re-runs encoder and the whole decoder prefix at every step."""

    def __init__(self, step: ort.InferenceSession):
        self.session = step

    def begin(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, expand: int = 1, grouped: bool = True
    ) -> NoCacheRun:
        """A run over the batch, `expand` rows (beams) per sentence (`grouped` does not apply: the translation step
        runs the encoder itself, on the whole batch, at every step)."""
        if expand > 1:
            input_ids, attention_mask = np.repeat(input_ids, expand, axis=0), np.repeat(attention_mask, expand, axis=0)
        return NoCacheRun(self.session, input_ids, attention_mask)


class NoCacheRun:
    """One batch on the translation step: the whole prefix is fed at every step."""

    def __init__(self, session: ort.InferenceSession, input_ids: np.ndarray, mask: np.ndarray):
        self.session, self.input_ids, self.mask = session, input_ids, mask
        self.prefix = np.zeros((input_ids.shape[0], 0), dtype=np.int64)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Append one token per row and re-run everything; returns the last position's logits."""
        self.prefix = np.concatenate([self.prefix, tokens.reshape(-1, 1).astype(np.int64)], axis=1)
        feeds = {"input_ids": self.input_ids, "attention_mask": self.mask, "decoder_input_ids": self.prefix}
        return self.session.run(["logits"], feeds)[0][:, -1, :]

    def reorder(self, rows: np.ndarray) -> None:
        """Row i continues row rows[i]; fewer rows: retired sentences leave."""
        if len(rows) < len(self.prefix):
            self.input_ids, self.mask = self.input_ids[rows], self.mask[rows]
        self.prefix = self.prefix[rows]
