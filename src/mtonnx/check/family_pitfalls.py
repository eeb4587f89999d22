"""The pitfalls a family brings of its own (runtime.families: each family names its own), reproduced on the current
model: each builds the broken export or settings, shows the failure as data, and hands the broken directory to
doctor, whose named check must catch it (notebook 08 runs them for the run's family).

- M2M100/NLLB, forced target-language token: generate is told the target language by forcing its token first;
  without it the model picks its own first token, and the output starts in whatever language that token is;
- M2M100/NLLB, positions without the padding: M2M100 counts positions from the ids (pad tokens take none), so a
  sentence padded on either side keeps its positions; computed as 0, 1, 2, ... over the slots instead (Marian's way),
  a left-padded sentence is shifted and comes out different from batch 1;
- T5, relative position bias frozen: T5 has no position table, its first attention adds a bias per bucket of
  relative distance computed from the lengths; computed in Python from the example's lengths at export time (`int()`
  of a shape), the TorchScript tracer stores the bias as a constant: right at the traced length, wrong at any other
  (torch.export keeps such numbers symbolic and exports it right);
- T5, tied lm_head without the rescale: a tied T5 multiplies the decoder output by d_model**-0.5 before lm_head;
  an export that reads the head as an untied one leaves it out and its logits are d_model**0.5 times too large:
  greedy tokens survive (argmax ignores a positive scale), beam search's log-softmax does not.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mtonnx.check.parity import session
from mtonnx.export.manual import export_model, load_for_export
from mtonnx.runtime import families, layout


@dataclass(frozen=True)
class Inputs:
    """What a family pitfall works from: the model, this run's export, a scratch directory, sentences to translate."""

    model_dir: Path
    export_dir: Path
    work_dir: Path
    sentences: list[str]
    source_prefix: str = ""
    max_new_tokens: int = 16


@dataclass(frozen=True)
class FamilyPitfall:
    """One family pitfall: what goes wrong and why, the fix, the doctor check that catches it, how to reproduce it
    (returns `evidence` to show, whether it was `reproduced`, and the `export` doctor is run on)."""

    name: str
    cause: str
    fix: str
    doctor: str
    reproduce: Callable[[Inputs], dict[str, Any]]


def forced_language_token(x: Inputs) -> dict[str, Any]:
    """Greedy translations with generation_config.json's forced first token and without it, and a copy of the export
    whose generation_config.json lost it."""
    from mtonnx.runtime import Translator

    translator = Translator(x.export_dir)
    forced = translator.settings.forced_bos_token_id
    ids, mask = translator.tokenizer.batch(x.sentences, x.source_prefix)
    options = {"num_beams": 1, "max_new_tokens": x.max_new_tokens}
    right = translator.generate(ids, mask, **options)
    wrong = translator.generate(ids, mask, **options, forced_bos_token_id=None)
    first = {i: translator.tokenizer.decoder.get(i, "?") for i in {row[0] for row in right + wrong}}
    broken = _copy(x.export_dir, x.work_dir / "forced-token-removed")
    config = json.loads((broken / "generation_config.json").read_text(encoding="utf-8"))
    config.pop("forced_bos_token_id", None)
    (broken / "generation_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return {
        "evidence": {
            "forced first token": first.get(forced, forced),
            "first tokens with it": sorted({first[row[0]] for row in right}),
            "first tokens without it": sorted({first[row[0]] for row in wrong}),
            "sentences changed": f"{sum(r != w for r, w in zip(right, wrong))} of {len(right)}",
            "with it": [translator.tokenizer.decode(r) for r in right[:3]],
            "without it": [translator.tokenizer.decode(w) for w in wrong[:3]],
        },
        "reproduced": all(row[0] == forced for row in right) and any(row[0] != forced for row in wrong),
        "export": broken,
    }


def positions_without_padding(x: Inputs) -> dict[str, Any]:
    """The export's encoder and one whose positions count the slots (0, 1, 2, ... whatever the padding): the
    encoding of a sentence left-padded in a batch against its encoding alone, for each."""
    model = load_for_export(x.model_dir)
    positions = model.get_encoder().embed_positions
    original = type(positions).forward

    def slot_positions(input_ids=None, inputs_embeds=None, past_key_values_length=0):
        """The module's own inputs_embeds path: positions 0, 1, 2, ... from the first slot (padding_idx + 1 on)."""
        carrier = inputs_embeds if inputs_embeds is not None else input_ids.unsqueeze(-1)
        return original(positions, None, carrier, past_key_values_length)

    positions.forward = slot_positions
    broken = x.work_dir / "positions-without-padding"
    export_model(model, broken, "torchscript", source_dir=x.model_dir)
    padded = {
        name: _left_padded_vs_alone(directory, x) for name, directory in (("export", x.export_dir), ("broken", broken))
    }
    return {
        "evidence": {
            "left-padded row vs batch 1, this run's export (max |diff|)": padded["export"],
            "left-padded row vs batch 1, positions counting the slots (max |diff|)": padded["broken"],
            "right-padded rows: unchanged either way (the padding comes after every real position)": True,
        },
        "reproduced": padded["export"] < 1e-4 < padded["broken"],
        "export": broken,
    }


def _left_padded_vs_alone(export_dir: Path, x: Inputs) -> float:
    """Max |difference| of the shortest sentence's encoding, left-padded beside the longest, from its encoding alone."""
    from mtonnx.runtime.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(export_dir)
    rows = sorted((tokenizer.encode(f"{x.source_prefix} {s}".strip()) for s in x.sentences), key=len)
    short, long = rows[0], rows[-1]
    encoder = session(export_dir / layout.ENCODER)
    ids = np.full((2, len(long)), tokenizer.pad_token_id, dtype=np.int64)
    ids[0, len(long) - len(short) :], ids[1] = short, long
    mask = (np.arange(len(long)) >= len(long) - len(short)).astype(np.int64)[None].repeat(2, 0)
    mask[1] = 1
    alone = encoder.run(None, {"input_ids": np.array([short]), "attention_mask": np.ones((1, len(short)), np.int64)})
    padded = encoder.run(None, {"input_ids": ids, "attention_mask": mask})
    return float(np.abs(padded[0][0, len(long) - len(short) :] - alone[0][0]).max())


@contextlib.contextmanager
def _frozen_position_bias(model) -> Iterator[None]:
    """T5's relative position bias computed from Python ints of the lengths (`int()` of a traced shape), as code
    that converts shapes to numbers does: the tracer records the bias for the example's lengths as a constant."""
    layers = [m for m in model.modules() if getattr(m, "has_relative_attention_bias", False)]
    for layer in layers:
        original = layer.compute_bias

        def frozen(query_length, key_length, device=None, cache_position=None, _original=original):
            start = 0 if cache_position is None else int(cache_position[0])
            positions = torch.arange(start, int(query_length)) if cache_position is not None else None
            return _original(int(query_length), int(key_length), device, positions)

        layer.compute_bias = frozen
    try:
        yield
    finally:
        for layer in layers:
            del layer.compute_bias


def frozen_position_bias(x: Inputs) -> dict[str, Any]:
    """An export whose relative position bias was frozen at the export sample's lengths: the encoder at the traced
    length and at another one."""
    from mtonnx.export.samples import EXPORT_CASE

    model = load_for_export(x.model_dir)
    broken = x.work_dir / "position-bias-frozen"
    with _frozen_position_bias(model):
        export_model(model, broken, "torchscript", source_dir=x.model_dir)
    traced = max(EXPORT_CASE.source_lengths)
    encoder = session(broken / layout.ENCODER)
    results = {}
    for length in (traced, traced + 5):
        ids = np.full((1, length), 5, dtype=np.int64)
        try:
            encoder.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
            results[length] = "runs"
        except Exception as err:  # the demonstration: the frozen bias has the traced length's shape
            results[length] = f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"
    return {
        "evidence": {f"source of {n} tokens{' (traced)' if n == traced else ''}": r for n, r in results.items()},
        "reproduced": results[traced] == "runs" and results[traced + 5] != "runs",
        "export": broken,
    }


def tied_head_without_rescale(x: Inputs) -> dict[str, Any]:
    """An export that reads T5's tied lm_head as an untied one (no d_model**-0.5 on the decoder output): its logits
    against PyTorch's, its greedy and beam tokens against this run's export's."""
    from mtonnx.check.parity import logits_ratio
    from mtonnx.runtime import Translator

    model = load_for_export(x.model_dir)
    reference = load_for_export(x.model_dir)
    model.config.tie_word_embeddings = False  # the mistake: the wrapper sees an untied head and skips the rescale
    broken = x.work_dir / "tied-head-without-rescale"
    export_model(model, broken, "torchscript", source_dir=x.model_dir)
    translators = {name: Translator(d) for name, d in (("export", x.export_dir), ("broken", broken))}
    ids, mask = translators["export"].tokenizer.batch(x.sentences, x.source_prefix)
    tokens = {
        (name, beams): t.generate(ids, mask, num_beams=beams, max_new_tokens=x.max_new_tokens)
        for name, t in translators.items()
        for beams in (1, 4)
    }
    same = {
        beams: sum(a == b for a, b in zip(tokens[("export", beams)], tokens[("broken", beams)])) for beams in (1, 4)
    }
    ratio = logits_ratio(reference, broken)
    return {
        "evidence": {
            "logits / PyTorch's": round(ratio, 4),
            "d_model**0.5": model.config.d_model**0.5,
            "greedy: sentences with the same tokens": f"{same[1]} of {len(x.sentences)}",
            "beam 4: sentences with the same tokens": f"{same[4]} of {len(x.sentences)}",
        },
        "reproduced": same[1] == len(x.sentences) and same[4] < len(x.sentences),
        "export": broken,
    }


def _copy(source: Path, target: Path) -> Path:
    """A copy of an export to break on purpose, without its SHA256SUMS: doctor must find the pitfall itself, not a
    file that differs from its list."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(layout.SUMS))
    return target


PITFALLS = {
    pitfall.name: pitfall
    for pitfall in (
        FamilyPitfall(
            "forced target-language token",
            "M2M100 and NLLB translate into many languages with one decoder: generate is told which by forcing the "
            "target language's token as the first generated token (forced_bos_token_id). A loop that only starts from "
            "decoder_start_token_id lets the model pick its first token, and the output starts in whatever language "
            "that is, or echoes the source.",
            "keep forced_bos_token_id in generation_config.json (the runtime forces it as generate does)",
            "start, eos, pad, bad words",
            forced_language_token,
        ),
        FamilyPitfall(
            "positions without the padding",
            "M2M100 numbers a token's position from the ids: pad + 1 + the non-pad tokens before it, pad tokens at "
            "pad's zero row. Counting the slots instead (0, 1, 2, ..., as Marian's table does) changes nothing for a "
            "right-padded batch, and shifts every position of a left-padded row: it no longer encodes as at batch 1.",
            "keep the model's own position code in the graph (export.wrappers wraps the model's modules)",
            "padding keeps a sentence's encoding",
            positions_without_padding,
        ),
        FamilyPitfall(
            "relative position bias frozen",
            "T5 has no position table: its first attention adds a learned bias per bucket of relative distance, "
            "computed from the query and key lengths. Code that turns those lengths into Python numbers (`int()` of a "
            "shape) while the TorchScript exporter traces it stores the bias of the example's lengths as a constant: "
            "the export is right at the traced length and fails at any other.",
            "keep every length a tensor while tracing, or export with torch.export (the project's default), which "
            "keeps such numbers symbolic",
            "padding keeps a sentence's encoding",
            frozen_position_bias,
        ),
        FamilyPitfall(
            "tied lm_head without the rescale",
            "A T5 whose lm_head is tied to the shared embedding multiplies the decoder output by d_model**-0.5 "
            "before it. An export that treats the head as untied leaves that out: the logits are d_model**0.5 times "
            "too large. Greedy tokens survive (argmax ignores a positive scale); beam search's log-softmax does not.",
            "rescale before a tied lm_head (export.wrappers reads it from the family's description)",
            "logits parity at two shapes",
            tied_head_without_rescale,
        ),
    )
}


def of_family(family: families.Family) -> list[FamilyPitfall]:
    """The pitfalls a family names (runtime.families), in its order."""
    return [PITFALLS[name] for name in family.pitfalls]
