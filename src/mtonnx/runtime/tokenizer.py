"""Marian tokenization with sentencepiece and vocab.json only, identical to transformers' MarianTokenizer.

Written by hand so the runtime needs neither torch nor transformers: importing transformers costs seconds
and hundreds of MB; this needs the two .spm files and vocab.json (notebook 05 measures both). Behaviour
copied from MarianTokenizer: a leading `>>lang<<` code is kept whole, the rest goes through the source
sentencepiece model, pieces map through the joint vocab (unknown -> <unk>), `</s>` is appended; decoding
drops special ids and joins pieces with the target sentencepiece model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import sentencepiece as spm


class MarianSpmTokenizer:
    """Encode English batches to padded int64 arrays; decode generated ids to Chinese text."""

    def __init__(self, directory: str | Path):
        directory = Path(directory)
        config = _json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() else {}
        self.encoder: dict[str, int] = _json(directory / "vocab.json")
        self.decoder = {i: token for token, i in self.encoder.items()}
        self.source, self.target = (_spm(directory / name) for name in ("source.spm", "target.spm"))
        self.eos_token = config.get("eos_token", "</s>")
        self.unk_token = config.get("unk_token", "<unk>")
        self.pad_token = config.get("pad_token", "<pad>")
        self.model_max_length = int(config.get("model_max_length", 512))
        missing = [t for t in (self.eos_token, self.unk_token, self.pad_token) if t not in self.encoder]
        if missing:
            raise ValueError(f"vocab.json has no entry for {', '.join(missing)}")
        self.eos_token_id, self.unk_token_id = self.encoder[self.eos_token], self.encoder[self.unk_token]
        self.pad_token_id = self.encoder[self.pad_token]
        self.special_tokens = (self.eos_token, self.unk_token, self.pad_token)
        self.special_ids = frozenset(self.encoder[t] for t in self.special_tokens)
        self._special = re.compile("(" + "|".join(re.escape(t) for t in self.special_tokens) + ")")

    @property
    def vocab_size(self) -> int:
        """Entries of vocab.json (= the logits width of a matching export)."""
        return len(self.encoder)

    def tokenize(self, text: str) -> list[str]:
        """Pieces of one text: special tokens kept whole, a leading >>lang<< code kept whole, the rest spm."""
        pieces: list[str] = []
        for chunk in self._special.split(text):
            if chunk in self.special_tokens:
                pieces.append(chunk)
            elif chunk:
                if chunk.startswith(">>") and (end := chunk.find("<<")) != -1:
                    pieces.append(chunk[: end + 2])
                    chunk = chunk[end + 2 :]
                pieces += self.source.encode(chunk, out_type=str)
        return pieces

    def encode(self, text: str) -> list[int]:
        """Token ids of one text, ending with eos."""
        return [self.encoder.get(p, self.unk_token_id) for p in self.tokenize(text)] + [self.eos_token_id]

    def batch(self, texts: list[str], source_prefix: str = "") -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), right-padded with pad to the longest text, int64."""
        return pad([self.encode(f"{source_prefix} {t}".strip()) for t in texts], self.pad_token_id)

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, special tokens skipped (MarianTokenizer's skip_special_tokens=True)."""
        tokens = [self.decoder.get(i, self.unk_token) for i in ids if i not in self.special_ids]
        return self.target.decode_pieces(tokens).replace("\u2581", " ").strip()


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path.name} is not valid JSON ({err})") from None


def _spm(path: Path) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as err:
        raise ValueError(
            f"{path.name} cannot be loaded by sentencepiece ({' '.join(str(err).split())[:120]})"
        ) from None


def pad(rows: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id lists into (input_ids, attention_mask) int64 arrays."""
    width = max((len(r) for r in rows), default=0)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    return ids, mask
