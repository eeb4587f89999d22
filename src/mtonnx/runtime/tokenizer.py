"""Tokenization with sentencepiece and the tokenizer files only, identical to transformers' slow tokenizers of each
family (MarianTokenizer, M2M100Tokenizer, NllbTokenizer, T5Tokenizer).

Written by hand so the runtime needs neither torch nor transformers: importing transformers costs seconds and
hundreds of MB. What every one of them does, as transformers' PreTrainedTokenizer does
it: special tokens in the text are kept whole (the longest first; a token that strips the spaces beside it does),
the rest of the text goes through a sentencepiece model, the pieces become ids, the convention's prefix (a
source-language token) and suffix (eos) are added; decoding drops the special ids and joins the pieces. What
differs per convention (runtime.families) is where the ids come from:
- Marian: one joint vocab.json for the source.spm and target.spm pieces; a leading `>>lang<<` code kept whole;
- M2M100: vocab.json for the pieces, `__lang__` tokens after it, the source language's token first;
- NLLB: the sentencepiece id + 1, the special and language tokens where tokenizer_config.json puts them, the
  source language's code first;
- T5: the sentencepiece ids themselves, the sentinels `<extra_id_N>` after them.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import sentencepiece as spm

from mtonnx.runtime import families
from mtonnx.runtime.families import TokenizerConvention

SPIECE_UNDERLINE = "\u2581"


class SpmTokenizer:
    """Encode English batches to padded int64 arrays; decode generated ids to text. A subclass sets `encoder` (every
    piece and special token it knows -> id), the special tokens, `source` and `target` (the sentencepiece models of
    the source and the target text: one model for both but in Marian), `prefix_ids` and how pieces join into text."""

    convention: TokenizerConvention  # the subclass's default: a directory's own comes from load_tokenizer
    extra_specials: tuple[str, ...] = ()  # special tokens besides eos, unk and pad (a subclass's load sets them)

    def __init__(self, directory: str | Path, convention: TokenizerConvention | None = None):
        self.dir, self.convention = Path(directory), convention or self.convention
        self.config = families.read_json(self.dir / "tokenizer_config.json")
        self.eos_token = self._token("eos_token", "</s>")
        self.unk_token = self._token("unk_token", "<unk>")
        self.pad_token = self._token("pad_token", "<pad>")
        self.model_max_length = int(self.config.get("model_max_length", 512))
        self.clean_up = bool(self.config.get("clean_up_tokenization_spaces", False))
        self.strips: dict[str, tuple[bool, bool]] = {}  # special token -> (strips spaces on its left, on its right)
        self.prefix_ids: list[int] = []
        self.load()
        missing = [t for t in (self.eos_token, self.unk_token, self.pad_token) if t not in self.encoder]
        if missing:
            raise ValueError(f"{self.convention.files[0]} has no entry for {', '.join(missing)}")
        self.decoder = {i: token for token, i in self.encoder.items()}
        self.eos_token_id, self.unk_token_id = self.encoder[self.eos_token], self.encoder[self.unk_token]
        self.pad_token_id = self.encoder[self.pad_token]
        self.special_tokens = tuple(
            dict.fromkeys([self.eos_token, self.unk_token, self.pad_token, *self.extra_specials])
        )
        self._special_ids = {t: self.encoder[t] for t in self.special_tokens if t in self.encoder}
        self.special_ids = frozenset(self._special_ids.values())
        longest_first = sorted(self.special_tokens, key=len, reverse=True)
        self._special = re.compile("(" + "|".join(re.escape(t) for t in longest_first) + ")")

    def load(self) -> None:
        """Read the convention's files: set `encoder`, `source` and what else it needs."""
        raise NotImplementedError

    def _token(self, key: str, default: str) -> str:
        """A special token's text from tokenizer_config.json (a string, or an AddedToken's dict)."""
        value = self.config.get(key, default)
        return value.get("content", default) if isinstance(value, dict) else value

    def _added_tokens(self) -> dict[int, dict]:
        """tokenizer_config.json's added_tokens_decoder: id -> {content, lstrip, rstrip, special}."""
        added = {int(i): token for i, token in self.config.get("added_tokens_decoder", {}).items()}
        self.strips.update({t["content"]: (t.get("lstrip", False), t.get("rstrip", False)) for t in added.values()})
        return added

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer knows (a model's logits may be wider: rows padded to a round size)."""
        return max(self.encoder.values()) + 1

    def tokenize(self, text: str) -> list[str]:
        """Pieces of one text: special tokens kept whole (those that strip spaces strip them), the rest spm."""
        chunks = self._special.split(text)
        for i, chunk in enumerate(chunks):
            if chunk in self.strips:
                left, right = self.strips[chunk]
                if left and i > 0:
                    chunks[i - 1] = chunks[i - 1].rstrip()
                if right and i + 1 < len(chunks):
                    chunks[i + 1] = chunks[i + 1].lstrip()
        pieces: list[str] = []
        for i, chunk in enumerate(chunks):
            if i % 2:  # a separator the pattern captured: a special token
                pieces.append(chunk)
            elif chunk:
                pieces += self.pieces(chunk)
        return pieces

    def pieces(self, chunk: str) -> list[str]:
        """A stretch of text without special tokens as pieces."""
        return self.source.encode(chunk, out_type=str)

    def piece_id(self, piece: str) -> int:
        """The id of a piece (unk for a piece the vocabulary lacks)."""
        return self.encoder.get(piece, self.unk_token_id)

    def encode(self, text: str) -> list[int]:
        """Token ids of one text: the prefix (a source-language token), the pieces, eos."""
        specials = self._special_ids
        ids = [specials[p] if p in specials else self.piece_id(p) for p in self.tokenize(text)]
        return [*self.prefix_ids, *ids, self.eos_token_id]

    def batch(self, texts: list[str], source_prefix: str = "") -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), right-padded with pad to the longest text, int64."""
        return pad([self.encode(f"{source_prefix} {t}".strip()) for t in texts], self.pad_token_id)

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, special tokens skipped (transformers' skip_special_tokens=True)."""
        tokens = [self.decoder.get(i, self.unk_token) for i in ids if i not in self.special_ids]
        tokens = [t for t in tokens if t not in self.special_tokens]
        text = self.join(tokens) if tokens else ""
        return clean_up_tokenization(text) if self.clean_up else text

    def join(self, tokens: list[str]) -> str:
        """Pieces (no special token among them) as text."""
        return self.source.decode_pieces(tokens).strip()


class MarianSpmTokenizer(SpmTokenizer):
    """MarianTokenizer: source.spm for the source, target.spm to decode, one joint vocab.json; a leading `>>lang<<`
    code kept whole."""

    convention = families.MARIAN.tokenizers[0]

    def load(self) -> None:
        """vocab.json and the two sentencepiece models."""
        self.encoder = _json(self.dir / "vocab.json")
        self.source, self.target = (_spm(self.dir / name) for name in ("source.spm", "target.spm"))

    def pieces(self, chunk: str) -> list[str]:
        """A leading `>>lang<<` code kept whole, the rest through source.spm."""
        if chunk.startswith(">>") and (end := chunk.find("<<")) != -1:
            return [chunk[: end + 2], *(self.source.encode(chunk[end + 2 :], out_type=str) if chunk[end + 2 :] else [])]
        return self.source.encode(chunk, out_type=str)

    def join(self, tokens: list[str]) -> str:
        """target.spm joins the pieces."""
        return self.target.decode_pieces(tokens).replace(SPIECE_UNDERLINE, " ").strip()


class M2M100SpmTokenizer(SpmTokenizer):
    """M2M100Tokenizer: vocab.json for the pieces of sentencepiece.bpe.model, the `__lang__` tokens of its
    language_codes after them, the source language's token first."""

    convention = families.M2M100.tokenizers[0]

    def load(self) -> None:
        """vocab.json, the sentencepiece model and the language tokens."""
        self.encoder = _json(self.dir / "vocab.json")
        self.source = self.target = _spm(self.dir / "sentencepiece.bpe.model")
        codes = families.M2M100_LANGUAGES[self.config.get("language_codes", "m2m100")]
        size = len(self.encoder)
        languages = {self.convention.language_token.format(code): size + i for i, code in enumerate(codes)}
        self.encoder.update(languages)
        # As M2M100Tokenizer: a language token is special (kept whole in text, dropped from output) when the saved
        # files list it among additional_special_tokens, as the hub's do.
        listed = self.config.get("additional_special_tokens") or families.read_json(
            self.dir / "special_tokens_map.json"
        ).get("additional_special_tokens", [])
        listed = [t.get("content") if isinstance(t, dict) else t for t in listed]
        self.extra_specials = (self._token("bos_token", "<s>"), *(t for t in listed if t in languages))
        self.prefix_ids = [self._language_id(self.config.get("src_lang") or self.convention.source_language)]

    def _language_id(self, code: str) -> int:
        token = self.convention.language_token.format(code)
        if token not in self.encoder:
            raise ValueError(f"source language {code!r} has no token {token} in this tokenizer")
        return self.encoder[token]


class NllbSpmTokenizer(M2M100SpmTokenizer):
    """NllbTokenizer: the sentencepiece id + 1 (fairseq's order), the special and language tokens at the ids
    tokenizer_config.json's added_tokens_decoder gives them, the source language's code first."""

    convention = families.M2M100.tokenizers[1]

    OFFSET = 1  # fairseq's <s> <pad> </s> <unk> take 0-3 where sentencepiece has <unk> <s> </s>

    def load(self) -> None:
        """The sentencepiece model and the added tokens."""
        self.source = self.target = _spm(self.dir / "sentencepiece.bpe.model")
        added = self._added_tokens()
        if not added:
            raise ValueError(
                "tokenizer_config.json has no added_tokens_decoder (save the tokenizer with transformers 4.38+)"
            )
        self.encoder = {self.source.id_to_piece(i): i + self.OFFSET for i in range(1, self.source.get_piece_size())}
        self.encoder.update({token["content"]: i for i, token in added.items()})
        self.extra_specials = tuple(token["content"] for token in added.values() if token.get("special"))
        self.prefix_ids = [self._language_id(self.config.get("src_lang") or self.convention.source_language)]

    def piece_id(self, piece: str) -> int:
        """The sentencepiece id + 1; unk for a piece sentencepiece does not know."""
        spm_id = self.source.piece_to_id(piece)
        return spm_id + self.OFFSET if spm_id else self.unk_token_id

    def join(self, tokens: list[str]) -> str:
        """NllbTokenizer's join: the pieces concatenated, ▁ as spaces."""
        return "".join(tokens).replace(SPIECE_UNDERLINE, " ").strip()


class T5SpmTokenizer(SpmTokenizer):
    """T5Tokenizer (its legacy behaviour, the one t5-small's files select): the sentencepiece ids, the sentinels
    `<extra_id_N>` after them (they strip the spaces beside them)."""

    convention = families.T5.tokenizers[0]

    def load(self) -> None:
        """spiece.model and the sentinels."""
        if self.config.get("legacy") is False:
            raise ValueError(
                "tokenizer_config.json sets legacy false: only T5Tokenizer's legacy behaviour is supported"
            )
        self.source = self.target = _spm(self.dir / "spiece.model")
        self.encoder = {self.source.id_to_piece(i): i for i in range(self.source.get_piece_size())}
        added = self._added_tokens()
        self.encoder.update({token["content"]: i for i, token in added.items()})
        self.extra_specials = tuple(token["content"] for token in added.values() if token.get("special"))
        self.add_prefix_space = bool(self.config.get("add_prefix_space", True))

    def piece_id(self, piece: str) -> int:
        """The sentencepiece id (sentencepiece's own unk for a piece it does not know)."""
        return self.encoder[piece] if piece in self.encoder else self.source.piece_to_id(piece)

    def join(self, tokens: list[str]) -> str:
        """T5Tokenizer's join: the first piece's ▁ dropped, then sentencepiece."""
        if self.add_prefix_space and tokens[0].startswith(SPIECE_UNDERLINE):
            tokens = [tokens[0][1:], *tokens[1:]]
        return self.source.decode(tokens).strip()


TOKENIZERS: dict[str, type[SpmTokenizer]] = {
    "marian": MarianSpmTokenizer,
    "m2m100": M2M100SpmTokenizer,
    "nllb": NllbSpmTokenizer,
    "t5": T5SpmTokenizer,
}


def load_tokenizer(directory: str | Path) -> SpmTokenizer:
    """The tokenizer of a model or export directory, by its family and tokenizer_config.json's tokenizer_class."""
    _, convention = families.convention_of_dir(directory)
    return TOKENIZERS[convention.name](directory, convention)


def clean_up_tokenization(text: str) -> str:
    """transformers' clean_up_tokenization: no space before punctuation and English contractions."""
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't")):
        text = text.replace(before, after)
    for suffix in ("'m", "'s", "'ve", "'re"):
        text = text.replace(f" {suffix}", suffix)
    return text


def _json(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"{path.name} is missing")
    return families.read_json(path)


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
