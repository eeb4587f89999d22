"""Train tokenizer files on text the project owns, for each family's tokenizer (runtime.families).

- Marian: two sentencepiece models (English source, Chinese target) and one joint vocab.json mapping pieces to model
  ids, laid out like opus-mt-en-zh's: `</s>` = 0, `<unk>` = 1, the pieces, then `<pad>` last (pad = decoder_start);
- M2M100, NLLB, T5: one sentencepiece model for both languages, with the ids each convention expects, written by
  transformers' own tokenizer class (M2M100Tokenizer, NllbTokenizer, T5Tokenizer) so its files are the library's.

`from_pretrained` then loads each directory exactly as it loads the real model's.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm

from mtonnx.runtime.families import TokenizerConvention

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
# Target-language tokens as opus-mt-en-zh's vocab has them (the model card asks for >>cmn_Hans<<).
LANGUAGE_TOKENS = (">>cmn_Hans<<", ">>cmn_Hant<<", ">>yue_Hans<<", ">>yue_Hant<<", ">>zho_Hans<<", ">>zho_Hant<<")


def train_spm(texts: list[str], vocab_size: int, character_coverage: float, **special_ids: int) -> bytes:
    """A unigram sentencepiece model trained single-threaded (so the bytes are reproducible); `special_ids` places
    its control pieces (e.g. T5's pad_id=0, eos_id=1, unk_id=2, bos_id=-1)."""
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
        **special_ids,
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


# Chinese needs the coverage below 1 (rare characters become <unk>), English texts are covered whole.
JOINT_COVERAGE = 0.9995


def write_m2m100_tokenizer(
    out_dir: Path, texts: list[str], vocab_size: int, model_max_length: int, convention: TokenizerConvention
) -> dict:
    """sentencepiece.bpe.model for both languages and the convention's files, written by transformers' own class:
    M2M100Tokenizer (vocab.json: <s> <pad> </s> <unk> then the pieces; `__lang__` tokens after it, listed as
    special as the hub's files list them) or NllbTokenizer (the sentencepiece ids + 1; the language codes as added
    tokens). Returns the vocab facts."""
    import transformers

    from mtonnx.runtime.families import M2M100_LANGUAGES

    model = train_spm(texts, vocab_size, JOINT_COVERAGE)
    spm_file = out_dir / "sentencepiece.bpe.model"
    spm_file.write_bytes(model)
    languages = {"src_lang": convention.source_language, "tgt_lang": convention.target_language}
    cls = getattr(transformers, convention.classes[0])
    if convention.name == "m2m100":
        vocab = {token: i for i, token in enumerate(("<s>", PAD, EOS, UNK))}
        for piece in _pieces(model):
            vocab.setdefault(piece, len(vocab))
        vocab_file = out_dir / "vocab.json"
        vocab_file.write_text(json.dumps(vocab, ensure_ascii=False, indent=0), encoding="utf-8")
        codes = M2M100_LANGUAGES["m2m100"]
        tokens = [convention.language_token.format(code) for code in codes]
        tokenizer = cls(
            str(vocab_file),
            str(spm_file),
            additional_special_tokens=tokens,
            model_max_length=model_max_length,
            **languages,
        )
    else:
        tokenizer = cls(str(spm_file), model_max_length=model_max_length, **languages)
    tokenizer.save_pretrained(out_dir)
    return _facts(tokenizer, convention)


def write_t5_tokenizer(
    out_dir: Path, texts: list[str], vocab_size: int, model_max_length: int, convention: TokenizerConvention
) -> dict:
    """spiece.model for both languages with T5's ids (pad 0, eos 1, unk 2, no bos) and T5Tokenizer's files (the
    100 sentinels `<extra_id_N>` after the pieces, its legacy behaviour as t5-small's files select it)."""
    import transformers

    model = train_spm(texts, vocab_size, JOINT_COVERAGE, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    spm_file = out_dir / "spiece.model"
    spm_file.write_bytes(model)
    cls = getattr(transformers, convention.classes[0])
    tokenizer = cls(str(spm_file), extra_ids=100, legacy=True, model_max_length=model_max_length)
    tokenizer.save_pretrained(out_dir)
    return _facts(tokenizer, convention)


def _facts(tokenizer, convention: TokenizerConvention) -> dict:
    """Ids a model built for `tokenizer` needs: its size, the special ids, the target language's token."""
    vocab = tokenizer.get_vocab()
    target = convention.language_token.format(convention.target_language) if convention.target_language else None
    return {
        "vocab_size": max(vocab.values()) + 1,
        "pad_id": tokenizer.pad_token_id,
        "eos_id": tokenizer.eos_token_id,
        "target_language_id": vocab[target] if target else None,
        "special_ids": sorted(set(tokenizer.all_special_ids)),
    }
