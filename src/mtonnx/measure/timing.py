"""The one timing primitive: warm-up, then repetitions interleaved across the things compared.

Repetition i of every contender runs seconds apart, so the machine's minute-to-minute drift mostly cancels in
their ratio (`paired_ratio`). Speed is only measured here and in the notebooks and `mtonnx bench` that call it,
never asserted in unit tests.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def summary(times_ms: list[float]) -> dict[str, Any]:
    """Median, min, max and p90 of a list of milliseconds, and the list itself (in the order measured)."""
    ordered = sorted(times_ms)
    return {
        "median_ms": round(statistics.median(times_ms), 2),
        "min_ms": round(ordered[0], 2),
        "max_ms": round(ordered[-1], 2),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
        "repeats": len(times_ms),
        "times_ms": [round(t, 2) for t in times_ms],
    }


def interleaved(
    contenders: dict[str, Callable[[], Any]], warmup: int = 1, repeats: int = 5
) -> dict[str, dict[str, Any]]:
    """Run each contender `warmup` times untimed, then `repeats` rounds of one timed run each, in turn.

    Returns per contender its `summary`, `result` (what its last run returned) and `results` (what each timed
    run returned, in order).
    """
    results: dict[str, list[Any]] = {name: [] for name in contenders}
    last: dict[str, Any] = {}
    for name, fn in contenders.items():
        for _ in range(warmup):
            last[name] = fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            start = time.perf_counter()
            last[name] = fn()
            times[name].append((time.perf_counter() - start) * 1000)
            results[name].append(last[name])
    return {name: {**summary(times[name]), "result": last.get(name), "results": results[name]} for name in contenders}


def timed(fn: Callable[[], Any], warmup: int = 1, repeats: int = 5) -> dict[str, Any]:
    """`interleaved` with one contender: its summary, without the result."""
    out = interleaved({"fn": fn}, warmup, repeats)["fn"]
    del out["result"], out["results"]
    return out


def paired_ratio(slow_ms: list[float], fast_ms: list[float]) -> dict[str, float] | None:
    """slow / fast repetition by repetition: median, min and max over the repetitions (None without times)."""
    if not slow_ms or not fast_ms or len(slow_ms) != len(fast_ms):
        return None
    each = np.array(slow_ms) / np.array(fast_ms)
    return {
        "median": round(float(np.median(each)), 2),
        "min": round(float(each.min()), 2),
        "max": round(float(each.max()), 2),
    }
