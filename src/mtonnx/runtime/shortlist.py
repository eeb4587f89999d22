"""A shortlisted variant (layout.SHORTLIST): a batch decodes over the target pieces always kept plus those its
source pieces bring, not the whole vocabulary, as Marian's `--shortlist` and CTranslate2's vocabulary map do (both
take the union over the batch, as here; a batch of one is a shortlist per sentence).

The decoders take the lm_head's weight and bias columns as inputs (passes.output_rows.columns_as_inputs): per batch
the runtime cuts the union's columns out of layout.HEAD_COLUMNS and feeds them at every step, so a step reads
columns x d_model lm_head weights instead of vocabulary x d_model, and the decoding loop works on those columns
through an OutputRows map. A kept column's logit is the full model's number; a token off the list cannot be
chosen, and beam scores are normalized over the list only: lossy, so a shortlist goes through the quality gate.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mtonnx.runtime import layout
from mtonnx.runtime.output_rows import OutputRows


class Shortlist:
    """Target ids kept for every batch (`always`), the target ids each source id brings (`by_source`), and the
    lm_head arrays (layout.HEAD_COLUMN_INPUTS: weight [d_model, vocab], bias [1, vocab]) the columns are cut from."""

    def __init__(self, always: list[int], by_source: dict[int, list[int]], head: dict[str, np.ndarray]):
        weight, bias = (head[name] for name in layout.HEAD_COLUMN_INPUTS)
        self.vocab = weight.shape[-1]
        if weight.ndim != 2 or bias.shape[-1] != self.vocab:
            raise ValueError(f"the lm_head arrays do not agree: weight {weight.shape}, bias {bias.shape}")
        self.always = _ids(always, self.vocab, "always")
        self._table = [np.zeros(0, np.int64)] * self.vocab  # source id -> the target ids it brings
        for source, targets in by_source.items():
            if not 0 <= int(source) < self.vocab:
                raise ValueError(f"source id {source} is outside the {self.vocab}-entry vocabulary")
            self._table[int(source)] = _ids(targets, self.vocab, f"by_source[{source}]")
        self.weight, self.bias = weight, bias

    @classmethod
    def from_dir(cls, directory: str | Path) -> Shortlist | None:
        """The directory's shortlist, or None when it has none (ValueError or OSError for a broken one)."""
        path = Path(directory) / layout.SHORTLIST
        if not path.is_file():
            return None
        table = json.loads(path.read_text(encoding="utf-8"))
        with np.load(Path(directory) / layout.HEAD_COLUMNS) as head:
            arrays = {name: head[name] for name in layout.HEAD_COLUMN_INPUTS}
        return cls(table["always"], {int(k): v for k, v in table["by_source"].items()}, arrays)

    def rows(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> OutputRows:
        """The columns a batch decodes over: `always` and every list its (unpadded) source ids bring."""
        sources = np.unique(input_ids[attention_mask.astype(bool)])
        return OutputRows(np.unique(np.concatenate([self.always, *(self._table[s] for s in sources)])))

    def feeds(self, rows: OutputRows) -> dict[str, np.ndarray]:
        """The lm_head inputs for `rows`: the weight's and the bias's columns, contiguous."""
        weight, bias = layout.HEAD_COLUMN_INPUTS
        return {weight: np.take(self.weight, rows.ids, axis=-1), bias: np.take(self.bias, rows.ids, axis=-1)}


def _ids(values: list[int], vocab: int, what: str) -> np.ndarray:
    ids = np.asarray(values, dtype=np.int64).reshape(-1)
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"{what} lists an id outside the {vocab}-entry vocabulary")
    return ids
