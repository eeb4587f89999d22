"""`SearchGraph`: translate with the search inside the graph (mtonnx.passes.search_graph's BeamSearch model), one
`session.run` per batch instead of one per step. Torch-free, as the rest of the runtime.

Not `generate`'s rules in two places (the lab counts the eval sentences where they change the tokens):
- ORT's beam scorer is its own (BeamHypotheses): a few beam-search translations pick another hypothesis;
- the op has no greedy for encoder-decoders (GreedySearch takes GPT-2 only): one beam is ORT's beam search of
  width 1, not greedy (an eos does not end the search, and its scorer may prefer a longer ending);
and it has no forced_eos_token_id: a sentence that reaches max_length ends without eos.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mtonnx.runtime import layout
from mtonnx.runtime.decoding import GenerationSettings
from mtonnx.runtime.sessions import SessionSettings, make_session
from mtonnx.runtime.translator import ModelDirError


class SearchGraph:
    """A directory holding layout.SEARCH_MODEL and generation_config.json (mtonnx.passes.search_graph writes it);
    `generate` as Translator.generate."""

    def __init__(self, model_dir: str | Path, session: SessionSettings = SessionSettings()):
        self.dir = Path(model_dir)
        if not (self.dir / layout.SEARCH_MODEL).is_file():
            raise ModelDirError(
                f"{self.dir / layout.SEARCH_MODEL} not found: build it from a variant's split files with "
                "mtonnx.passes.search_graph.build_search_model(variant_dir, out_dir) (mtonnx bench writes "
                "<run>/search/int8)"
            )
        self.settings = GenerationSettings.from_dir(self.dir)
        self.session = make_session(self.dir / layout.SEARCH_MODEL, session)

    def generate(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        min_length: int | None = None,
    ) -> list[list[int]]:
        """Token ids per row up to and including eos (none where the row reached max_new_tokens)."""
        s = self.settings.with_options(num_beams=num_beams, max_new_tokens=max_new_tokens)
        one = lambda value, kind=np.int32: np.array([value], kind)  # noqa: E731
        feeds = {
            "input_ids": input_ids.astype(np.int32),
            "attention_mask": attention_mask.astype(np.int32),
            "max_length": one(s.max_length),
            "min_length": one(s.min_length if min_length is None else min_length),
            "num_beams": one(s.num_beams),
            "num_return_sequences": one(1),
            "length_penalty": one(s.length_penalty, np.float32),
            "repetition_penalty": one(1.0, np.float32),
        }
        sequences = self.session.run(["sequences"], feeds)[0][:, 0, 1:]  # the decoder start token dropped
        limit = s.max_length - 1
        return [_ended(row, s.pad_token_id, s.eos_token_id, limit) for row in sequences.tolist()]


def _ended(row: list[int], pad: int, eos: int, limit: int) -> list[int]:
    """The op pads each row after its last token and leaves eos out: a row shorter than the limit ended at eos."""
    tokens = row[: row.index(pad)] if pad in row else row
    return tokens + [eos] if len(tokens) < limit else tokens
