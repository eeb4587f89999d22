"""Untimed work spread over threads, one per usable core.

ONNX Runtime releases the GIL while it computes and a graph renderer is a process of its own, so independent
quality passes, parity checks and renders finish side by side on a small machine. The threads share the cores:
never run this beside a measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from mtonnx.foundation.envinfo import usable_cores

T = TypeVar("T")
R = TypeVar("R")


def per_core(function: Callable[[T], R], items: Iterable[T], workers: int = 0) -> list[R]:
    """`function` of each of `items`, in their order, `workers` at a time (0: one per usable core). The first
    exception raised is raised here, after the running calls end."""
    items = list(items)
    if len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max(1, min(workers or usable_cores(), len(items)))) as pool:
        return list(pool.map(function, items))


def call(job: Callable[[], R]) -> R:
    """A job without arguments, called: `per_core(call, jobs)` runs a list of different jobs side by side."""
    return job()
