"""Every variant measured the same way, on the same sentences, with the same runtime.

Size on disk, session load time, RSS after load (fresh process), latency p50/p90 at batch 1 and 8 (greedy)
and beam 4 at batch 1, tokens/s, BLEU and chrF against the references, agreement with fp32 (BLEU of the
variant's output against fp32's, exact-match rate), and the quality gate: a variant losing more than
`gate_bleu` BLEU against fp32 is flagged, not hidden.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx.measure.probe import import_cost
from mtonnx.measure.quality import score
from mtonnx.measure.timing import summary
from mtonnx.runtime import SessionSettings, Translator
from mtonnx.variants.build import size_mb

GATE_BLEU = 0.5


@dataclass(frozen=True)
class VariantBench:
    """The sentences, references and settings every variant of a run is measured with."""

    sources: list[str]
    references: list[str]
    max_new_tokens: int
    session: SessionSettings = SessionSettings()
    beam_sentences: int = 8
    source_prefix: str = ""

    def timed_batches(self, translator: Translator, sources: list[str], batch_size: int, beams: int) -> dict[str, Any]:
        """Translate in order-preserving batches; per-batch latency (`timing.summary`), generated tokens, texts."""
        latencies, tokens, texts = [], 0, []
        for i in range(0, len(sources), batch_size):
            ids, mask = translator.tokenizer.batch(sources[i : i + batch_size], self.source_prefix)
            start = time.perf_counter()
            out = translator.generate(ids, mask, num_beams=beams, max_new_tokens=self.max_new_tokens)
            latencies.append((time.perf_counter() - start) * 1000)
            tokens += sum(len(row) for row in out)
            texts += [translator.tokenizer.decode(row) for row in out]
        return {**summary(latencies), "tokens_per_s": round(tokens / (sum(latencies) / 1000), 1), "texts": texts}

    def measure(
        self,
        variant_dir: str | Path,
        fp32_texts: list[str] | None = None,
        rss: bool = True,
        beam_sentences: int | None = None,
    ) -> dict[str, Any]:
        """All measurements of one variant directory (agreement with `fp32_texts` when given)."""
        variant_dir = Path(variant_dir)
        start = time.perf_counter()
        translator = Translator(variant_dir, decoder="split", session=self.session)
        load_s = time.perf_counter() - start
        translator.generate(*translator.tokenizer.batch(self.sources[:1], self.source_prefix), max_new_tokens=4)
        b1 = self.timed_batches(translator, self.sources, 1, 1)
        b8 = self.timed_batches(translator, self.sources, 8, 1)
        beam = self.timed_batches(translator, self.sources[: beam_sentences or self.beam_sentences], 1, 4)
        quality = score(b8["texts"], self.references)
        row = {
            "size_mb": size_mb(variant_dir),
            "load_s": round(load_s, 3),
            "p50_ms_b1": b1["median_ms"],
            "p90_ms_b1": b1["p90_ms"],
            "p50_ms_b8": b8["median_ms"],
            "p90_ms_b8": b8["p90_ms"],
            "p50_ms_beam4_b1": beam["median_ms"],
            "tokens_per_s_b8": b8["tokens_per_s"],
            "bleu": quality["bleu"],
            "chrf": quality["chrf"],
            "bleu_signature": quality["bleu_signature"],
            "texts": b8["texts"],
        }
        if fp32_texts is not None:
            row["agree_bleu"] = score(b8["texts"], fp32_texts)["bleu"]
            row["exact_match"] = round(float(np.mean([a == b for a, b in zip(b8["texts"], fp32_texts)])), 3)
        if rss:
            code = f"from mtonnx.runtime import Translator; Translator({str(variant_dir)!r}, decoder='split')"
            row["rss_mb"] = import_cost(code, repeats=1)["rss_mb"]
        return row


def gate(rows: dict[str, dict[str, Any]], baseline: str = "fp32", max_loss: float = GATE_BLEU) -> dict[str, bool]:
    """True for each variant whose BLEU is more than `max_loss` below the baseline's."""
    reference = rows[baseline]["bleu"]
    return {name: reference - row["bleu"] > max_loss for name, row in rows.items()}


def recommend(rows: dict[str, dict[str, Any]], gated: dict[str, bool], baseline: str = "fp32") -> str:
    """The fastest variant (batch-1 p50) that passes the gate; the baseline when none does."""
    passing = [name for name in rows if not gated[name]]
    return min(passing, key=lambda n: rows[n]["p50_ms_b1"]) if passing else baseline
