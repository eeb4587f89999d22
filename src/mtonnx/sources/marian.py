"""The one builder of a fresh MarianMTModel with opus-mt-en-zh's architecture features: used for the random
models (sources.models) and the trained default (sources.train), so the two cannot drift apart."""

from __future__ import annotations

from typing import Any

# opus-mt-en-zh's config.json, the fields that shape the network and its generation defaults.
OPUS_MT_EN_ZH: dict[str, Any] = {
    "activation_function": "swish",
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "vocab_size": 65001,
    "decoder_vocab_size": 65001,
    "max_position_embeddings": 512,
    "pad_token_id": 65000,
    "decoder_start_token_id": 65000,
    "eos_token_id": 0,
    "bos_token_id": 0,
    "forced_eos_token_id": 0,
    "bad_words_ids": [[65000]],
    "num_beams": 4,
    "max_length": 512,
    "scale_embedding": True,
    "static_position_embeddings": True,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "normalize_embedding": False,
    "normalize_before": False,
    "add_final_layer_norm": False,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "classifier_dropout": 0.0,
    "init_std": 0.02,
    "use_cache": True,
    "is_encoder_decoder": True,
}
# Generation defaults: they live in generation_config.json, as in the real model.
GENERATION_ONLY = ("bad_words_ids", "num_beams", "max_length")


def new_marian(overrides: dict[str, Any], vocab_size: int, seed: int):
    """A seeded random MarianMTModel: OPUS_MT_EN_ZH with `overrides`, a vocabulary of `vocab_size` whose last
    id is pad (= decoder start, banned), eos 0, and generation defaults (beam 4, max_length) in its
    generation_config, as opus-mt-en-zh has them."""
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    pad = vocab_size - 1
    fields = {
        **OPUS_MT_EN_ZH,
        **overrides,
        "vocab_size": vocab_size,
        "decoder_vocab_size": vocab_size,
        "pad_token_id": pad,
        "decoder_start_token_id": pad,
    }
    config = MarianConfig(**{k: v for k, v in fields.items() if k not in GENERATION_ONLY})
    config.architectures = ["MarianMTModel"]
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    model.generation_config = GenerationConfig(
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        bad_words_ids=[[pad]],
        num_beams=fields["num_beams"],
        max_length=fields["max_length"],
    )
    return model
