"""Notebook 07's restricted output vocabulary (variants.restricted) and lexical shortlist (variants.shortlist),
each measured against the variant it was cut from: whether the tokens stay the same (verified per sentence, not
assumed), the quality gate where they do not, and the speed per configuration (repetitions interleaved, paired
ratios)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx import scores
from mtonnx.foundation.side_by_side import call, per_core
from mtonnx.measure import verdicts
from mtonnx.measure.step_bytes import step_bytes
from mtonnx.measure.timing import interleaved, paired_ratio
from mtonnx.passes.output_rows import target_rows
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
    model chose a removed row (expected), or different although it did not (the restriction changed a choice; a
    shortlist can at beam > 1: it normalizes each beam's scores over the list only).
    One sentence per call: dynamic int8 quantizes a batch's activations with one scale, so in a batch a row's
    logits also move when another row chose a removed token."""
    counts = {"identical": 0, "differ_removed_row_chosen": 0, "differ_otherwise": 0}
    for source in sources:
        ids, mask = full.tokenizer.batch([source], source_prefix)
        kept = set(kept_rows(cut, ids, mask).tolist())
        a, b = (t.generate(ids, mask, num_beams=beams, max_new_tokens=max_new_tokens)[0] for t in (full, cut))
        counts["identical" if a == b else "differ_removed_row_chosen" if set(a) - kept else "differ_otherwise"] += 1
    return {"beams": beams, "sentences": len(sources), **counts}


def kept_rows(cut: Translator, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """The vocabulary ids `cut` may choose from for this batch: its shortlist's, else its restriction's."""
    if cut.shortlist is not None:
        return cut.shortlist.rows(input_ids, attention_mask).ids
    return cut.output_rows.ids


def mean_columns(cut: Translator, rows: list[list[int]], batch: int) -> float:
    """Columns per batch of `batch` encoded rows (length-sorted, as translate batches them), averaged."""
    order = sorted(rows, key=len)
    chunks = [pad(order[i : i + batch], cut.tokenizer.pad_token_id) for i in range(0, len(order), batch)]
    return round(float(np.mean([len(kept_rows(cut, *chunk)) for chunk in chunks])), 1)


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
    timed: bool = True,
) -> dict[str, Any]:
    """Tokens per beam setting of `configs`, the gate on `pairs` (the eval set) translated with `generation`
    (params' num_beams, max_new_tokens, batch_size), the mean columns per batch size, and (`timed`) speed at each
    (batch, beams) with `tokens` forced."""
    session = SessionSettings(threads=threads)
    sources, references = [p.en for p in pairs], [p.zh for p in pairs]
    limit = generation["max_new_tokens"]
    beams_measured = sorted({b for _, b in configs})

    def check(beams: int) -> dict[str, Any]:
        loaded = (Translator(d, session=session) for d in (full_dir, cut_dir))  # a thread's own
        return same_tokens(*loaded, sources, beams, limit, source_prefix)

    def translate(model_dir: str | Path) -> list[str]:
        return Translator(model_dir, session=session).translate(
            sources,
            batch_size=generation["batch_size"],
            source_prefix=source_prefix,
            num_beams=generation["num_beams"],
            max_new_tokens=limit,
        )

    jobs = [functools.partial(check, beams) for beams in beams_measured]
    jobs += [functools.partial(translate, d) for d in (full_dir, cut_dir)]
    done = per_core(call, jobs)  # untimed passes side by side, before any timing
    checks, hypotheses = done[: len(beams_measured)], dict(zip(("full", "cut"), done[len(beams_measured) :]))
    full, cut = Translator(full_dir, session=session), Translator(cut_dir, session=session)
    bootstrap = scores.paired_bootstrap(hypotheses["full"], {"cut": hypotheses["cut"]}, references)["systems"]["cut"]
    rows = [full.tokenizer.encode(f"{source_prefix} {s}".strip()) for s in sources]
    columns = {f"b{batch}": mean_columns(cut, rows, batch) for batch in sorted({b for b, _ in configs})}
    speed = [
        {**{k: v for k, v in r.items() if k != "ms"}, "restricted_ms": r["ms"]}
        for r in against_full(full, {"cut": cut}, rows, configs if timed else [], tokens, warmup, repeats)["cut"]
    ]
    return {
        "vocab": full.tokenizer.vocab_size,
        "rows_kept": len(cut.output_rows) if cut.output_rows is not None else None,  # None: a shortlist
        "mean_columns": columns,  # per batch size: the columns a batch decodes over, on average
        "tokens": checks,
        "bleu": bootstrap["bleu"],
        "bleu_delta": bootstrap["bleu_delta"],
        "bleu_delta_ci": bootstrap["bleu_delta_ci"],
        "gate": verdicts.gate(bootstrap["bleu_delta"], bootstrap["bleu_delta_ci"], gate_bleu),
        "identical_translations": bootstrap["identical"],
        "speed": speed,
    }


def sizes(
    export_dir: str | Path,
    counts: list[int],
    variants_dir: str | Path,
    rows: list[list[int]],
    tokens: int,
    configs: list[tuple[int, int]],
    warmup: int = 1,
    repeats: int = 5,
) -> list[dict[str, Any]]:
    """Speed against the rows kept: the registry's int8-tuned of `export_dir` restricted to each of `counts` rows
    (scratch `rows_probe`s; only counts between the target side's rows and the vocabulary) in `variants_dir`, every
    size and the full model timed in turn (1 thread) at each (batch, beams) with `tokens` forced on `rows` (encoded
    sentences). One row per count."""
    from mtonnx import artefacts
    from mtonnx.variants import registry

    full_dir = Path(variants_dir) / registry.INT8_TUNED.name
    session = SessionSettings(threads=1)
    full = Translator(full_dir, session=session)
    target, vocab = target_rows(full_dir), full.tokenizer.vocab_size
    probes = tuple(registry.rows_probe(c) for c in sorted({c for c in counts if len(target) < c < vocab}, reverse=True))
    built = artefacts.build(export_dir, variants_dir, [p.name for p in probes], extra=probes)
    dirs = {p.settings["rows"]: Path(variants_dir) / p.name for p in probes if p.name in built.manifests}
    cuts = {count: Translator(d, session=session) for count, d in dirs.items()}
    speed = against_full(full, cuts, rows, configs, tokens, warmup, repeats) if cuts else {}
    return [{"rows": c, "step_mb": round(step_bytes(d) / 2**20, 2), "speed": speed[c]} for c, d in dirs.items()]


def against_full(
    full: Translator,
    others: dict[Any, Translator],
    rows: list[list[int]],
    configs: list[tuple[int, int]],
    tokens: int,
    warmup: int,
    repeats: int,
) -> dict[Any, list[dict[str, Any]]]:
    """Per other model, per (batch, beams): its median ms and the full model's, timed in turn with `tokens` forced
    on `rows`, the paired speedup (full / other, repetition by repetition) and whether it is faster beyond noise."""
    out: dict[Any, list[dict[str, Any]]] = {name: [] for name in others}
    models = {"full": full, **{("other", name): t for name, t in others.items()}}
    for batch, beams in configs:
        ids, mask = pad((rows * batch)[:batch], full.tokenizer.pad_token_id)
        options = {"num_beams": beams, "max_new_tokens": tokens, "min_length": tokens + 1}
        timed = interleaved(
            {key: functools.partial(t.generate, ids, mask, **options) for key, t in models.items()},
            max(warmup, 1),
            repeats,
        )
        for name in others:
            mine, base = timed[("other", name)], timed["full"]
            out[name].append(
                {
                    "batch": batch,
                    "beams": beams,
                    "ms": mine["median_ms"],
                    "full_ms": base["median_ms"],
                    "speedup_per_repetition": paired_ratio(base["times_ms"], mine["times_ms"]),
                    "faster": verdicts.faster_beyond_noise(mine["times_ms"], base["times_ms"]),
                }
            )
    return out
