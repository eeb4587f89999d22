"""Every variant measured the same way, on the same sentences, with the same runtime.

Size on disk, session load time, RSS after load (fresh process), latency p50/p90 at batch 1 and 8 (greedy)
and beam 4 at batch 1, tokens/s, BLEU and chrF against the references, agreement with fp32 (BLEU of the
variant's output against fp32's, exact-match rate), and the quality gate: a variant losing more than
`gate_bleu` BLEU against fp32 is flagged, not hidden.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx import bench
from mtonnx.evaluate import score
from mtonnx.quantize import FILES
from mtonnx.runtime import SessionSettings, Translator

GATE_BLEU = 0.5


def timed_batches(translator: Translator, sources: list[str], batch_size: int, num_beams: int,
                  max_new_tokens: int, source_prefix: str = "") -> dict[str, Any]:
    """Translate in order-preserving batches; per-batch latency, generated tokens and the texts."""
    latencies, tokens, texts = [], 0, []
    for i in range(0, len(sources), batch_size):
        ids, mask = translator.tokenizer.batch(sources[i : i + batch_size], source_prefix)
        start = time.perf_counter()
        out = translator.generate(ids, mask, num_beams=num_beams, max_new_tokens=max_new_tokens)
        latencies.append((time.perf_counter() - start) * 1000)
        tokens += sum(len(row) for row in out)
        texts += [translator.tokenizer.decode(row) for row in out]
    ordered = sorted(latencies)
    return {"p50_ms": round(statistics.median(latencies), 2),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
            "tokens_per_s": round(tokens / (sum(latencies) / 1000), 1), "texts": texts}


def measure(variant_dir: str | Path, sources: list[str], references: list[str], *, max_new_tokens: int,
            session: SessionSettings, beam_sentences: int = 8, fp32_texts: list[str] | None = None,
            source_prefix: str = "", rss: bool = True) -> dict[str, Any]:
    """All measurements of one variant directory."""
    variant_dir = Path(variant_dir)
    start = time.perf_counter()
    translator = Translator(variant_dir, decoder="split", session=session)
    load_s = time.perf_counter() - start
    kwargs = dict(max_new_tokens=max_new_tokens, source_prefix=source_prefix)
    translator.generate(*translator.tokenizer.batch(sources[:1], source_prefix), max_new_tokens=4)  # warm-up
    b1 = timed_batches(translator, sources, 1, 1, **kwargs)
    b8 = timed_batches(translator, sources, 8, 1, **kwargs)
    beam = timed_batches(translator, sources[:beam_sentences], 1, 4, **kwargs)
    quality = score(b8["texts"], references)
    row = {
        "size_mb": round(sum((variant_dir / f).stat().st_size for f in FILES) / 2**20, 2),
        "load_s": round(load_s, 3),
        "p50_ms_b1": b1["p50_ms"], "p90_ms_b1": b1["p90_ms"], "p50_ms_b8": b8["p50_ms"], "p90_ms_b8": b8["p90_ms"],
        "p50_ms_beam4_b1": beam["p50_ms"], "tokens_per_s_b8": b8["tokens_per_s"],
        "bleu": quality["bleu"], "chrf": quality["chrf"], "bleu_signature": quality["bleu_signature"],
        "texts": b8["texts"],
    }
    if fp32_texts is not None:
        row["agree_bleu"] = score(b8["texts"], fp32_texts)["bleu"]
        row["exact_match"] = round(float(np.mean([a == b for a, b in zip(b8["texts"], fp32_texts)])), 3)
    if rss:
        row["rss_mb"] = bench.import_cost(
            f"from mtonnx.runtime import Translator; Translator({str(variant_dir)!r}, decoder='split')", repeats=1)["rss_mb"]
    return row


def gate(rows: dict[str, dict[str, Any]], baseline: str = "fp32", max_loss: float = GATE_BLEU) -> dict[str, bool]:
    """True for each variant whose BLEU is more than `max_loss` below the baseline's."""
    reference = rows[baseline]["bleu"]
    return {name: reference - row["bleu"] > max_loss for name, row in rows.items()}


def recommend(rows: dict[str, dict[str, Any]], gated: dict[str, bool], baseline: str = "fp32") -> str:
    """The fastest variant (batch-1 p50) that passes the gate; the baseline when none does."""
    passing = [name for name in rows if not gated[name]]
    return min(passing, key=lambda n: rows[n]["p50_ms_b1"]) if passing else baseline
