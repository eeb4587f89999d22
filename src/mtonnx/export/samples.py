"""The one generator of example inputs: random token ids at a chosen shape, for tracing an export and for
checking its parity with PyTorch at shapes the export never saw.

Every dynamic dimension of the export sample gets a distinct size above 1, so no exporter can mistake one for
a constant; the parity cases differ from it in every dimension.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One shape combination: source lengths per row (padded to the longest), decoder prefix, past length."""

    name: str
    source_lengths: tuple[int, ...]
    target: int
    past: int


EXPORT_CASE = Case("export sample b2 src7/5 tgt3 past4", (7, 5), 3, 4)
PARITY_CASES = (
    Case("b1 src5 tgt1 past1", (5,), 1, 1),
    Case("b3 src37/12/5 tgt4 past20", (37, 12, 5), 4, 20),
    Case("b1 src37 tgt2 past20", (37,), 2, 20),
)


class SampleInputs:
    """Inputs of every subgraph for one case: padded sources ending in eos, decoder prefixes starting with the
    decoder start token, and PyTorch's encoder output and `case.past` positions of self/cross K/V (the inputs of
    decoder_with_past), all as torch tensors."""

    def __init__(self, model, case: Case, seed: int = 0):
        import torch

        generator = torch.Generator().manual_seed(seed)
        config = model.config
        vocab, start, eos = config.vocab_size, config.decoder_start_token_id, config.eos_token_id
        batch, longest = len(case.source_lengths), max(case.source_lengths)
        self.case = case
        self.input_ids = torch.full((batch, longest), config.pad_token_id)
        self.attention_mask = torch.zeros(batch, longest, dtype=torch.int64)
        for row, length in enumerate(case.source_lengths):
            self.input_ids[row, :length] = torch.randint(2, vocab - 1, (length,), generator=generator)
            self.input_ids[row, length - 1] = eos
            self.attention_mask[row, :length] = 1
        self.decoder_input_ids = torch.randint(2, vocab - 1, (batch, case.target), generator=generator)
        self.decoder_input_ids[:, 0] = start
        self.prefix = torch.randint(2, vocab - 1, (batch, case.past), generator=generator)
        self.prefix[:, 0] = start
        self.next_token = torch.randint(2, vocab - 1, (batch, 1), generator=generator)
        with torch.no_grad():
            self.hidden = model.get_encoder()(self.input_ids, self.attention_mask).last_hidden_state
            warm = model.get_decoder()(
                input_ids=self.prefix,
                encoder_hidden_states=self.hidden,
                encoder_attention_mask=self.attention_mask,
                use_cache=True,
            )
        # per layer: self key, self value, cross key, cross value (runtime.layout.KV order)
        self.past = [t for layer in warm.past_key_values.to_legacy_cache() for t in layer]
