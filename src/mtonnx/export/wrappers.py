"""The hand export's subgraphs, described declaratively: one `Subgraph` per file (wrapper module, input/output
names, dynamic axes, sample inputs) drives one generic export step, in the style of optimum's exporters.

Each wrapper is a few lines around the Hugging Face modules, the same for every family; what differs between
families after the decoder (T5's rescale before a tied lm_head, Marian's final_logits_bias) comes from the family's
description (runtime.families); the cache names come from runtime.layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn
from transformers.cache_utils import EncoderDecoderCache

from mtonnx.export.samples import SampleInputs
from mtonnx.runtime import families, layout


class EncoderModel(nn.Module):
    """(input_ids, attention_mask) -> last_hidden_state. Runs once per sentence."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids, attention_mask):
        """The encoder's last hidden state."""
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def family_of(model) -> families.Family:
    """The family (runtime.families) of a transformers model."""
    return families.of_type(model.config.model_type)


def decoder_layers(model) -> int:
    """The model's decoder layers, read through its family's config key."""
    return getattr(model.config, family_of(model).decoder_layers)


def head_scale(model) -> float:
    """What the decoder output is multiplied by before lm_head: d_model**-0.5 for a family that rescales before a
    tied head (T5) when the head is tied, else 1."""
    tied = family_of(model).rescale_tied_head and model.config.tie_word_embeddings
    return model.config.d_model**-0.5 if tied else 1.0


def logits(model, hidden):
    """The model's logits from the decoder's last hidden state, as its ForConditionalGeneration computes them."""
    scale = head_scale(model)
    out = model.lm_head(hidden * scale if scale != 1.0 else hidden)
    return out + model.final_logits_bias if family_of(model).final_logits_bias else out


class _LogitsHead(nn.Module):
    """The decoder and what the model adds after it: lm_head (after the family's rescale, if any) and the family's
    final_logits_bias, if any."""

    def __init__(self, model):
        super().__init__()
        self.decoder = model.get_decoder()
        self.lm_head = model.lm_head
        self.scale = head_scale(model)
        bias = model.final_logits_bias if family_of(model).final_logits_bias else None
        self.register_buffer("final_logits_bias", bias, persistent=False)

    def step(self, input_ids, hidden, mask, kinds: tuple[str, ...], past_key_values=None) -> tuple:
        """One decoder call: (logits, *each layer's present `kinds`, in layout.KV order)."""
        out = self.decoder(
            input_ids=input_ids,
            encoder_hidden_states=hidden,
            encoder_attention_mask=mask,
            past_key_values=past_key_values,
            use_cache=True,
            return_dict=True,
        )
        present = [t for layer in out.past_key_values.to_legacy_cache() for t in layer[: len(kinds)]]
        return (self.logits(out.last_hidden_state), *present)

    def logits(self, hidden):
        out = self.lm_head(hidden * self.scale if self.scale != 1.0 else hidden)
        return out if self.final_logits_bias is None else out + self.final_logits_bias


class DecoderModel(_LogitsHead):
    """First step: decoder input ids + encoder output -> logits and every layer's self and cross K/V."""

    def forward(self, input_ids, encoder_hidden_states, encoder_attention_mask):
        """Logits and every layer's present self and cross K/V."""
        return self.step(input_ids, encoder_hidden_states, encoder_attention_mask, kinds=layout.KV)


class DecoderWithPastModel(_LogitsHead):
    """Later steps: the new token + past self K/V + cross K/V (reused) -> logits and the grown self K/V."""

    def forward(self, input_ids, encoder_attention_mask, *past):
        """Logits and the grown self K/V; the cross K/V come from `past`, never recomputed."""
        kinds = layout.by_kind(list(past))
        layers = tuple(zip(*(kinds[kind] for kind in layout.KV)))  # per layer: self key, self value, cross key, value
        cache = EncoderDecoderCache.from_legacy_cache(layers)  # marks cross K/V as computed: never recomputed
        # The decoder reads only the shape (batch, source length) of encoder_hidden_states when the cross
        # K/V come from the cache; a slice of the cross key gives that shape without new memory.
        shape_only = kinds[layout.CROSS_KEY][0][:, 0, :, :1]
        return self.step(input_ids, shape_only, encoder_attention_mask, kinds=layout.SELF, past_key_values=cache)


class TranslationStepModel(nn.Module):
    """The no-cache baseline: source + whole decoder prefix -> logits, recomputed from scratch every step."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        """Logits of the whole prefix."""
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False
        ).logits


@dataclass(frozen=True)
class Subgraph:
    """One exported file: how to wrap the model, what goes in and out, which axes are dynamic."""

    file: str
    wrapper: Callable[[Any], nn.Module]
    inputs: list[str]
    outputs: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    sample: Callable[[SampleInputs], tuple]


B, S, T, P = "batch_size", "encoder_sequence_length", "decoder_sequence_length", "past_decoder_sequence_length"


def subgraphs(layers: int) -> list[Subgraph]:
    """The four files of the hand export for a model with `layers` decoder layers."""
    past, present = layout.past_names(layers), layout.present_names(layers)
    present_self = layout.present_names(layers, layout.SELF)

    def axes(names, seq_axis_name):
        return {n: {0: B, 2: seq_axis_name(n)} for n in names}

    def self_or_cross(self_axis: str, cross_axis: str):
        return lambda name: self_axis if name.endswith(layout.SELF) else cross_axis

    return [
        Subgraph(
            layout.ENCODER,
            EncoderModel,
            ["input_ids", "attention_mask"],
            ["last_hidden_state"],
            {"input_ids": {0: B, 1: S}, "attention_mask": {0: B, 1: S}, "last_hidden_state": {0: B, 1: S}},
            lambda s: (s.input_ids, s.attention_mask),
        ),
        Subgraph(
            layout.DECODER,
            DecoderModel,
            ["input_ids", "encoder_hidden_states", "encoder_attention_mask"],
            ["logits", *present],
            {
                "input_ids": {0: B, 1: T},
                "encoder_hidden_states": {0: B, 1: S},
                "encoder_attention_mask": {0: B, 1: S},
                "logits": {0: B, 1: T},
                **axes(present, self_or_cross(T, S)),
            },
            lambda s: (s.decoder_input_ids, s.hidden, s.attention_mask),
        ),
        Subgraph(
            layout.DECODER_WITH_PAST,
            DecoderWithPastModel,
            ["input_ids", "encoder_attention_mask", *past],
            ["logits", *present_self],
            {
                "input_ids": {0: B},
                "encoder_attention_mask": {0: B, 1: S},
                "logits": {0: B},
                **axes(past, self_or_cross(P, S)),
                **axes(present_self, lambda n: f"{P} + 1"),
            },
            lambda s: (s.next_token, s.attention_mask, *s.past),
        ),
        Subgraph(
            layout.TRANSLATION_STEP,
            TranslationStepModel,
            ["input_ids", "attention_mask", "decoder_input_ids"],
            ["logits"],
            {
                "input_ids": {0: B, 1: S},
                "attention_mask": {0: B, 1: S},
                "decoder_input_ids": {0: B, 1: T},
                "logits": {0: B, 1: T},
            },
            lambda s: (s.input_ids, s.attention_mask, s.decoder_input_ids),
        ),
    ]
