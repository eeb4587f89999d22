"""What an exporter has to know about a model of any family: config, tokenizer, parameters, tensor shapes.

Each function returns plain data (rows or a dict) that notebook 01 tabulates and the tests assert. The config fields
are every family's (runtime.families); a model shows those its config has.
"""

from __future__ import annotations

from typing import Any

import torch

from mtonnx.runtime import families
from mtonnx.sources.reference import batch

# Config fields that decide how the model is exported and decoded, with what each one means for that (a family's
# config has some of them: Marian's and M2M100's names, then T5's).
CONFIG_FIELDS: dict[str, str] = {
    "d_model": "hidden size: the last dim of encoder_hidden_states and of every K/V head group",
    "encoder_layers": "encoder blocks; no cache, run once per sentence",
    "decoder_layers": "decoder blocks: 4 K/V tensors each (self key/value, cross key/value)",
    "encoder_attention_heads": "heads per encoder attention",
    "decoder_attention_heads": "heads per decoder attention: K/V shape is (batch, heads, len, d_model/heads)",
    "num_layers": "encoder blocks (T5); no cache, run once per sentence",
    "num_decoder_layers": "decoder blocks (T5): 4 K/V tensors each (self key/value, cross key/value)",
    "num_heads": "heads per attention (T5): K/V shape is (batch, heads, len, d_kv)",
    "d_kv": "size of one head's keys and values (T5: not d_model / heads)",
    "vocab_size": "logits size; the shared embedding is vocab_size x d_model",
    "max_position_embeddings": "longest source or target the static position table covers",
    "relative_attention_num_buckets": "T5's positions: buckets of relative distance, a learned bias per head each",
    "relative_attention_max_distance": "T5's positions: distances beyond this share the last bucket",
    "decoder_start_token_id": "first decoder input: pad (Marian, T5) or eos (M2M100), not <s>",
    "eos_token_id": "decoding stops when it is produced",
    "pad_token_id": "padding id",
    "bad_words_ids": "ids never generated: Marian's pad must be masked out of the logits every step",
    "forced_bos_token_id": "the first generated token, forced: M2M100's target-language token",
    "num_beams": "generate()'s default search: beam search with this many beams",
    "max_length": "generate()'s default length cap",
    "early_stopping": "beam search stops as soon as every beam is done (True) or when none can improve (False)",
    "activation_function": "FFN activation (swish = SiLU, relu), exported as Sigmoid*Mul, Relu or a fused op",
    "feed_forward_proj": "FFN activation (T5)",
    "scale_embedding": "embeddings are multiplied by sqrt(d_model) inside the graph",
    "static_position_embeddings": "sinusoidal positions: a constant table, not a trained weight",
    "share_encoder_decoder_embeddings": "one embedding table for encoder and decoder",
    "tie_word_embeddings": "lm_head reuses the shared embedding (duplicated once per exported file)",
}


def config_rows(model) -> list[dict[str, Any]]:
    """The export-relevant config fields the model's config has, reading generation defaults from generation_config."""
    config, generation = model.config, model.generation_config
    rows = []
    for field, meaning in CONFIG_FIELDS.items():
        value = getattr(generation, field, None)  # generation defaults live in generation_config.json
        if value is None:
            value = config.to_dict().get(field)  # the config's own fields, not what an attribute map derives
        if value is not None:
            rows.append({"field": field, "value": value, "meaning for export": meaning})
    if families.of_type(model.config.model_type).final_logits_bias:
        rows.append(
            {
                "field": "final_logits_bias",
                "value": f"buffer {tuple(model.final_logits_bias.shape)}, max |b| = "
                f"{model.final_logits_bias.abs().max().item():.3g}",
                "meaning for export": "added to the logits after lm_head; a hand loop must keep it",
            }
        )
    return rows


def tokenizer_facts(tokenizer, sentence: str, target: str, source_prefix: str = "") -> dict[str, Any]:
    """Special tokens, vocab size and one worked example on each side."""
    text = f"{source_prefix} {sentence}".strip()
    source_ids = tokenizer(text).input_ids
    target_ids = tokenizer(text_target=target).input_ids
    return {
        "vocab_size": tokenizer.vocab_size,
        "special_tokens": {
            name: {"token": getattr(tokenizer, name), "id": getattr(tokenizer, f"{name}_id")}
            for name in ("eos_token", "unk_token", "pad_token")
        },
        "source_text": text,
        "source_pieces": tokenizer.convert_ids_to_tokens(source_ids),
        "source_ids": source_ids,
        "target_text": target,
        "target_pieces": tokenizer.convert_ids_to_tokens(target_ids),
        "target_ids": target_ids,
        "round_trip": tokenizer.decode(target_ids, skip_special_tokens=True),
    }


def parameter_counts(model) -> dict[str, Any]:
    """Parameters per module group, counting shared tensors once; lm_head's share shown separately."""
    groups: dict[str, int] = {}
    for name, tensor in model.named_parameters():  # de-duplicated: tied/shared weights appear once
        groups[_group(name)] = groups.get(_group(name), 0) + tensor.numel()
    total = sum(groups.values())
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    rows = [{"group": g, "params": n, "share": n / total} for g, n in sorted(groups.items(), key=lambda x: -x[1])]
    return {
        "total": total,
        "rows": rows,
        "lm_head_tied": tied,
        "shared_embedding": model.get_input_embeddings().weight.numel(),
        "final_logits_bias": model.final_logits_bias.numel()
        if families.of_type(model.config.model_type).final_logits_bias
        else 0,
    }


# transformers' module names for the same parts: Marian's and M2M100's, then T5's.
_LAYERS = {"encoder layers": ("encoder.layers", "encoder.block"), "decoder layers": ("decoder.layers", "decoder.block")}
_CROSS, _SELF = ("encoder_attn", "EncDecAttention"), ("self_attn", "SelfAttention")


def _group(name: str) -> str:
    if name.startswith(("model.shared", "shared")) or "embed_tokens" in name or name.startswith("lm_head"):
        return "shared embedding = lm_head"
    if "embed_positions" in name or "relative_attention_bias" in name:
        return "positions (encoder)" if "encoder." in name else "positions (decoder)"
    for label, parts in _LAYERS.items():
        if any(part in name for part in parts):
            if any(part in name for part in _CROSS):
                return "decoder cross-attention"
            if any(part in name for part in _SELF):
                return label.replace("layers", "self-attention")
            return label.replace("layers", "FFN + norms")
    return "other"


@torch.no_grad()
def forward_shapes(model, tokenizer, sentences: list[str], source_prefix: str = "") -> list[dict[str, Any]]:
    """Shapes of one encoder pass and one decoder step (with the cache returned)."""
    enc = batch(tokenizer, sentences, source_prefix)
    encoder_out = model.get_encoder()(**enc).last_hidden_state
    start = torch.full((len(sentences), 1), model.config.decoder_start_token_id)
    step = model(
        encoder_outputs=(encoder_out,), attention_mask=enc.attention_mask, decoder_input_ids=start, use_cache=True
    )
    rows = [
        ("encoder", "input_ids", enc.input_ids),
        ("encoder", "attention_mask", enc.attention_mask),
        ("encoder", "last_hidden_state", encoder_out),
        ("decoder step 1", "decoder_input_ids", start),
        ("decoder step 1", "logits", step.logits),
    ]
    return [
        {"stage": s, "tensor": n, "shape": tuple(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
        for s, n, t in rows
    ]


@torch.no_grad()
def past_key_values_shapes(
    model, tokenizer, sentences: list[str], source_prefix: str = "", steps: int = 2
) -> list[dict]:
    """K/V shapes per layer after each of the first `steps` decoder steps (self vs cross attention)."""
    enc = batch(tokenizer, sentences, source_prefix)
    encoder_out = model.get_encoder()(**enc)
    token = torch.full((len(sentences), 1), model.config.decoder_start_token_id)
    past, rows = None, []
    for step in range(1, steps + 1):
        out = model(
            encoder_outputs=encoder_out,
            attention_mask=enc.attention_mask,
            decoder_input_ids=token,
            past_key_values=past,
            use_cache=True,
        )
        past = out.past_key_values
        for layer, (self_k, self_v, cross_k, cross_v) in enumerate(past.to_legacy_cache()):
            rows.append(
                {
                    "step": step,
                    "layer": layer,
                    "self key": tuple(self_k.shape),
                    "self value": tuple(self_v.shape),
                    "cross key": tuple(cross_k.shape),
                    "cross value": tuple(cross_v.shape),
                }
            )
        token = out.logits[:, -1:].argmax(-1)
    return rows
