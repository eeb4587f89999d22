"""`InPlaceRun`: decoding on the in-place step (mtonnx.passes.inplace_attention), whose self-attention caches are
buffers this run owns and binds to ONNX Runtime as both past input and present output (IO binding): the step
writes each new key and value into them and reads the filled prefix, so no step copies the cache.

Every layer's key and value buffer is one slice of a single [2 x layers, rows, heads, capacity, head_dim] array, so
growing, reordering and gathering rows is one numpy call for all of them; the capacity doubles when full (one copy).
Beam search reorders rows in place (only the rows that moved, only the filled positions), and widening to the beams
or dropping retired sentences allocates a new array, copies the filled positions and binds it again. The search
head (passes.search_head) runs on the run's own logits array through IO binding too, into top-k arrays it owns.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from mtonnx.runtime import layout
from mtonnx.runtime.decoders import CachedDecoder, CachedRun

CAPACITY = 32  # positions a new run's buffers hold before their first doubling


class InPlaceDecoder(CachedDecoder):
    """The lean layout's encoder and cross K/V file with the in-place step (layout.INPLACE_STEP)."""

    def begin(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, expand: int = 1, grouped: bool = True
    ) -> InPlaceRun:
        """Run the encoder (`grouped`: CachedDecoder.encode) and the cross K/V on a batch, one row per sentence; the
        first reorder widens to `expand` rows (beams) per sentence."""
        run = InPlaceRun(self, attention_mask, self.cross_attention_kv(input_ids, attention_mask, grouped))
        run.widen = expand
        return run


class InPlaceRun(CachedRun):
    """One batch on the in-place step: cross K/V per sentence (decoder_cross_kv), self K/V in bound buffers."""

    def __init__(self, decoder: CachedDecoder, mask: np.ndarray, cross: list[np.ndarray]):
        super().__init__(decoder, None, mask)
        self.cross = dict(zip(layout.past_names(decoder.layers, layout.CROSS), cross))
        self.length = 0  # positions filled in every buffer
        self.binding = decoder.with_past.io_binding()
        self.head_binding = decoder.head.io_binding() if decoder.head is not None else None
        self.top: tuple[np.ndarray, np.ndarray] | None = None  # the search head's outputs, bound
        names = layout.past_names(decoder.layers, layout.SELF)
        self._allocate(_buffer((len(names), len(mask), decoder.heads, CAPACITY, decoder.head_dim)))

    def _allocate(self, kv: np.ndarray) -> None:
        """Bind each slice of `kv` (layout.past_names(layers, SELF) order along its first axis) as past and
        present, a logits array of the rows' size as output, and every input that is fixed until the rows change."""
        names = layout.past_names(self.decoder.layers, layout.SELF)
        self.kv = kv
        self.values = [ort.OrtValue.ortvalue_from_numpy(b) for b in kv]  # keeps the bound memory alive
        b = self.binding
        b.clear_binding_inputs()
        b.clear_binding_outputs()
        for past, present, value in zip(names, layout.present_names(self.decoder.layers, layout.SELF), self.values):
            b.bind_ortvalue_input(past, value)
            b.bind_ortvalue_output(present, value)
        self.logits = np.empty((len(self.mask), 1, self.vocab), np.float32) if self.vocab else None
        if self.logits is None:  # a graph without a static vocabulary: ORT allocates, step copies
            b.bind_output("logits")
        else:  # the step writes the logits into this run's own array
            self.logits_value = ort.OrtValue.ortvalue_from_numpy(self.logits)
            b.bind_ortvalue_output("logits", self.logits_value)
        self.fixed = {"encoder_attention_mask": self.mask, **self.cross, **self.columns}
        for name, array in self.fixed.items():
            b.bind_cpu_input(name, array)
        rows = len(self.mask)  # each step writes its token, filled lengths and total into these bound arrays
        self.ids, self.seqlens, self.total = (
            np.zeros((rows, 1), np.int64),
            np.zeros(rows, np.int32),
            np.zeros((), np.int32),
        )
        self.step_values = [ort.OrtValue.ortvalue_from_numpy(a) for a in (self.ids, self.seqlens, self.total)]
        for name, value in zip(("input_ids", *layout.INPLACE_INPUTS), self.step_values):
            b.bind_ortvalue_input(name, value)
        self.top = None

    def step_top(self, tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """As CachedRun.step_top, with the head's input and outputs bound: the arrays returned are the run's own,
        overwritten by the next call (beam search reads them within the step)."""
        if self.logits is None:
            return super().step_top(tokens, k)
        self.step(tokens)
        rows = len(self.logits)
        if self.top is None or self.top[0].shape != (rows, k):
            self.top = np.empty((rows, k), np.float32), np.empty((rows, k), np.int64)
            b = self.head_binding
            b.clear_binding_inputs()
            b.clear_binding_outputs()
            self.head_arrays = (self.logits[:, 0, :], np.array([k], np.int64), *self.top)  # alive while bound
            self.head_values = [ort.OrtValue.ortvalue_from_numpy(a) for a in self.head_arrays]
            for name, value in zip(("logits", layout.HEAD_TOP_K), self.head_values):
                b.bind_ortvalue_input(name, value)
            for name, value in zip(layout.HEAD_OUTPUTS, self.head_values[2:]):
                b.bind_ortvalue_output(name, value)
        self.decoder.head.run_with_iobinding(self.head_binding)
        return self.top

    def feed_columns(self, columns: dict[str, np.ndarray]) -> None:
        """As CachedRun.feed_columns; the logits array takes the columns' width and they are bound."""
        super().feed_columns(columns)
        self._allocate(self.kv)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Feed one token per row; the step's logits, [rows, vocab]."""
        if self.length == self.kv.shape[3]:
            bigger = _buffer((*self.kv.shape[:3], 2 * self.kv.shape[3], self.kv.shape[4]))
            bigger[:, :, :, : self.length] = self.kv
            self._allocate(bigger)
        self.ids[:, 0] = tokens
        self.seqlens[:] = self.length  # GroupQueryAttention's seqlens_k: the total length less one
        self.total[()] = self.length + 1
        self.decoder.with_past.run_with_iobinding(self.binding)
        self.length += 1
        if self.logits is not None:
            return self.logits[:, -1, :]
        return self.binding.get_outputs()[-1].numpy()[:, -1, :].copy()

    def reorder(self, rows: np.ndarray) -> None:
        """Row i continues row rows[i]; fewer rows: retired sentences leave (cross K/V are per sentence)."""
        if self.widen > 1:  # the first step ran one row per sentence
            self._gather(rows // self.widen, sentences=rows[:: self.widen] // self.widen)
            self.widen = 1
            return
        held = len(self.mask)
        if len(rows) < held:
            beams = held // len(next(iter(self.cross.values())))
            self._gather(rows, sentences=rows[::beams] // beams)
            return
        moved = np.flatnonzero(rows != np.arange(len(rows)))
        if len(moved):  # only the rows that moved, even when most did: the others' bytes stay where they are
            self.kv[:, moved, :, : self.length] = self.kv[:, rows[moved], :, : self.length]

    def _gather(self, source: np.ndarray, sentences: np.ndarray) -> None:
        """Row i becomes a copy of row source[i]; the cross K/V keep the rows of `sentences`."""
        self.mask = self.mask[source]
        if len(sentences) < len(next(iter(self.cross.values()))):
            self.cross = {name: array[sentences] for name, array in self.cross.items()}
        kv = _buffer((len(self.kv), len(source), *self.kv.shape[2:]))
        kv[:, :, :, : self.length] = self.kv[:, source, :, : self.length]  # the filled positions only
        self._allocate(kv)


def _buffer(shape: tuple[int, ...]) -> np.ndarray:
    """Cache memory, uninitialised: GroupQueryAttention reads only the filled positions (tested with NaN-filled
    buffers), so zeroing them would be time spent on values nothing reads."""
    return np.empty(shape, np.float32)
