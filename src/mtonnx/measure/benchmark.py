"""The peer benchmark as one call returning a dict: what `mtonnx bench` and notebook 07 run."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mtonnx import data, models, peers, report, tuning
from mtonnx.runtime import MarianSpmTokenizer

RESULTS = "bench.json"


def available_engines(wanted: list[str]) -> tuple[list[str], dict[str, str]]:
    """The wanted engines whose libraries are installed; the others with the reason."""
    skipped = {}
    if importlib.util.find_spec("ctranslate2") is None:
        skipped.update({e: "ctranslate2 not installed (pip install -e '.[bench]')" for e in wanted if e.startswith("ct2")})
    return [e for e in wanted if e not in skipped], skipped


def run_benchmark(params: dict[str, Any], run_dir: str | Path, models_dir: str | Path,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    """Prepare every engine's files from the params' model, measure the matrix, write bench.json."""
    b, e = params["bench"], params["export"]
    model_dir = models.resolve(params["model"], models_dir)["dir"]
    log("preparing exports, the int8 variant and CTranslate2 models ...")
    engines, skipped = available_engines(b["engines"])
    paths = peers.prepare(model_dir, run_dir, exporter=e["exporter"], opset=e["opset"],
                          ct2=not any(name.startswith("ct2") for name in skipped))
    tokenizer = MarianSpmTokenizer(paths.fp32_export)
    rows = [tokenizer.encode(f"{params['model']['source_prefix']} {p.en}".strip()) for p in data.eval_set(params["data"])]
    configs = [peers.Config(batch, beams, threads, tokens) for batch, beams, threads, tokens
               in itertools.product(b["batches"], b["beams"], b["threads"], b["tokens"])]
    log(f"measuring {len(engines)} engines x {len(configs)} configurations, {b['repeats']} repeats ...")
    results = peers.measure(engines, paths, configs, rows, warmup=b["warmup"], repeats=b["repeats"])
    log(f"ablation: the tuning steps one by one ({len(tuning.STEPS)} variants) ...")
    ablation = tuning.ablation({"int8": paths.int8_variant, "int8-tuned": paths.int8_tuned}, rows,
                               list(itertools.product(b["batches"], b["beams"])), tokens=b["tokens"][0],
                               warmup=b["warmup"], repeats=b["repeats"])
    log("memory after load and after one generation at the largest config, one fresh process per engine ...")
    rss = peers.rss_after_load(engines, paths)
    largest = ((rows * max(b["batches"]))[: max(b["batches"])], max(b["beams"]), max(b["tokens"]))
    rss_run = peers.rss_after_load(engines, paths, run=largest)
    memory = tuning.memory_ablation({"int8": paths.int8_variant, "int8-tuned": paths.int8_tuned})
    bound = peers.bytes_per_token(model_dir)
    bandwidth = peers.memory_bandwidth_gbs()
    out = {"results": results, "ablation": ablation, "rss_mb": rss, "rss_after_run_mb": rss_run,
           "memory_ablation": memory, "skipped": skipped, "bytes_per_token": bound,
           "bandwidth_gbs": bandwidth, "paths": paths.__dict__, "sentences": len(rows)}
    path = report.write_json(Path(run_dir) / RESULTS, out)
    return {**out, "path": str(path)}


def _headline(results: list[dict[str, Any]], tokens: int, ratio: Callable[[dict, dict], Any]) -> dict[str, Any]:
    """`ratio(slow, fast)` of each headline pair at 1 thread, `tokens` new tokens (None where one is missing)."""
    def pick(engine: str, batch: int, beams: int) -> dict[str, Any] | None:
        name = peers.Config(batch, beams, 1, tokens).name
        return next((r for r in results if r["engine"] == engine and r["config"] == name), None)

    pairs = {}
    for beams, suffix in ((1, ""), (4, "_beam4")):
        for batch in (1, 8):
            pairs[f"int8_vs_pt_fp32_b{batch}{suffix}"] = ("pytorch-fp32", "mtonnx-int8", batch, beams)
            pairs[f"int8_vs_ct2_int8_b{batch}{suffix}"] = ("ct2-int8", "mtonnx-int8", batch, beams)
    pairs["fp32_vs_optimum_fp32_b1"] = ("optimum-fp32", "mtonnx-fp32", 1, 1)
    out = {}
    for key, (slow, fast, batch, beams) in pairs.items():
        a, b = pick(slow, batch, beams), pick(fast, batch, beams)
        out[key] = ratio(a, b) if a and b else None
    return out


def ratios(results: list[dict[str, Any]], tokens: int) -> dict[str, float | None]:
    """The issue's headline ratios (ratio of medians) at 1 thread, `tokens` new tokens, batch 1 and 8: greedy,
    and beam 4 (`_beam4`)."""
    return _headline(results, tokens, lambda slow, fast: round(slow["median_ms"] / fast["median_ms"], 2))


def paired_ratios(results: list[dict[str, Any]], tokens: int) -> dict[str, dict[str, float] | None]:
    """The same ratios repetition by repetition (repetition i of both engines ran seconds apart, so the machine's
    minute-to-minute drift mostly cancels): median, min and max over the repetitions."""
    def paired(slow: dict, fast: dict) -> dict[str, float] | None:
        if "times_ms" not in slow or "times_ms" not in fast:
            return None
        each = np.array(slow["times_ms"]) / np.array(fast["times_ms"])
        return {"median": round(float(np.median(each)), 2), "min": round(float(each.min()), 2),
                "max": round(float(each.max()), 2)}

    return _headline(results, tokens, paired)


TARGETS = {**{f"int8_vs_pt_fp32_b{b}{s}": 4.0 for b in (1, 8) for s in ("", "_beam4")},
           **{f"int8_vs_ct2_int8_b{b}{s}": 1.15 for b in (1, 8) for s in ("", "_beam4")},
           "fp32_vs_optimum_fp32_b1": 1.0}
