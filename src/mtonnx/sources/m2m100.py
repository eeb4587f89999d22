"""The one builder of a fresh M2M100ForConditionalGeneration with m2m100_418M's architecture features (NLLB-200's
are the same model with another tokenizer), and the weight shaping that keeps a random one from repeating a token.
"""

from __future__ import annotations

from typing import Any

# facebook/m2m100_418M's config.json, the fields that shape the network and its generation defaults.
M2M100_418M: dict[str, Any] = {
    "activation_function": "relu",
    "d_model": 1024,
    "encoder_layers": 12,
    "decoder_layers": 12,
    "encoder_attention_heads": 16,
    "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096,
    "decoder_ffn_dim": 4096,
    "vocab_size": 128112,
    "max_position_embeddings": 1024,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "scale_embedding": True,
    "tie_word_embeddings": True,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.0,
    "encoder_layerdrop": 0.05,
    "decoder_layerdrop": 0.05,
    "init_std": 0.02,
    "use_cache": True,
    "is_encoder_decoder": True,
    "num_beams": 5,
    "max_length": 200,
    "early_stopping": True,
}
GENERATION_ONLY = ("num_beams", "max_length", "early_stopping")
MADEUP_WORDS = 8  # m2m100's embedding has 8 rows past its tokenizer's ids ("madeupword" slots)


def new_m2m100(overrides: dict[str, Any], vocab_size: int, target_language_id: int, seed: int):
    """A seeded random M2M100ForConditionalGeneration: M2M100_418M with `overrides`, an embedding of `vocab_size`
    rows (the tokenizer's ids and MADEUP_WORDS more), decoding from eos with the target language's token forced
    first, as generate is told for m2m100 (forced_bos_token_id)."""
    import torch
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration

    fields = {**M2M100_418M, **overrides, "vocab_size": vocab_size + MADEUP_WORDS}
    config = M2M100Config(**{k: v for k, v in fields.items() if k not in GENERATION_ONLY})
    config.architectures = ["M2M100ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        bos_token_id=fields["bos_token_id"],
        eos_token_id=fields["eos_token_id"],
        pad_token_id=fields["pad_token_id"],
        decoder_start_token_id=fields["decoder_start_token_id"],
        forced_bos_token_id=target_language_id,
        num_beams=fields["num_beams"],
        max_length=fields["max_length"],
        early_stopping=fields["early_stopping"],
    )
    return model


def shape_weights(model, embedding_scale: float, eos_logit_bias: float, unused_ids: list[int]) -> None:
    """Make a random M2M100's outputs depend on its input and end at varied lengths, in place.

    With random tied embeddings the decoder's residual stream carries the last token's (sqrt(d_model)-scaled)
    embedding to the tied lm_head, whose largest logit is then that same token: the output repeats one token. Shrinking
    the embedding table lets the layers decide. M2M100 has no final_logits_bias, so the eos logit is raised through
    the decoder's final layer norm instead: its bias gains eos's embedding row scaled to add `eos_logit_bias` to eos's
    logit. The rows of ids a translation never holds (bos, unk, the language codes, the spare rows) are shrunk again,
    as training leaves them."""
    import torch

    with torch.no_grad():
        table = model.get_input_embeddings().weight
        table *= embedding_scale
        table[unused_ids] *= embedding_scale
        eos = table[model.config.eos_token_id]
        model.get_decoder().layer_norm.bias += eos_logit_bias * eos / (eos @ eos)
