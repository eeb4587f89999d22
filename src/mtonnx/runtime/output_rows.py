"""A variant whose logits cover only some vocabulary rows (layout.OUTPUT_ROWS lists their vocab.json ids): the
decoding loop works on logits columns, so the ids it is given and the ids it returns go through this map.

Why: the lm_head reads d_model x vocabulary weights every step and beam search scores every column, while the
target sentencepiece model emits only part of a joint vocabulary (hsk-enzh: 2,500 of 4,498 rows, special tokens
included). Columns keep their order, so ties break the same way and a sentence whose tokens were all kept decodes
to the same ids.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from mtonnx.runtime import layout
from mtonnx.runtime.decoding import GenerationSettings, Run


class OutputRows:
    """The vocab.json id of each logits column (`ids`, ascending) and the column of each kept id."""

    def __init__(self, ids: list[int] | np.ndarray):
        self.ids = np.asarray(ids, dtype=np.int64)
        if self.ids.ndim != 1 or len(self.ids) == 0 or (np.diff(self.ids) <= 0).any() or self.ids[0] < 0:
            raise ValueError("output rows must be a non-empty, strictly ascending list of vocabulary ids")

    def column(self, i: int) -> int | None:
        """The logits column of vocabulary id `i`, None if it has none (a binary search: built per batch for a
        shortlist, the map is never materialized)."""
        c = int(np.searchsorted(self.ids, i))
        return c if c < len(self.ids) and self.ids[c] == i else None

    @classmethod
    def from_dir(cls, directory: str | Path) -> OutputRows | None:
        """The directory's restriction, or None when its logits cover the whole vocabulary."""
        path = Path(directory) / layout.OUTPUT_ROWS
        return cls(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None

    def __len__(self) -> int:
        return len(self.ids)

    def settings(self, s: GenerationSettings) -> GenerationSettings:
        """`s` with its token ids as logits columns; a banned id that has no column needs no ban."""
        needed = {
            "decoder_start_token_id": s.decoder_start_token_id,
            "eos_token_id": s.eos_token_id,
            "pad_token_id": s.pad_token_id,
            **{
                name: getattr(s, name)
                for name in ("forced_eos_token_id", "forced_bos_token_id")
                if getattr(s, name) is not None
            },
        }
        columns = {name: self.column(i) for name, i in needed.items()}
        missing = [f"{name} {needed[name]}" for name, c in columns.items() if c is None]
        if missing:
            raise ValueError(f"{layout.OUTPUT_ROWS} leaves out {', '.join(missing)}: the restriction must keep them")
        bad = tuple(c for c in map(self.column, s.bad_token_ids) if c is not None)
        return replace(s, **columns, bad_token_ids=bad)

    def run(self, run: Run) -> Run:
        """`run` fed vocabulary ids for the columns the decoding loop picks."""
        return _MappedRun(run, self.ids)

    def vocabulary_ids(self, rows: list[list[int]]) -> list[list[int]]:
        """Generated columns back to vocab.json ids."""
        return [self.ids[row].tolist() for row in rows]


class _MappedRun:
    """A decoding.Run whose step takes logits columns and feeds the decoder their vocabulary ids."""

    def __init__(self, run: Run, ids: np.ndarray):
        self._run, self._ids = run, ids

    @property
    def narrow_first(self) -> bool:
        return getattr(self._run, "narrow_first", False)

    @property
    def has_head(self) -> bool:
        return getattr(self._run, "has_head", False)

    @property
    def vocab(self) -> int | None:
        return getattr(self._run, "vocab", None)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        return self._run.step(self._ids[tokens])

    def step_top(self, tokens: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
        return self._run.step_top(self._ids[tokens], k)

    def reorder(self, rows: np.ndarray) -> None:
        self._run.reorder(rows)
