"""The one builder of a fresh T5ForConditionalGeneration with t5-small's architecture features, and the weight
shaping that keeps a random one from repeating a token."""

from __future__ import annotations

from typing import Any

# t5-small's config.json, the fields that shape the network and its generation defaults.
T5_SMALL: dict[str, Any] = {
    "d_model": 512,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 6,
    "num_decoder_layers": 6,
    "num_heads": 8,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "feed_forward_proj": "relu",
    "n_positions": 512,
    "vocab_size": 32128,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
    "tie_word_embeddings": True,
    "dropout_rate": 0.1,
    "layer_norm_epsilon": 1e-6,
    "initializer_factor": 1.0,
    "use_cache": True,
    "is_encoder_decoder": True,
}


def new_t5(overrides: dict[str, Any], vocab_size: int, seed: int):
    """A seeded random T5ForConditionalGeneration: T5_SMALL with `overrides` and a `vocab_size` embedding, decoding
    from pad (t5-small's generation_config: no bad words, generate's default max_length)."""
    import torch
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration

    fields = {**T5_SMALL, **overrides, "vocab_size": vocab_size}
    config = T5Config(**fields)
    config.architectures = ["T5ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=fields["decoder_start_token_id"],
        eos_token_id=fields["eos_token_id"],
        pad_token_id=fields["pad_token_id"],
    )
    return model


def shape_weights(model, embedding_scale: float, eos_row_scale: float, unused_ids: list[int]) -> None:
    """Make a random T5's outputs depend on its input and end at varied lengths, in place.

    With random tied embeddings the residual stream carries the last token's embedding to the tied lm_head, whose
    largest logit is then that same token: the output repeats one token. Shrinking the shared table lets the layers
    decide. T5 has no logits bias, so eos's row is lengthened instead: its logit spreads wider than the others' and
    tops them at some steps. The rows of ids a translation never holds (unk, the sentinels) are shrunk again."""
    import torch

    with torch.no_grad():
        table = model.get_input_embeddings().weight
        table *= embedding_scale
        table[unused_ids] *= embedding_scale
        table[model.config.eos_token_id] *= eos_row_scale
