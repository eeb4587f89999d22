"""The decoder's key/value cache between steps, named per layer and kind instead of indexed by position.

- `KVCache`: per layer the self-attention key and value (one position longer after every step) and the
  cross-attention key and value (projections of the source, fixed for a sentence).
- `TimeMajorKeys`: the tuned step's self-attention keys, one [capacity, rows, heads, head_dim] buffer per
  layer that each step appends one position to; the graph reads the filled prefix in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mtonnx.runtime import layout


@dataclass
class KVCache:
    """Every layer's cache tensors, [rows, heads, length, head_dim] each (cross: per sentence when shared)."""

    self_keys: list[np.ndarray]
    self_values: list[np.ndarray]
    cross_keys: list[np.ndarray]
    cross_values: list[np.ndarray]

    @classmethod
    def from_present(cls, present: list[np.ndarray]) -> KVCache:
        """From decoder_model's present outputs (layout.present_names order: all four kinds per layer)."""
        kinds = layout.by_kind(present)
        return cls(*(kinds[kind] for kind in layout.KV))

    @classmethod
    def empty_self(cls, cross: list[np.ndarray], rows: int, heads: int, head_dim: int) -> KVCache:
        """An empty self-attention past (the lean layouts' first step) beside the cross K/V of decoder_cross_kv
        (layout.present_names(layers, CROSS) order)."""
        kinds = layout.by_kind(cross, layout.CROSS)
        empty = [np.zeros((rows, heads, 0, head_dim), np.float32)] * len(kinds[layout.CROSS_KEY])
        return cls(empty, list(empty), kinds[layout.CROSS_KEY], kinds[layout.CROSS_VALUE])

    @property
    def layers(self) -> int:
        """Decoder layers held."""
        return len(self.self_keys)

    def update_self(self, present_self: list[np.ndarray]) -> None:
        """Take decoder_with_past's outputs (layout.present_names(layers, SELF) order) as the new self K/V."""
        kinds = layout.by_kind(present_self, layout.SELF)
        self.self_keys, self.self_values = kinds[layout.SELF_KEY], kinds[layout.SELF_VALUE]

    def tensors(self, self_keys: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """All tensors in layout.past_names order; `self_keys` replaces the stored keys (a time-major buffer)."""
        keys = self.self_keys if self_keys is None else self_keys
        return [t for layer in zip(keys, self.self_values, self.cross_keys, self.cross_values) for t in layer]

    def select(self, rows: np.ndarray, cross: bool = True) -> None:
        """Keep rows `rows` (any order, repeats allowed) of every self tensor, and of the cross ones if `cross`."""
        self.self_keys = [k[rows] for k in self.self_keys]
        self.self_values = [v[rows] for v in self.self_values]
        if cross:
            self.select_cross(rows)

    def select_cross(self, rows: np.ndarray) -> None:
        """Keep rows `rows` of every cross tensor (per sentence when shared: the sentences that go on)."""
        self.cross_keys = [k[rows] for k in self.cross_keys]
        self.cross_values = [v[rows] for v in self.cross_values]


def reorder_rows(tensors: list[np.ndarray], rows: np.ndarray, moved: np.ndarray) -> list[np.ndarray]:
    """Row i of each tensor becomes row rows[i]. The copy is memory-bound and most beams keep their row after
    the first steps, so only the rows that moved are copied, in place, unless most did."""
    if len(moved) > len(rows) // 2:
        return [tensor[rows] for tensor in tensors]
    for tensor in tensors if len(moved) else ():
        tensor[moved] = tensor[rows[moved]]
    return tensors


class TimeMajorKeys:
    """Each layer's self-attention keys as one [capacity, rows, heads, head_dim] buffer: a step appends one
    position (the buffer doubles when full) and feeds the filled prefix, a contiguous view: no copy per step."""

    def __init__(self, layers: int, rows: int, heads: int, head_dim: int, capacity: int = 32):
        self.buffers = [np.empty((capacity, rows, heads, head_dim), np.float32) for _ in range(layers)]
        self.length = 0

    def pasts(self) -> list[np.ndarray]:
        """The filled prefix of every layer's buffer, [length, rows, heads, head_dim]."""
        return [buffer[: self.length] for buffer in self.buffers]

    def append(self, new: list[np.ndarray]) -> None:
        """One [rows, heads, 1, head_dim] key per layer."""
        if self.length == len(self.buffers[0]):
            self.buffers = [np.concatenate([b, np.empty_like(b)]) for b in self.buffers]
        for buffer, key in zip(self.buffers, new):
            buffer[self.length] = key[:, :, 0, :]
        self.length += 1

    def widen(self, source: np.ndarray) -> None:
        """Row i becomes a copy of row source[i] (one row per sentence -> one per beam, or retired rows leave)."""
        widened = [np.empty((len(b), len(source), *b.shape[2:]), np.float32) for b in self.buffers]
        for new, old in zip(widened, self.buffers):
            new[: self.length] = old[: self.length, source]
        self.buffers = widened

    def reorder(self, rows: np.ndarray, moved: np.ndarray) -> None:
        """As `reorder_rows`, along the rows axis of each buffer, in place."""
        for filled in self.pasts():
            if len(moved) > len(rows) // 2:
                filled[:] = filled[:, rows]
            elif len(moved):
                filled[:, moved] = filled[:, rows[moved]]
