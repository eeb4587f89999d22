"""A Marian model's tokenizer as one `tokenizer.json`: what Transformers.js and Rust `tokenizers` load.

MarianTokenizer has no fast version, and Transformers.js's own conversion merges the two sentencepiece vocabularies
and drops the normalizer (`precompiled_charsmap: null`), which Rust `tokenizers` then refuses. This one keeps what
sentencepiece does to the source text, in the order it does it:
- the normalizer: source.spm's precompiled charsmap (nmt_nfkc), then leading, trailing and repeated spaces removed;
- the pre-tokenizer: spaces become `▁`, one is put in front, the text is split before each `▁` (sentencepiece's
  split_by_whitespace);
- the added tokens: eos, unk, pad and, in a multilingual model, the `>>id<<` language codes, kept whole;
- the model: a Unigram over vocab.json's ids, in vocab.json's order, scored by source.spm. A piece only the
  target side has gets UNREACHABLE, far below any source path, so an uncovered character becomes `<unk>` as in
  sentencepiece (the ids exist for decoding).

What a tokenizer.json cannot say: sentencepiece gives a run of uncovered characters as one piece, and Marian looks
that surface up in vocab.json, so `世` in English text gets the target side's id for `世`. The JavaScript runtime
looks such surfaces up as Marian does (`js/src/tokenizer.mjs`); a loader that takes the file as it is gives
`<unk>`. Transformers.js also replaces the charsmap with NFKC of its own.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from sentencepiece import sentencepiece_model_pb2

SPACE = "\u2581"
LANGUAGE_CODE = re.compile(r">>[^<>\s]+<<")  # MarianTokenizer's target-language prefix
UNREACHABLE = -1.0e6  # a target-only piece's score: below any path of source pieces and <unk>s


def _model(path: Path) -> sentencepiece_model_pb2.ModelProto:
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    return proto


def marian_tokenizer_json(directory: str | Path) -> dict[str, Any]:
    """tokenizer.json's content for the Marian tokenizer files in `directory` (source.spm, target.spm, vocab.json,
    tokenizer_config.json)."""
    directory = Path(directory)
    source = _model(directory / "source.spm")
    if source.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        raise ValueError(f"{directory / 'source.spm'} is not a unigram sentencepiece model")
    vocab: dict[str, int] = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    names = {key: _content(config.get(key, default)) for key, default in SPECIALS.items()}
    scores = {
        p.piece: p.score for p in source.pieces if p.type == sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
    }
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise ValueError(f"{directory / 'vocab.json'}: the ids are not 0..{len(ids) - 1} without gaps")
    by_id = sorted(vocab, key=vocab.get)
    specials = [vocab[names[key]] for key in ("eos_token", "unk_token", "pad_token")]
    normalizers: list[dict[str, Any]] = []
    charsmap = source.normalizer_spec.precompiled_charsmap
    if charsmap:
        normalizers.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()})
    if source.normalizer_spec.remove_extra_whitespaces:
        normalizers += [
            {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]
    prepend = "always" if source.normalizer_spec.add_dummy_prefix else "never"
    metaspace = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": prepend, "split": True}
    eos = names["eos_token"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": by_id[i],
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": i in specials,  # a language code is not special: Marian's decode keeps it as text
            }
            for i in sorted([*specials, *(vocab[code] for code in language_codes(vocab))])
        ],
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": eos, "type_id": 0}}],
            "pair": [
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 0}},
                {"SpecialToken": {"id": eos, "type_id": 0}},
            ],
            "special_tokens": {eos: {"id": eos, "ids": [vocab[eos]], "tokens": [eos]}},
        },
        "decoder": metaspace,
        "model": {
            "type": "Unigram",
            "unk_id": vocab[names["unk_token"]],
            "vocab": [[piece, scores.get(piece, UNREACHABLE)] for piece in by_id],
            "byte_fallback": False,
        },
    }


SPECIALS = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


def _content(value: Any) -> str:
    """A special token's text (tokenizer_config.json holds a string or an AddedToken's dict)."""
    return value.get("content") if isinstance(value, dict) else value


def language_codes(vocab: dict[str, int]) -> list[str]:
    """The `>>id<<` target-language codes of a multilingual Marian vocabulary (none for a one-target model). They are
    added tokens of the tokenizer.json, so Transformers.js and Rust keep a leading code whole, as Marian does,
    instead of cutting it into pieces."""
    return sorted(piece for piece in vocab if LANGUAGE_CODE.fullmatch(piece))


def target_piece_ids(directory: str | Path) -> list[int]:
    """The vocab.json ids of target.spm's pieces: the ones target.spm decodes (any other id decodes to ` ⁇ `)."""
    directory = Path(directory)
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    target = _model(directory / "target.spm")
    return sorted(vocab[p.piece] for p in target.pieces if p.piece in vocab)
