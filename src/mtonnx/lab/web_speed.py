"""The same model's speed in three runtimes: the Python runtime, the JavaScript runtime in Node (onnxruntime-node)
and in Chromium (onnxruntime-web, WASM), on the same ONNX files and the same sentences.

Each runtime decodes the sentences in the same batches of 8 (sorted by length once, for all of them), with the
same beams, on one thread: the Python and Node sessions are set to one, and the page is served without cross-origin
isolation, where WASM runs on one. After a warm-up of each, the repetitions are interleaved (Python, Node, the
page, then again), so a machine busy for a while slows all three alike; the ratios to Python are paired repetition
by repetition. Node's time is read around its request (the JSON over a pipe is a few milliseconds of seconds), the
page's inside it (performance.now), Python's around `generate_sorted`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx.lab.webpage import PageSession
from mtonnx.measure.timing import paired_ratio
from mtonnx.runtime import SessionSettings, Translator
from mtonnx.web.node import NodeRuntime

ENGINES = ("python", "node", "chromium-wasm")
BATCH = 8


def web_speed(
    web_dir: str | Path, onnx_dir: str | Path, texts: list[str], beams: int, max_new_tokens: int, repeats: int
) -> dict[str, Any]:
    """Seconds per repetition of each runtime on `texts`, words per second (medians) and the paired ratios of each
    JavaScript runtime's time to Python's (above 1: slower than Python)."""
    python = Translator(onnx_dir, decoder="merged", session=SessionSettings(threads=1))
    order = sorted(texts, key=lambda t: len(python.tokenizer.encode(t)))
    encoded = [python.tokenizer.encode(t) for t in order]
    seconds: dict[str, list[float]] = {engine: [] for engine in ENGINES}
    with NodeRuntime(web_dir) as node, PageSession(web_dir) as page:

        def once(engine: str) -> float:
            if engine == "python":
                start = time.perf_counter()
                python.generate_sorted(encoded, BATCH, num_beams=beams, max_new_tokens=max_new_tokens)
                return time.perf_counter() - start
            if engine == "node":
                start = time.perf_counter()
                node.generate(order, num_beams=beams, max_new_tokens=max_new_tokens, batch_size=BATCH)
                return time.perf_counter() - start
            return page.generate(order, num_beams=beams, max_new_tokens=max_new_tokens)[2]

        for engine in ENGINES:
            once(engine)  # warm-up
        for _ in range(repeats):
            for engine in ENGINES:
                seconds[engine].append(round(once(engine), 4))
        load_s = page.load_s
    words = sum(len(t.split()) for t in texts)
    return {
        "sentences": len(texts),
        "words": words,
        "beams": beams,
        "repeats": repeats,
        "threads": 1,
        "seconds": seconds,
        "words_per_second": {e: round(words / float(np.median(s)), 1) for e, s in seconds.items()},
        "vs_python": {e: paired_ratio(seconds[e], seconds["python"]) for e in ENGINES[1:]},
        "page_load_s": load_s,
    }
