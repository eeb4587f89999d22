"""Train Marian-style tokenizer files (source.spm, target.spm, vocab.json) on text the project owns.

A MarianTokenizer needs two sentencepiece models (English source, Chinese target) and one joint
vocab.json mapping pieces to model ids, laid out like opus-mt-en-zh's: `</s>` = 0, `<unk>` = 1,
the pieces, then `<pad>` last (pad = decoder_start). `MarianTokenizer.from_pretrained` then loads
the directory exactly as it loads the real model.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
# Target-language tokens as opus-mt-en-zh's vocab has them (the model card asks for >>cmn_Hans<<).
LANGUAGE_TOKENS = (">>cmn_Hans<<", ">>cmn_Hant<<", ">>yue_Hans<<", ">>yue_Hant<<", ">>zho_Hans<<", ">>zho_Hant<<")


def train_spm(texts: list[str], vocab_size: int, character_coverage: float) -> bytes:
    """A unigram sentencepiece model trained single-threaded (so the bytes are reproducible)."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=character_coverage,
        num_threads=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return buffer.getvalue()


def _pieces(model: bytes) -> list[str]:
    processor = spm.SentencePieceProcessor(model_proto=model)
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]


def write_marian_tokenizer(
    out_dir: Path,
    source_texts: list[str],
    target_texts: list[str],
    source_vocab: int,
    target_vocab: int,
    pad_vocab_to: int | None = None,
    model_max_length: int = 512,
) -> dict:
    """Write source.spm, target.spm, vocab.json and the tokenizer configs; returns the vocab facts.

    `pad_vocab_to` fills the joint vocab with unused entries up to that size (pad included), to
    reach a real model's vocabulary size with tokenizers trained on little text.
    """
    source = train_spm(source_texts, source_vocab, character_coverage=1.0)
    target = train_spm(target_texts, target_vocab, character_coverage=0.9995)
    (out_dir / "source.spm").write_bytes(source)
    (out_dir / "target.spm").write_bytes(target)

    tokens = [EOS, UNK, *LANGUAGE_TOKENS]
    seen = set(tokens)
    for piece in _pieces(source) + _pieces(target):
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
    if pad_vocab_to is not None:
        if pad_vocab_to < len(tokens) + 1:
            raise ValueError(f"pad_vocab_to={pad_vocab_to} is smaller than the {len(tokens) + 1} real entries")
        tokens += [f"<unused_{i}>" for i in range(pad_vocab_to - 1 - len(tokens))]
    tokens.append(PAD)
    vocab = {token: i for i, token in enumerate(tokens)}
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0), encoding="utf-8")

    config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": "en",
        "target_lang": "zh",
        "separate_vocabs": False,
        "model_max_length": model_max_length,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": PAD,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    special = {"eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2), encoding="utf-8")
    return {"vocab_size": len(vocab), "pad_id": vocab[PAD], "eos_id": vocab[EOS], "real_entries": len(seen)}
