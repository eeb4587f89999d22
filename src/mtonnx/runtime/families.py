"""The model families the project migrates, each described once as plain data, in the way optimum's OnnxConfigs
describe an architecture: what differs between Marian, M2M100/NLLB and T5 for an export and a decoding loop.

A family is keyed by config.json's `model_type`; its tokenizer convention by tokenizer_config.json's
`tokenizer_class` (M2M100 and NLLB share the model and differ in their tokenizers). The torch-free runtime reads
the tokenizer conventions, the config keys and the special tokens; the hand export's wrappers (export.wrappers)
read the logits head and positions; doctor and the pitfalls read what to check. Nothing else branches on a
family's name. Every family exports the same four subgraphs with the same inputs, outputs and dynamic axes
(export.wrappers), and carries the same cache per decoder layer (layout.KV): self-attention key and value, growing
by one position a step, and cross-attention key and value, computed once from the encoder output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# How each family finds the position of a token, in a sentence the notebooks print.
POSITIONS = {
    "sinusoidal": "a fixed sinusoidal table indexed 0, 1, 2, ... whatever the padding",
    "sinusoidal from the ids": "a fixed sinusoidal table indexed from the ids: pad + 1 + the count of non-pad tokens "
    "so far, pad tokens at pad's (zero) row, so padding on either side leaves a sentence's positions unchanged",
    "relative buckets": "no position table: the first layer's attention adds a learned bias per head and bucket of "
    "relative distance (shared by the later layers), computed from the query and key lengths at run time",
}
# The paddings under which a sentence's output equals its batch-1 output, per position kind (doctor checks them).
PADDING_INVARIANT = {
    "sinusoidal": ("right",),
    "sinusoidal from the ids": ("right", "left"),
    "relative buckets": ("right", "left"),
}

# M2M100Tokenizer's language codes (`language_codes` in tokenizer_config.json): token `__{code}__`, id
# len(vocab.json) + the code's index here.
M2M100_LANGUAGES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi hr ht hu "
        "hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl ps pt "
        "ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


@dataclass(frozen=True)
class TokenizerConvention:
    """How a family's tokenizer turns text into ids: its files, the language codes it puts in front of a source and
    forces first in the target, and how transformers' class of that name behaves (runtime.tokenizer mirrors it)."""

    name: str
    classes: tuple[str, ...]  # tokenizer_config.json `tokenizer_class` values it covers; the first builds it
    files: tuple[str, ...]  # the files beside the model it reads
    source_language: str = ""  # the code put in front of an English source (as a token), "" for none
    target_language: str = ""  # the code of the token forced first in a Chinese target, "" for none
    language_token: str = "{}"  # how a code is spelled as a token


@dataclass(frozen=True)
class Family:
    """What an exporter and a decoding loop must know about one architecture."""

    model_type: str  # config.json's model_type
    label: str
    architecture: str  # the transformers class of the model
    tokenizers: tuple[TokenizerConvention, ...]  # the first is the one the project builds its tiny model with
    decoder_layers: str  # config key: decoder blocks
    decoder_heads: str  # config key: heads of a decoder attention
    positions_key: str  # config key: the longest sequence the model takes (tokenizer_config's model_max_length else)
    positions: str  # a key of POSITIONS
    decoder_start: str  # the token decoding starts from: "pad" or "eos"
    forced_first_token: bool  # generation forces the target-language token as the first generated token
    bans_pad: bool  # generation bans pad (bad_words_ids): it is a row of the logits no training pushed down
    embedding_scale: str  # config key that, when true, scales embeddings by sqrt(d_model) ("" for none)
    final_logits_bias: bool  # a bias buffer added to the logits after lm_head
    rescale_tied_head: bool  # a tied lm_head reads the decoder output times d_model**-0.5
    source_prefix: str = ""  # text the source needs in front (T5's task prefix); language codes are tokens instead
    # What a published checkpoint expects in front of a source, and its name: opus-mt-en-zh's target-language token,
    # T5's task prefix (None where the tokenizer puts its language token itself); the family lesson leaves it out.
    expected_prefix: tuple[str, str] | None = None
    pitfalls: tuple[str, ...] = ()  # the family's own pitfalls (check.pitfalls reproduces them)

    def padding_invariant(self) -> tuple[str, ...]:
        """The paddings that leave a sentence's output as at batch 1."""
        return PADDING_INVARIANT[self.positions]

    def convention(self, tokenizer_class: str | None) -> TokenizerConvention:
        """The tokenizer convention of a tokenizer class (the family's first one when none is named)."""
        for convention in self.tokenizers:
            if tokenizer_class is None or tokenizer_class.removesuffix("Fast") in convention.classes:
                return convention
        raise ValueError(
            f"tokenizer_class {tokenizer_class} is not one mtonnx reads for {self.label} models "
            f"({', '.join(c for t in self.tokenizers for c in t.classes)})"
        )

    def facts(self) -> dict[str, str]:
        """What differs from family to family, as one row of text per property (the notebooks print these)."""
        return {
            "family": self.label,
            "positions": POSITIONS[self.positions],
            "decoder start": f"{self.decoder_start} (decoder_start_token_id)",
            "pad": "banned (bad_words_ids)" if self.bans_pad else "not banned",
            "forced first token": "the target-language token (forced_bos_token_id)"
            if self.forced_first_token
            else "none",
            "source": " / ".join(
                f"{t.name}: "
                + (f"{t.language_token.format(t.source_language)} first" if t.source_language else "as is")
                for t in self.tokenizers
            )
            + (f"; task prefix '{self.source_prefix}'" if self.source_prefix else ""),
            "embedding scale": f"sqrt(d_model) when {self.embedding_scale}" if self.embedding_scale else "none",
            "lm_head": "tied to the shared embedding"
            + (", decoder output times d_model**-0.5 first" if self.rescale_tied_head else "")
            + (", then + final_logits_bias" if self.final_logits_bias else ""),
            "padding that keeps a sentence's output": " and ".join(self.padding_invariant()),
        }


MARIAN = Family(
    "marian",
    "Marian (opus-mt)",
    "MarianMTModel",
    (
        TokenizerConvention(
            "marian", ("MarianTokenizer",), ("vocab.json", "source.spm", "target.spm"), language_token=">>{}<<"
        ),
    ),
    decoder_layers="decoder_layers",
    decoder_heads="decoder_attention_heads",
    positions_key="max_position_embeddings",
    positions="sinusoidal",
    decoder_start="pad",
    forced_first_token=False,
    bans_pad=True,
    embedding_scale="scale_embedding",
    final_logits_bias=True,
    rescale_tied_head=False,
    expected_prefix=("target language token", ">>cmn_Hans<<"),
)
M2M100 = Family(
    "m2m_100",
    "M2M100 / NLLB",
    "M2M100ForConditionalGeneration",
    (
        TokenizerConvention(
            "m2m100",
            ("M2M100Tokenizer",),
            ("vocab.json", "sentencepiece.bpe.model"),
            source_language="en",
            target_language="zh",
            language_token="__{}__",
        ),
        TokenizerConvention(
            "nllb",
            ("NllbTokenizer",),
            ("sentencepiece.bpe.model", "tokenizer_config.json"),
            source_language="eng_Latn",
            target_language="zho_Hans",
        ),
    ),
    decoder_layers="decoder_layers",
    decoder_heads="decoder_attention_heads",
    positions_key="max_position_embeddings",
    positions="sinusoidal from the ids",
    decoder_start="eos",
    forced_first_token=True,
    bans_pad=False,
    embedding_scale="scale_embedding",
    final_logits_bias=False,
    rescale_tied_head=False,
    pitfalls=("forced target-language token", "positions without the padding"),
)
T5 = Family(
    "t5",
    "T5",
    "T5ForConditionalGeneration",
    (TokenizerConvention("t5", ("T5Tokenizer",), ("spiece.model",)),),
    decoder_layers="num_decoder_layers",
    decoder_heads="num_heads",
    positions_key="n_positions",
    positions="relative buckets",
    decoder_start="pad",
    forced_first_token=False,
    bans_pad=False,
    embedding_scale="",
    final_logits_bias=False,
    rescale_tied_head=True,
    source_prefix="translate English to Chinese:",
    expected_prefix=("task prefix", "translate English to Chinese:"),
    pitfalls=("relative position bias frozen", "tied lm_head without the rescale"),
)
FAMILIES = {family.model_type: family for family in (MARIAN, M2M100, T5)}
# Every tokenizer file any family reads: an export copies those its source has (layout.MODEL_FILES).
TOKENIZER_FILES = tuple(dict.fromkeys(f for fam in FAMILIES.values() for t in fam.tokenizers for f in t.files))


class UnknownFamily(ValueError):
    """A config.json whose model_type no family describes; str() names the ones there are."""


def of_type(model_type: str | None) -> Family:
    """The family of a config.json `model_type`."""
    if model_type not in FAMILIES:
        raise UnknownFamily(
            f"model_type {model_type!r} is not a family mtonnx migrates ({', '.join(FAMILIES)}: "
            + ", ".join(f.label for f in FAMILIES.values())
            + ")"
        )
    return FAMILIES[model_type]


def read_json(path: Path) -> dict:
    """A JSON object from a file ({} when the file is absent); ValueError naming the file when it is not one."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path.name} is not readable JSON ({err}); copy it from the source model again") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path.name} holds a JSON {type(value).__name__}, not an object")
    return value


def of_dir(directory: str | Path) -> Family:
    """The family of a model or export directory, from its config.json's model_type (Marian when it names none or
    the directory has no config.json: a Marian export may carry only generation_config.json)."""
    config = read_json(Path(directory) / "config.json")
    return of_type(config.get("model_type", MARIAN.model_type))


def convention_of_dir(directory: str | Path) -> tuple[Family, TokenizerConvention]:
    """The family and tokenizer convention of a directory (tokenizer_config.json's tokenizer_class)."""
    family = of_dir(directory)
    return family, family.convention(read_json(Path(directory) / "tokenizer_config.json").get("tokenizer_class"))
