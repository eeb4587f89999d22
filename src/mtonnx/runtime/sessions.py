"""ONNX Runtime sessions and the ways to run the decoder step by step.

- `CachedDecoder`: the encoder once; the first step on decoder_model (or the merged file's no-cache branch),
  every later step on decoder_with_past (or its cache branch) with only the new token. Cross-attention K/V
  come out of the first step and are reused, never recomputed; self-attention K/V grow by one each step.
  Lean layout (tuned variants): decoder_cross_kv.onnx computes the cross K/V from the encoder output, once per
  sentence (beams share it), and every step, the first included, runs on decoder_with_past (an empty
  self-attention past gives bit-identical first-step logits): decoder_model's weights are never loaded.
  Tuned layout (decoder_with_past_tuned.onnx, step_rewrite.py): the self-attention keys live time-major in a
  preallocated buffer that each step appends one position to (the graph reads the filled prefix in place), and
  each sentence's cross K/V are fed once for all its beams.
- `NoCacheDecoder`: the seeds' loop over translation_step.onnx: every step re-runs the encoder and the
  whole decoder prefix. Correct, and quadratically slower: the baseline.
One InferenceSession per file, created once and shared by all calls (ORT's run() is thread-safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

OPTIMIZATION = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
KV = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")
# SessionSettings fields of the tuned runtime (tuning.py measures them; here so a deployment needs no onnx):
FP32_SESSION = {"disabled_optimizers": ("SkipLayerNormFusion",)}
# Metadata of decoder_with_past_tuned.onnx (step_rewrite.py): how the tuned step wants its caches fed.
SELF_KEYS_KEY, CROSS_ATTENTION_KEY = "mtonnx.self_attention_keys", "mtonnx.cross_attention"
INT8_SESSION: dict = {}  # ORT defaults: SkipLayerNormFusion off moves int8 tokens


@dataclass(frozen=True)
class SessionSettings:
    """Thread count, graph optimization level and spin-waiting for every session of a model.

    Spinning is off by default: ORT's spin-waiting worker threads oversubscribe a 2-vCPU machine
    (a 32-token decode took ~800 ms with spinning vs ~400 ms without, here).
    `disabled_optimizers` names ORT graph transformers to skip, e.g. "SkipLayerNormFusion": onnxruntime 1.32's
    fused SkipLayerNormalization costs ~3.6 us per row on CPU against ~0.4 us for the Add + LayerNormalization
    it replaces (120 vs 28 us at 32 x 512). It keeps fp32 tokens but moves int8 ones (dynamic quantization
    amplifies the last-bit differences), so only the fp32 runtime turns it off (tuning.py).
    """

    threads: int = 1
    optimization: str = "all"
    spinning: bool = False
    disabled_optimizers: tuple[str, ...] = ()

    def options(self) -> ort.SessionOptions:
        if self.optimization not in OPTIMIZATION:
            raise ValueError(f"optimization must be one of {', '.join(OPTIMIZATION)}, got {self.optimization!r}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = OPTIMIZATION[self.optimization]
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "1" if self.spinning else "0")
        return options


def make_session(path: str | Path, settings: SessionSettings = SessionSettings()) -> ort.InferenceSession:
    """A CPU InferenceSession for one file."""
    return ort.InferenceSession(str(path), settings.options(), providers=["CPUExecutionProvider"],
                                disabled_optimizers=list(settings.disabled_optimizers))


def layers_of(session: ort.InferenceSession) -> int:
    """Decoder layers, counted from the past_key_values inputs."""
    return sum(1 for i in session.get_inputs() if i.name.endswith(".decoder.key"))


class CachedDecoder:
    """Encoder + first-step decoder + decoder-with-past (split files, optimum's merged file, or lean:
    `first` None and a `cross_kv` session)."""

    def __init__(self, encoder: ort.InferenceSession, first: ort.InferenceSession | None,
                 with_past: ort.InferenceSession, cross_kv: ort.InferenceSession | None = None):
        self.encoder, self.with_past, self.cross_kv = encoder, with_past, cross_kv
        self.merged = first is None and cross_kv is None  # one file, switching on its use_cache_branch input
        self.first = with_past if first is None else first
        self.layers = layers_of(with_past)
        self.past_names = [f"past_key_values.{i}.{kv}" for i in range(self.layers) for kv in KV]
        self.self_outputs = [f"present.{i}.{kv}" for i in range(self.layers) for kv in KV[:2]]
        self.first_outputs = ["logits", *[f"present.{i}.{kv}" for i in range(self.layers) for kv in KV]]
        self.step_outputs = ["logits", *self.self_outputs]
        past_input = next(i for i in with_past.get_inputs() if i.name == self.past_names[1])  # values: never time-major
        self.heads, self.head_dim = past_input.shape[1], past_input.shape[3]
        metadata = with_past.get_modelmeta().custom_metadata_map
        self.time_major_keys = metadata.get(SELF_KEYS_KEY) == "time-major"
        self.shared_cross = metadata.get(CROSS_ATTENTION_KEY) == "per-sentence"

    def begin(self, input_ids: np.ndarray, attention_mask: np.ndarray, expand: int = 1) -> "_CachedRun":
        hidden = self.encoder.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": attention_mask})[0]
        if self.cross_kv is not None:
            # Beams: every beam of a sentence starts from the same state, so the run starts with one row per
            # sentence (each sentence's cross K/V computed once) and the first reorder widens it to the beams.
            run = _CachedRun(self, hidden, attention_mask)
            run.widen = expand
            names = [f"present.{i}.{kv}" for i in range(self.layers) for kv in KV[2:]]
            run.cross_kv = self.cross_kv.run(names, {"encoder_hidden_states": hidden})
            run.self_kv = [np.zeros((len(run.mask), self.heads, 0, self.head_dim), np.float32)] * (2 * self.layers)
            if self.time_major_keys:
                run.keys = _TimeMajorKeys(self.layers, len(run.mask), self.heads, self.head_dim)
            return run
        if expand > 1:  # beams: the encoder ran once per sentence, its output is shared by the sentence's beams
            hidden, attention_mask = np.repeat(hidden, expand, axis=0), np.repeat(attention_mask, expand, axis=0)
        return _CachedRun(self, hidden, attention_mask)


class _TimeMajorKeys:
    """Each layer's self-attention keys as one [capacity, rows, heads, head_dim] buffer: a step appends one
    position (the buffer doubles when full) and feeds the filled prefix, a contiguous view: no copy per step."""

    def __init__(self, layers: int, rows: int, heads: int, head_dim: int, capacity: int = 32):
        self.buffers = [np.empty((capacity, rows, heads, head_dim), np.float32) for _ in range(layers)]
        self.length = 0

    def past(self, layer: int) -> np.ndarray:
        return self.buffers[layer][: self.length]

    def append(self, new: list[np.ndarray]) -> None:
        """One [rows, heads, 1, head_dim] key per layer."""
        if self.length == len(self.buffers[0]):
            self.buffers = [np.concatenate([b, np.empty_like(b)]) for b in self.buffers]
        for buffer, key in zip(self.buffers, new):
            buffer[self.length] = key[:, :, 0, :]
        self.length += 1

    def widen(self, source: np.ndarray) -> None:
        """Row i becomes a copy of row source[i] (one row per sentence -> one per beam)."""
        widened = [np.empty((len(b), len(source), *b.shape[2:]), np.float32) for b in self.buffers]
        for new, old in zip(widened, self.buffers):
            new[: self.length] = old[: self.length, source]
        self.buffers = widened

    def reorder(self, rows: np.ndarray, moved: np.ndarray) -> None:
        for buffer in self.buffers:
            filled = buffer[: self.length]
            if len(moved) > len(rows) // 2:
                filled[:] = filled[:, rows]
            elif len(moved):
                filled[:, moved] = filled[:, rows[moved]]


class _CachedRun:
    def __init__(self, decoder: CachedDecoder, hidden: np.ndarray, mask: np.ndarray):
        self.d, self.hidden, self.mask = decoder, hidden, mask
        self.self_kv: list[np.ndarray] | None = None  # with time-major keys, only its values are the cache
        self.cross_kv: list[np.ndarray] = []
        self.keys: _TimeMajorKeys | None = None
        self.widen = 1  # > 1: one row per sentence so far; the first reorder repeats each for its beams

    @property
    def narrow_first(self) -> bool:
        """beam_search feeds the first step one row per sentence (decoding.Run)."""
        return self.widen > 1

    def step(self, tokens: np.ndarray) -> np.ndarray:
        d = self.d
        ids = tokens.reshape(-1, 1).astype(np.int64, copy=False)
        if self.self_kv is None:
            feeds = {"input_ids": ids, "encoder_hidden_states": self.hidden, "encoder_attention_mask": self.mask}
            if d.merged:
                empty = np.zeros((ids.shape[0], d.heads, 0, d.head_dim), dtype=np.float32)
                feeds.update({name: empty for name in d.past_names}, use_cache_branch=np.array([False]))
            logits, *present = d.first.run(d.first_outputs, feeds)
            self.self_kv = [t for i, t in enumerate(present) if i % 4 < 2]
            self.cross_kv = [t for i, t in enumerate(present) if i % 4 >= 2]  # computed once, reused every step
        else:
            feeds = {"input_ids": ids, "encoder_attention_mask": self.mask}
            for layer in range(d.layers):
                key = self.keys.past(layer) if self.keys is not None else self.self_kv[2 * layer]
                feeds[d.past_names[4 * layer]], feeds[d.past_names[4 * layer + 1]] = key, self.self_kv[2 * layer + 1]
                feeds[d.past_names[4 * layer + 2]], feeds[d.past_names[4 * layer + 3]] = self.cross_kv[2 * layer : 2 * layer + 2]
            if d.merged:
                feeds.update(encoder_hidden_states=self.hidden, use_cache_branch=np.array([True]))
            logits, *self.self_kv = d.with_past.run(d.step_outputs, feeds)
            if self.keys is not None:
                self.keys.append(self.self_kv[0::2])
        return logits[:, -1, :]

    def reorder(self, rows: np.ndarray) -> None:
        # Beams only move within their sentence, whose rows share one source: cross K/V need no reorder.
        # Most rows keep their beam after the first steps (78% at opus-mt scale, batch 8, beam 4), and the
        # cache copy is memory-bound: only the moved rows are copied, in place.
        if self.widen > 1:  # the first step ran one row per sentence: row i continues sentence rows[i] // beams
            source, self.widen = rows // self.widen, 1
            self.mask, self.self_kv = self.mask[source], [kv[source] for kv in self.self_kv]
            if not self.d.shared_cross:
                self.cross_kv = [kv[source] for kv in self.cross_kv]
            if self.keys is not None:
                self.keys.widen(source)
            return
        moved = np.flatnonzero(rows != np.arange(len(rows)))
        cached = range(len(self.self_kv))
        if self.keys is not None:  # the keys live in the buffer; self_kv's keys are only the last step's
            self.keys.reorder(rows, moved)
            cached = cached[1::2]
        for i in cached:
            if len(moved) > len(rows) // 2:
                self.self_kv[i] = self.self_kv[i][rows]
            elif len(moved):
                self.self_kv[i][moved] = self.self_kv[i][rows[moved]]


class NoCacheDecoder:
    """The baseline: translation_step.onnx re-runs encoder and the whole decoder prefix at every step."""

    def __init__(self, step: ort.InferenceSession):
        self.session = step

    def begin(self, input_ids: np.ndarray, attention_mask: np.ndarray, expand: int = 1) -> "_NoCacheRun":
        if expand > 1:
            input_ids, attention_mask = np.repeat(input_ids, expand, axis=0), np.repeat(attention_mask, expand, axis=0)
        return _NoCacheRun(self.session, input_ids, attention_mask)


class _NoCacheRun:
    def __init__(self, session: ort.InferenceSession, input_ids: np.ndarray, mask: np.ndarray):
        self.session, self.input_ids, self.mask = session, input_ids, mask
        self.prefix = np.zeros((input_ids.shape[0], 0), dtype=np.int64)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        self.prefix = np.concatenate([self.prefix, tokens.reshape(-1, 1).astype(np.int64)], axis=1)
        feeds = {"input_ids": self.input_ids, "attention_mask": self.mask, "decoder_input_ids": self.prefix}
        return self.session.run(["logits"], feeds)[0][:, -1, :]

    def reorder(self, rows: np.ndarray) -> None:
        self.prefix = self.prefix[rows]
