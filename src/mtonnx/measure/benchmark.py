"""What is read off the benchmark's studies (measure.studies): the headline ratios against PyTorch, optimum and
CTranslate2, the memory-bandwidth bound of a decoding step, the targets check (the params' `targets`), and the
metrics each study records."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx import data
from mtonnx.engines import BY_NAME, SHORTLIST
from mtonnx.foundation.files import staged_dir
from mtonnx.measure import peers, profile, restriction, step_bytes, verdicts
from mtonnx.measure.timing import paired_ratio, timed
from mtonnx.runtime import load_tokenizer
from mtonnx.runtime.output_rows import OutputRows
from mtonnx.variants.shortlist import vmap_text

SHORTLISTED = "int8-tuned-shortlist"  # int8-tuned decoding over a lexical shortlist per batch (variants.registry)
HEADLINE_TOKENS = 32  # the output length the headline ratios are read at (the shortest one when not measured)


def available_engines(wanted: list[str]) -> tuple[list[str], dict[str, str]]:
    """The wanted engines whose libraries are installed; the others with the reason."""
    skipped = {}
    if importlib.util.find_spec("ctranslate2") is None:
        skipped.update(
            {
                e: "ctranslate2 not installed (pip install -e '.[bench]')"
                for e in wanted
                if BY_NAME[e].package == "ctranslate2"
            }
        )
    return [e for e in wanted if e not in skipped], skipped


def against_source(
    source_dir: str | Path, cut_dir: str | Path, params: dict[str, Any], timed: bool = True
) -> dict[str, Any]:
    """restriction.restriction of a cut variant against the variant it was cut from, on the params' eval set,
    generation settings, gate and bench configurations (timed or not)."""
    b = params["bench"]
    return restriction.restriction(
        source_dir,
        cut_dir,
        data.eval_set(params["data"]),
        list(itertools.product(b["batches"], b["beams"])),
        tokens=headline_tokens(b["tokens"]),
        gate_bleu=params["quant"]["gate_bleu"],
        generation=params["generation"],
        source_prefix=params["model"]["source_prefix"],
        warmup=b["warmup"],
        repeats=b["repeats"],
        timed=timed,
    )


def shortlist(paths: peers.Paths, run_dir: Path, params: dict[str, Any], engines: list[str]) -> dict[str, Any]:
    """The shortlist learned from the trained model's pairs (HSK train split and glosses) with the params' sizes,
    the registry's int8-tuned-shortlist built with it (and CTranslate2 int8 given it as its vocabulary map, when
    installed): tokens and the quality gate against int8-tuned (restriction.restriction), the mean columns and
    lm_head bytes per step at each batch size, and the four engines timed in turn at each (batch, beams), 1 thread."""
    from mtonnx import artefacts
    from mtonnx.settings import Settings
    from mtonnx.variants import registry

    b, prefix = params["bench"], params["model"]["source_prefix"]
    tokenizer = load_tokenizer(paths.int8_tuned)
    learned = artefacts.shortlist(paths.fp32_export, Settings.from_params(params))
    variants = Path(paths.int8_tuned).parent
    inputs = registry.Inputs(shortlist=learned)
    artefacts.build(paths.fp32_export, variants, [SHORTLISTED], inputs, required=True)
    listed = variants / SHORTLISTED
    vmap = Path(run_dir) / "ct2" / "int8-vmap"
    with_ct2 = "ct2-int8" in engines
    if with_ct2:
        with staged_dir(vmap) as tmp:
            for path in Path(paths.ct2_int8).iterdir():
                shutil.copy2(path, tmp / path.name)
            (tmp / "vmap.txt").write_text(vmap_text(learned, tokenizer), encoding="utf-8")
    paths = dataclasses.replace(paths, ct2_vmap_int8=str(vmap))
    result = against_source(paths.int8_tuned, listed, params, timed=False)  # timed below, beside CTranslate2
    rows = [tokenizer.encode(f"{prefix} {p.en}".strip()) for p in data.eval_set(params["data"])]
    columns = result["mean_columns"]
    decoder, column = step_bytes.step_bytes(listed), step_bytes.column_bytes(listed)  # the lm_head is fed
    names = [e for e in SHORTLIST if with_ct2 or BY_NAME[e].kind != "ct2"]
    tokens = headline_tokens(b["tokens"])
    configs = [peers.Config(batch, beams, 1, tokens) for batch, beams in itertools.product(b["batches"], b["beams"])]
    timed = peers.run_configs(names, paths, configs, rows, max(b["warmup"], 1), b["repeats"])
    return {
        **{k: v for k, v in result.items() if k != "speed"},
        "learned": learned["learned"],
        "always": len(learned["always"]),
        "step_mb": {k: round((decoder + n * column) / 2**20, 2) for k, n in columns.items()},
        "full_step_mb": round(step_bytes.step_bytes(paths.int8_tuned) / 2**20, 2),
        "speed": [shortlist_speed(timed, config) for config in configs],
    }


SHORTLIST_PAIRS = {  # (engine, baseline): baseline ms / engine ms, paired, read off the shortlist's timing
    "vs mtonnx-int8": ("mtonnx-shortlist-int8", "mtonnx-int8"),
    "vs ct2-vmap-int8": ("mtonnx-shortlist-int8", "ct2-vmap-int8"),
    "vs ct2-int8": ("mtonnx-shortlist-int8", "ct2-int8"),
    "ct2 vmap vs ct2": ("ct2-vmap-int8", "ct2-int8"),
}


def shortlist_speed(results: list[dict[str, Any]], config: peers.Config) -> dict[str, Any]:
    """One configuration of the shortlist's timing: each engine's median ms and the paired speedups."""
    by = {r["engine"]: r for r in results if r["config"] == config.name}
    row: dict[str, Any] = {"batch": config.batch, "beams": config.beams}
    row.update({f"{name} ms": r["median_ms"] for name, r in by.items()})
    for key, (fast, slow) in SHORTLIST_PAIRS.items():
        if fast in by and slow in by:
            row[f"speedup {key}"] = paired_ratio(by[slow]["times_ms"], by[fast]["times_ms"])
    return row


def search_graph_metrics(search: dict[str, Any]) -> dict[str, Any]:
    """The search graph's sentences with the runtime's tokens per beam count, and its paired median speedups."""
    return {
        "sentences": search["sentences"],
        "same_tokens": {f"beam{beams}": same["same"] for beams, same in search["same_tokens"].items()},
        **{
            f"speedup_vs_{name.replace('-', '_')}": {
                config_key(s): (s.get(f"speedup vs {name}") or {}).get("median") for s in search["speed"]
            }
            for name in ("mtonnx-int8", "ct2-int8")
        },
    }


def headline_tokens(lengths: list[int]) -> int:
    """The forced length the headline ratios are read at: HEADLINE_TOKENS if measured, else the shortest."""
    return HEADLINE_TOKENS if HEADLINE_TOKENS in lengths else min(lengths)


HEADLINE = {  # each headline ratio: (the engine it is measured against, the engine it measures, batch, beams)
    key: pair
    for beams, suffix in ((1, ""), (4, "_beam4"))
    for batch in (1, 8)
    for key, pair in (
        (f"int8_vs_pt_fp32_b{batch}{suffix}", ("pytorch-fp32", "mtonnx-int8", batch, beams)),
        (f"int8_vs_ct2_int8_b{batch}{suffix}", ("ct2-int8", "mtonnx-int8", batch, beams)),
    )
} | {"fp32_vs_optimum_fp32_b1": ("optimum-fp32", "mtonnx-fp32", 1, 1)}


def _headline(results: list[dict[str, Any]], tokens: int, ratio: Callable[[dict, dict], Any]) -> dict[str, Any]:
    """`ratio(slow, fast)` of each HEADLINE pair at 1 thread, `tokens` new tokens (None where one is missing)."""

    def pick(engine: str, batch: int, beams: int) -> dict[str, Any] | None:
        name = peers.Config(batch, beams, 1, tokens).name
        return next((r for r in results if r["engine"] == engine and r["config"] == name), None)

    out = {}
    for key, (slow, fast, batch, beams) in HEADLINE.items():
        a, b = pick(slow, batch, beams), pick(fast, batch, beams)
        out[key] = ratio(a, b) if a and b else None
    return out


def ratios(results: list[dict[str, Any]], tokens: int) -> dict[str, float | None]:
    """The headline ratios (ratio of medians) at 1 thread, `tokens` new tokens, batch 1 and 8: greedy, and beam 4
    (`_beam4`)."""
    return _headline(results, tokens, lambda slow, fast: round(slow["median_ms"] / fast["median_ms"], 2))


def paired_ratios(results: list[dict[str, Any]], tokens: int) -> dict[str, dict[str, float] | None]:
    """The same ratios repetition by repetition (timing.paired_ratio): median, min and max over the repetitions."""
    return _headline(results, tokens, lambda slow, fast: paired_ratio(slow.get("times_ms"), fast.get("times_ms")))


def corpus_summary(results: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """The corpus runs per engine (sentences/s, tokens/s; `t<N>_` for N threads) and mtonnx-int8 / ct2-int8 per
    thread count: the ratio of medians and its spread, paired repetition by repetition where both ran in one
    process (1 thread), else bracketed by the extremes (min: the slowest mtonnx run against the fastest ct2 run)."""
    by = {(r["engine"], r["threads"]): r for r in results}
    engines: dict[str, dict[str, Any]] = {}
    for r in results:
        for key in ("sentences_per_s", "tokens_per_s", "generated_tokens"):
            engines.setdefault(r["engine"], {})[corpus_prefix(r["threads"]) + key] = r[key]
    ratio, spread = {}, {}
    for threads in sorted({r["threads"] for r in results}):
        ours, ct2 = by.get(("mtonnx-int8", threads)), by.get(("ct2-int8", threads))
        if ours is None or ct2 is None:
            continue
        key = corpus_ratio_key(threads)
        ratio[key] = round(ct2["median_ms"] / ours["median_ms"], 2)
        spread[key] = (
            paired_ratio(ct2["times_ms"], ours["times_ms"])
            if threads == 1
            else {
                "median": ratio[key],
                "min": round(min(ct2["times_ms"]) / max(ours["times_ms"]), 2),
                "max": round(max(ct2["times_ms"]) / min(ours["times_ms"]), 2),
            }
        )
    verdict = {key: verdicts.target(spread[key], target) for key in ratio}
    return {"engines": engines, "ratio": ratio, "spread": spread, "targets": verdict}


def corpus_prefix(threads: int) -> str:
    """How an engine's corpus metrics at `threads` threads are prefixed: nothing at 1 thread, `t<threads>_` above."""
    return "" if threads == 1 else f"t{threads}_"


def corpus_ratio_key(threads: int) -> str:
    """How the corpus ratio of mtonnx-int8 over ct2-int8 at `threads` threads is keyed."""
    return f"corpus_vs_ct2_int8_t{threads}"


TARGET_OF = {  # which target of the params' `targets` each headline ratio is held to
    **{f"int8_vs_pt_fp32_b{b}{s}": "int8_vs_pytorch_fp32" for b in (1, 8) for s in ("", "_beam4")},
    **{f"int8_vs_ct2_int8_b{b}{s}": "int8_vs_ct2_int8" for b in (1, 8) for s in ("", "_beam4")},
    "fp32_vs_optimum_fp32_b1": "fp32_vs_optimum_fp32",
}


def targets(results: list[dict[str, Any]], tokens: int, wanted: dict[str, float]) -> list[dict[str, Any]]:
    """Each headline ratio against its target (`wanted`: the params' targets section): the ratio of medians, the
    per-repetition spread, and the verdict (verdicts.target: met / missed / within noise, from the paired
    repetitions)."""
    headline, paired = ratios(results, tokens), paired_ratios(results, tokens)
    return [
        {
            "ratio": key,
            "measured": value,
            "target": wanted[TARGET_OF[key]],
            "verdict": verdicts.target(paired[key], wanted[TARGET_OF[key]]),
            **{f"per repetition: {k}": (paired[key] or {}).get(k) for k in ("median", "min", "max")},
        }
        for key, value in headline.items()
    ]


def bytes_per_token(model_dir: str | Path) -> dict[str, Any]:
    """Weights a decoding step must read at batch 1 (decoder layers without the cached cross K/V projections,
    plus the whole lm_head: of a restricted variant, its kept rows), and what that is in fp32 and int8 bytes."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    d, ffn, layers, vocab = config["d_model"], config["decoder_ffn_dim"], config["decoder_layers"], config["vocab_size"]
    rows = OutputRows.from_dir(model_dir)
    vocab = vocab if rows is None else len(rows)
    per_layer = 4 * d * d + 2 * d * d + 2 * d * ffn  # self q,k,v,o; cross q,o; FFN in and out
    decoder, lm_head = layers * per_layer, vocab * d
    return {
        "decoder_weights": decoder,
        "lm_head_weights": lm_head,
        "weights_per_token": decoder + lm_head,
        "fp32_mb": round((decoder + lm_head) * 4 / 2**20, 1),
        "int8_mb": round((decoder + lm_head) / 2**20, 1),
    }


def memory_bandwidth_gbs(nbytes: int) -> float:
    """Sustained read bandwidth over a working set of `nbytes` (GB/s, median of 5 numpy reductions): the bytes a
    decoding step reads, so the bound is measured where those bytes live (a cache that holds them reads faster than
    main memory; `cache_sizes` tells which level that is)."""
    array = np.ones(max(nbytes, 2**20) // 8, dtype=np.float64)
    repeat = max(1, 2**29 // array.nbytes)  # small sets are read repeatedly, so the clock sees enough work
    return round(
        array.nbytes * repeat / (timed(lambda: [array.sum() for _ in range(repeat)], 1, 5)["median_ms"] / 1000) / 1e9, 2
    )


def cache_sizes() -> dict[str, str]:
    """This CPU's cache sizes by level (L1d, L2, L3, as lscpu lists them), from Linux's sysfs; {} elsewhere."""
    out = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        if kind != "Instruction":
            out[f"L{level}{'d' if kind == 'Data' else ''}"] = size
    return out


def bound_table(peers_result: dict[str, Any], bound: dict[str, Any]) -> list[dict[str, Any]]:
    """Per engine at batch 1 greedy: bytes read per token, the bandwidth bound (at that working set), the measured
    ms per token, and the fraction of the bound reached (1 = as fast as reading the weights once per step allows)."""
    tokens, rows = peers_result["tokens"], []
    for engine in ("mtonnx-fp32", "mtonnx-int8", "ct2-fp32", "ct2-int8", "pytorch-fp32"):
        row = next(
            (
                r
                for r in peers_result["results"]
                if r["engine"] == engine and r["config"] == peers.Config(1, 1, 1, tokens).name
            ),
            None,
        )
        if row is None:
            continue
        nbytes = bound["bytes_per_token"]["weights_per_token"] * (1 if BY_NAME[engine].precision == "int8" else 4)
        bound_ms = nbytes / (bound["bandwidth_gbs"] * 1e9) * 1000
        measured_ms = row["median_ms"] / tokens
        rows.append(
            {
                "engine": engine,
                "MB read per token": round(nbytes / 2**20, 2),
                "bound ms/token": round(bound_ms, 3),
                "measured ms/token": round(measured_ms, 3),
                "fraction of bound": round(bound_ms / measured_ms, 3),
            }
        )
    return rows


ROW_KEYS = ("engine", "config", "batch", "beams", "threads", "tokens", "median_ms", "min_ms", "max_ms", "times_ms")


def metrics(study: str, results: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """What a study records (measure.studies), read off its result in `results` (every study's result so far, by
    name); keys never depend on the params."""
    r, wanted = results[study], params["targets"]
    if study == "peers":
        tokens = r["tokens"]
        return {
            "results": [{k: row[k] for k in (*ROW_KEYS, "speedup_vs_pytorch_fp32")} for row in r["results"]],
            "ratio": ratios(r["results"], tokens),
            "ratio_per_repetition": paired_ratios(r["results"], tokens),
            "targets": {t["ratio"]: t["verdict"] for t in targets(r["results"], tokens, wanted)},
            "headline_tokens": tokens,
            "skipped": r["skipped"],
        }
    if study == "bound":
        fraction = {row["engine"]: row["fraction of bound"] for row in bound_table(results["peers"], r)}
        return {
            "bandwidth_gbs": r["bandwidth_gbs"],
            "bound_working_set_mb": r["working_set_mb"],
            "bound_fraction_b1": fraction.get("mtonnx-int8"),
        }
    if study == "corpus":
        corpus = corpus_summary(r["results"], wanted["corpus_vs_ct2_int8"])
        return {
            "corpus": corpus["engines"],
            "corpus_ratio": corpus["ratio"],
            "corpus_ratio_per_repetition": corpus["spread"],
            "corpus_targets": corpus["targets"],
        }
    if study == "memory":
        return {
            "rss_mb": r["rss_mb"],
            "rss_after_run_mb": r["rss_after_run_mb"],
            "rss_kinds_mb": r["rss_kinds_mb"],
        }
    if study == "profile":
        return {"profile": profile.summary(r)}
    if study == "tuning-memory":
        return {"memory_ablation": {row["step"]: row["rss_mb"] for row in r["steps"]}}
    if study == "tuning":
        keep = (
            "step",
            "batch",
            "beams",
            "median_ms",
            "speedup_vs_previous",
            "same_tokens_as_previous",
            "kept",
            "exact",
        )
        return {"ablation": [{k: row[k] for k in keep} for row in r["ablation"]]}
    if study in ("retirement", "encoder-groups"):
        return {study.replace("-", "_"): r}
    if study == "restriction":
        return {"restricted": r["restricted"], "bytes_per_token": r["step_bytes"]}
    if study == "restriction-sizes":
        return {
            "restricted_rows": {
                str(row["rows"]): {"step_mb": row["step_mb"], **speedups(row["speed"])} for row in r["sizes"]
            }
        }
    if study == "shortlist":
        return {"shortlist": {**r, "speedup": shortlist_speedups(r["speed"])}}
    if study == "search-graph":
        return {"search_graph": search_graph_metrics(r)}
    raise ValueError(f"no metrics for study {study!r}")


def shortlist_speedups(speed: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per pair of SHORTLIST_PAIRS, the paired median speedup of each configuration (b<batch>[_beam<beams>])."""
    return {
        key.replace(" ", "_").replace("-", "_"): {
            config_key(s): (s.get(f"speedup {key}") or {}).get("median") for s in speed
        }
        for key in SHORTLIST_PAIRS
    }


def speedups(speed: list[dict[str, Any]]) -> dict[str, float | None]:
    """The paired median speedup of each (batch, beams) row, keyed speedup_b<batch>[_beam<beams>]."""
    return {f"speedup_{config_key(s)}": (s["speedup_per_repetition"] or {}).get("median") for s in speed}


def config_key(row: dict[str, Any]) -> str:
    """b<batch>, plus _beam<beams> above one beam: how a (batch, beams) row is keyed in the metrics."""
    return f"b{row['batch']}" + (f"_beam{row['beams']}" if row["beams"] > 1 else "")
