"""Notebook 09's ablations: what each tuning step (variants.tuned) changed in the step graph, bought in time and in
memory, and the tokens it kept, and what the runtime's real-length choices buy (retiring done sentences, encoding
rows of similar length together)."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtonnx.measure.probe import import_cost
from mtonnx.measure.timing import interleaved, paired_ratio
from mtonnx.runtime import SessionSettings, Translator
from mtonnx.runtime.layouts import BY_NAME
from mtonnx.runtime.sessions import ORT_DEFAULTS
from mtonnx.runtime.tokenizer import pad


@dataclass(frozen=True)
class Step:
    """One row of the ablation: a variant directory, a layout, session settings, screening, the search head, and
    the call that builds what it adds."""

    label: str
    variant: str
    layout: str
    session: dict[str, Any]
    screen: bool
    kept: bool  # part of the project's int8 runtime (False: measured, rejected)
    exact: bool = True  # keeps every token (False: moves int8 tokens, so its variants pass notebook 06's gate with it)
    head: bool = False  # beam search ranks from the search head (decoding.GenerationSettings.search_head)
    call: str = ""  # what builds the change (a graph pass or a runtime setting), as a reader would call it


# Each step adds one change to the step before; all but the last with every ORT fusion on.
STEPS = (
    Step(
        "int8 as notebook 06 builds it",
        "int8",
        "split",
        ORT_DEFAULTS,
        False,
        True,
        call="variants.transforms.dynamic_int8()",
    ),
    Step(
        "+ key transposes folded",
        "int8-tuned",
        "split",
        ORT_DEFAULTS,
        False,
        True,
        call="passes.key_transposes.fold_key_transposes(model)",
    ),
    Step(
        "+ screened beam candidates",
        "int8-tuned",
        "split",
        ORT_DEFAULTS,
        True,
        True,
        call="generate(..., screen_candidates=True)",
    ),
    Step(
        "+ lean layout (no decoder_model)",
        "int8-tuned",
        "lean",
        ORT_DEFAULTS,
        True,
        True,
        call="passes.cross_kv.extract_cross_kv(decoder_model, out)",
    ),
    Step(
        "+ tuned step (keys in place, cross-attention per sentence)",
        "int8-tuned",
        "tuned",
        ORT_DEFAULTS,
        True,
        True,
        call="passes.tuned_step.tuned_step(model)",
    ),
    Step(
        "+ SkipLayerNormFusion off (the runtime's default)",
        "int8-tuned",
        "tuned",
        {},
        True,
        True,
        exact=False,
        call="runtime.sessions.SessionSettings() (DISABLED_OPTIMIZERS)",
    ),
    Step(
        "+ search head (top logits and normalizer in the step graph)",
        "int8-tuned",
        "tuned",
        {},
        True,
        True,
        head=True,
        call="passes.search_head.search_head_model()",
    ),
    Step(
        "+ in-place step (caches bound as past and present, attention as ORT's fused ops)",
        "int8-tuned",
        "inplace",
        {},
        True,
        True,
        exact=False,
        head=True,
        call="passes.inplace_attention.inplace_step(model)",
    ),
)
# What each step did to resident memory after load (lean comes after the mapped file here: the split layout
# shows the file's effect alone).
MEMORY_STEPS = (
    ("int8 as notebook 06 builds it", "int8", "split"),
    ("+ weights in one mapped file", "int8-tuned", "split"),
    ("+ lean layout (no decoder_model)", "int8-tuned", "lean"),
    ("+ tuned step (keys in place, cross-attention per sentence)", "int8-tuned", "tuned"),
    ("+ in-place step (caches bound as past and present, attention as ORT's fused ops)", "int8-tuned", "inplace"),
)


def _generate(translator: Translator, step: Step, ids, mask, beams: int, tokens: int) -> list[list[int]]:
    return translator.generate(
        ids,
        mask,
        num_beams=beams,
        max_new_tokens=tokens,
        min_length=tokens + 1,
        screen_candidates=step.screen,
        search_head=step.head,
    )


def ablation(
    dirs: dict[str, str],
    rows: list[list[int]],
    configs: list[tuple[int, int]],
    tokens: int,
    warmup: int = 1,
    repeats: int = 5,
    threads: int = 1,
) -> list[dict[str, Any]]:
    """Median ms of each STEPS entry per (batch, beams) config, repetitions interleaved; speedup against the
    first step and against the step before, and whether the tokens equal the step before's (at least one
    untimed run per step)."""
    translators = [
        Translator(dirs[step.variant], decoder=step.layout, session=SessionSettings(threads=threads, **step.session))
        for step in STEPS
    ]
    results = []
    for batch, beams in configs:
        ids, mask = pad((rows * batch)[:batch], translators[0].tokenizer.pad_token_id)
        timed = interleaved(
            {
                step.label: functools.partial(_generate, translator, step, ids, mask, beams, tokens)
                for step, translator in zip(STEPS, translators)
            },
            max(warmup, 1),
            repeats,
        )
        measured = [timed[step.label] for step in STEPS]
        for i, (step, m) in enumerate(zip(STEPS, measured)):
            previous = measured[max(i - 1, 0)]
            results.append(
                {
                    "step": step.label,
                    "variant": step.variant,
                    "layout": step.layout,
                    "kept": step.kept,
                    "exact": step.exact,
                    "batch": batch,
                    "beams": beams,
                    "tokens": tokens,
                    "median_ms": m["median_ms"],
                    "min_ms": m["min_ms"],
                    "max_ms": m["max_ms"],
                    "times_ms": m["times_ms"],
                    "speedup": round(measured[0]["median_ms"] / m["median_ms"], 2),
                    "speedup_vs_previous": round(previous["median_ms"] / m["median_ms"], 2),
                    "speedup_vs_previous_paired": paired_ratio(previous["times_ms"], m["times_ms"]),
                    "same_tokens_as_previous": m["result"] == previous["result"],
                }
            )
    return results


def graph_changes(dirs: dict[str, str]) -> list[dict[str, Any]]:
    """Per STEPS entry, the graph a step runs (its layout's step file, and the search head when it uses it): its
    node count, and each op type whose count differs from the step before's, as [before, after]."""
    from mtonnx.passes.graphinfo import op_counts
    from mtonnx.runtime.layout import SEARCH_HEAD

    out, previous = [], None
    for step in STEPS:
        files = [Path(dirs[step.variant]) / BY_NAME[step.layout].files[-1]]
        if step.head and (Path(dirs[step.variant]) / SEARCH_HEAD).is_file():
            files.append(Path(dirs[step.variant]) / SEARCH_HEAD)
        counts = sum((op_counts(f) for f in files if f.is_file()), start=Counter())
        before = previous if previous is not None else counts
        changed = {op: [before.get(op, 0), counts.get(op, 0)] for op in sorted(set(before) | set(counts))}
        out.append(
            {
                "step": step.label,
                "call": step.call,
                "files": [f.name for f in files],
                "nodes": sum(counts.values()),
                "changed ops": {op: n for op, n in changed.items() if n[0] != n[1]},
            }
        )
        previous = counts
    return out


def step_view(rows: list[dict[str, Any]], graphs: list[dict[str, Any]], index: int) -> dict[str, Any]:
    """What notebook 09 shows for STEPS[index]: a line naming the call and the graph it runs, the ops whose counts
    changed ({op: {"before", "after"}}), and per (batch, beams) its median ms, the paired speedup against the step
    before (median, min and max over the repetitions) and whether it kept the tokens of the step before."""
    step, graph = STEPS[index], graphs[index]
    measured = [
        {
            "config": f"b{r['batch']} beam{r['beams']}",
            "median ms": r["median_ms"],
            **{f"vs previous ({k})": v for k, v in (r["speedup_vs_previous_paired"] or {}).items()},
            "same tokens as previous": r["same_tokens_as_previous"],
        }
        for r in rows
        if r["step"] == step.label
    ]
    return {
        "summary": f"{step.label}: {step.call}; runs {' + '.join(graph['files'])}, {graph['nodes']} nodes",
        "graph": {op: {"before": n[0], "after": n[1]} for op, n in graph["changed ops"].items()},
        "measured": measured,
    }


# The runtime's choices that only real lengths show (decoding.GenerationSettings flags, on by default): the forced
# lengths above never retire a sentence, and their batches are the eval set's first rows, whatever their lengths.
REAL_LENGTH_OPTIONS = {
    "retire_finished": "retiring done sentences",
    "group_encoder": "encoding rows of similar length together",
}


def real_lengths(
    variant_dir: str,
    rows: list[list[int]],
    batch: int,
    beams: int,
    max_new_tokens: int,
    option: str = "retire_finished",
    warmup: int = 1,
    repeats: int = 3,
    threads: int = 1,
) -> dict[str, Any]:
    """What a REAL_LENGTH_OPTIONS flag buys where sentences have their own lengths: `rows` in length-sorted batches
    (Translator.generate_sorted), with the flag on and off, repetitions interleaved; sentences per second, the
    paired speedup and how many sentences got the same tokens (all of them, but for dynamic int8, whose activation
    scale spans the rows of a batch or of an encoder run)."""
    if option not in REAL_LENGTH_OPTIONS:
        raise ValueError(f"option must be one of {', '.join(REAL_LENGTH_OPTIONS)}, got {option!r}")
    translator = Translator(variant_dir, session=SessionSettings(threads=threads))
    timed = interleaved(
        {
            on: functools.partial(
                translator.generate_sorted, rows, batch, num_beams=beams, max_new_tokens=max_new_tokens, **{option: on}
            )
            for on in (True, False)
        },
        max(warmup, 1),
        repeats,
    )
    with_it, without = timed[True], timed[False]
    return {
        "option": option,
        "batch": batch,
        "beams": beams,
        "sentences": len(rows),
        "sentences_per_s": round(len(rows) / with_it["median_ms"] * 1000, 1),
        "sentences_per_s_without": round(len(rows) / without["median_ms"] * 1000, 1),
        "speedup": paired_ratio(without["times_ms"], with_it["times_ms"]),
        "same_tokens": sum(a == b for a, b in zip(with_it["result"], without["result"])),
    }


def memory_ablation(dirs: dict[str, str]) -> list[dict[str, Any]]:
    """RSS (MB) of a fresh process after loading a Translator at each MEMORY_STEPS entry (1 thread); None
    where the variant lacks the layout's files (a TorchScript export has no lean layout)."""
    rows = []
    for label, variant, layout in MEMORY_STEPS:
        code = (
            f"from mtonnx.runtime import SessionSettings, Translator\n"
            f"Translator({dirs[variant]!r}, decoder={layout!r}, session=SessionSettings(threads=1))"
        )
        present = all((Path(dirs[variant]) / f).is_file() for f in BY_NAME[layout].files)
        rows.append(
            {
                "step": label,
                "variant": variant,
                "layout": layout,
                "rss_mb": import_cost(code, repeats=1)["rss_mb"] if present else None,
            }
        )
    return rows
