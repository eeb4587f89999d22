"""Notebook 07's restricted output vocabulary (variants.restricted), measured against the variant it was cut from:
whether the tokens stay the same (verified per sentence, not assumed), the quality gate where they do not, and
the speed per configuration (repetitions interleaved, paired ratios)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from mtonnx.measure import quality, verdicts
from mtonnx.measure.timing import interleaved, paired_ratio
from mtonnx.runtime import SessionSettings, Translator
from mtonnx.runtime.tokenizer import pad


def same_tokens(
    full: Translator,
    cut: Translator,
    sources: list[str],
    beams: int,
    max_new_tokens: int | None = None,
    source_prefix: str = "",
) -> dict[str, Any]:
    """Per sentence, the ids of both at `beams` and `max_new_tokens`: identical, different where the full
    model chose a removed row (expected), or different although it did not (the restriction changed a choice).
    One sentence per call: dynamic int8 quantizes a batch's activations with one scale, so in a batch a row's
    logits also move when another row chose a removed token."""
    kept = set(cut.output_rows.ids.tolist())
    counts = {"identical": 0, "differ_removed_row_chosen": 0, "differ_otherwise": 0}
    for source in sources:
        ids, mask = full.tokenizer.batch([source], source_prefix)
        a, b = (t.generate(ids, mask, num_beams=beams, max_new_tokens=max_new_tokens)[0] for t in (full, cut))
        counts["identical" if a == b else "differ_removed_row_chosen" if set(a) - kept else "differ_otherwise"] += 1
    return {"beams": beams, "sentences": len(sources), **counts}


def restriction(
    full_dir: str | Path,
    cut_dir: str | Path,
    pairs: list,
    configs: list[tuple[int, int]],
    tokens: int,
    gate_bleu: float,
    generation: dict[str, Any],
    source_prefix: str = "",
    warmup: int = 1,
    repeats: int = 5,
    threads: int = 1,
) -> dict[str, Any]:
    """Tokens per beam setting of `configs`, the gate on `pairs` (the eval set) translated with `generation`
    (params' num_beams, max_new_tokens, batch_size), and speed at each (batch, beams) with `tokens` forced."""
    session = SessionSettings(threads=threads)
    full, cut = Translator(full_dir, session=session), Translator(cut_dir, session=session)
    sources, references = [p.en for p in pairs], [p.zh for p in pairs]
    limit = generation["max_new_tokens"]
    beams_measured = sorted({b for _, b in configs})
    checks = [same_tokens(full, cut, sources, beams, limit, source_prefix) for beams in beams_measured]
    hypotheses = {
        name: t.translate(
            sources,
            batch_size=generation["batch_size"],
            source_prefix=source_prefix,
            num_beams=generation["num_beams"],
            max_new_tokens=limit,
        )
        for name, t in (("full", full), ("cut", cut))
    }
    bootstrap = quality.paired_bootstrap(hypotheses["full"], {"cut": hypotheses["cut"]}, references)["systems"]["cut"]
    rows = [full.tokenizer.encode(f"{source_prefix} {s}".strip()) for s in sources]
    speed = []
    for batch, beams in configs:
        ids, mask = pad((rows * batch)[:batch], full.tokenizer.pad_token_id)
        options = {"num_beams": beams, "max_new_tokens": tokens, "min_length": tokens + 1}
        timed = interleaved(
            {name: functools.partial(t.generate, ids, mask, **options) for name, t in (("full", full), ("cut", cut))},
            max(warmup, 1),
            repeats,
        )
        paired = paired_ratio(timed["full"]["times_ms"], timed["cut"]["times_ms"])
        speed.append(
            {
                "batch": batch,
                "beams": beams,
                "full_ms": timed["full"]["median_ms"],
                "restricted_ms": timed["cut"]["median_ms"],
                "speedup_per_repetition": paired,
                "faster": verdicts.faster_beyond_noise(timed["cut"]["times_ms"], timed["full"]["times_ms"]),
            }
        )
    return {
        "vocab": full.tokenizer.vocab_size,
        "rows_kept": len(cut.output_rows),
        "tokens": checks,
        "bleu": bootstrap["bleu"],
        "bleu_delta": bootstrap["bleu_delta"],
        "bleu_delta_ci": bootstrap["bleu_delta_ci"],
        "gate": verdicts.gate(bootstrap["bleu_delta"], bootstrap["bleu_delta_ci"], gate_bleu),
        "identical_translations": bootstrap["identical"],
        "speed": speed,
    }
