"""Every variant measured the same way, on the same sentences, with the same runtime.

- `translate`: the whole eval set, batch 8, greedy, untimed: the texts and token ids the quality verdict uses.
- `compare`: BLEU / chrF of each variant against the references, its deltas to fp32 with 95 % CIs and p-values
  from sacrebleu's paired bootstrap (measure.quality), the quality gate (measure.verdicts), agreement with fp32.
- `speed`: batch-1 and batch-8 greedy and batch-1 beam-4 latency on a fixed subset of the sentences, repetitions
  interleaved across all variants (so a verdict can tell a real speed difference from the machine's drift).
  A subset because timing every sentence of every variant would cost minutes and tell no more.
- `footprint`: size on disk, session load time, resident memory after load in a fresh process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx.foundation.scores import paired_bootstrap, score
from mtonnx.measure import verdicts
from mtonnx.measure.probe import import_cost
from mtonnx.measure.timing import interleaved, summary
from mtonnx.runtime import SessionSettings, Translator
from mtonnx.variants.build import size_mb

Contender = Callable[[list[str], int], Any]  # translates a batch of sentences with a beam count


@dataclass(frozen=True)
class VariantBench:
    """The sentences, references and settings every variant of a run is measured with."""

    sources: list[str]
    references: list[str]
    max_new_tokens: int
    session: SessionSettings = SessionSettings()
    beam_sentences: int = 8
    source_prefix: str = ""
    timing_sentences: int = 16
    repeats: int = 5
    warmup: int = 1

    def _translator(self, variant_dir: str | Path) -> Translator:
        return Translator(variant_dir, decoder="split", session=self.session)

    def _generate(self, translator: Translator, sources: list[str], batch_size: int, beams: int) -> list[list[int]]:
        ids = []
        for i in range(0, len(sources), batch_size):
            batch = translator.tokenizer.batch(sources[i : i + batch_size], self.source_prefix)
            ids += translator.generate(*batch, num_beams=beams, max_new_tokens=self.max_new_tokens)
        return ids

    def translate(self, variant_dir: str | Path) -> dict[str, Any]:
        """Every source sentence, batch 8, greedy: texts, token ids, and a hash of the ids."""
        translator = self._translator(variant_dir)
        ids = self._generate(translator, self.sources, 8, 1)
        return {
            "texts": [translator.tokenizer.decode(row) for row in ids],
            "token_ids": ids,
            "tokens_sha": hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16],
        }

    def runtime(self, variant_dir: str | Path) -> Contender:
        """A speed contender: the runtime on a variant directory."""
        translator = self._translator(variant_dir)
        return lambda batch, beams: self._generate(translator, batch, len(batch), beams)

    def _timed_once(self, contender: Contender) -> dict[str, list[float]]:
        """One repetition: each timing sentence at batch 1, the timing subset in batches of 8, beam 4 at batch 1."""
        subset = self.sources[: self.timing_sentences]
        out: dict[str, list[float]] = {"b1": [], "b8": [], "beam4_b1": []}
        plan = [
            ("b1", [[s] for s in subset], 1),
            ("b8", [subset[i : i + 8] for i in range(0, len(subset), 8)], 1),
            ("beam4_b1", [[s] for s in self.sources[: self.beam_sentences]], 4),
        ]
        for key, batches, beams in plan:
            for batch in batches:
                start = time.perf_counter()
                contender(batch, beams)
                out[key].append((time.perf_counter() - start) * 1000)
        return out

    def speed(self, contenders: dict[str, Contender]) -> dict[str, dict[str, Any]]:
        """Latency of every contender (`runtime(dir)`, or a peer engine from measure.peers), repetitions interleaved
        across them: per configuration the total of each repetition (`times_ms_*`, what verdicts compare) and the
        per-sentence (per-batch) median and p90."""
        timed = interleaved(
            {name: functools.partial(self._timed_once, c) for name, c in contenders.items()}, self.warmup, self.repeats
        )
        out = {}
        for name, t in timed.items():
            row: dict[str, Any] = {}
            for key in ("b1", "b8", "beam4_b1"):
                pooled = summary([ms for rep in t["results"] for ms in rep[key]])
                row[f"p50_ms_{key}"], row[f"p90_ms_{key}"] = pooled["median_ms"], pooled["p90_ms"]
                row[f"times_ms_{key}"] = [round(sum(rep[key]), 2) for rep in t["results"]]
            out[name] = row
        return out

    def footprint(self, variant_dir: str | Path, rss: bool = True) -> dict[str, Any]:
        """Size on disk, load time, and (`rss`) resident memory after load in a fresh process."""
        start = time.perf_counter()
        self._translator(variant_dir)
        row = {"size_mb": size_mb(variant_dir), "load_s": round(time.perf_counter() - start, 3)}
        if rss:
            code = f"from mtonnx.runtime import Translator; Translator({str(variant_dir)!r}, decoder='split')"
            row["rss_mb"] = import_cost(code, repeats=1)["rss_mb"]
        return row


def compare(
    translations: dict[str, dict[str, Any]], references: list[str], gate_bleu: float, baseline: str = "fp32"
) -> dict[str, dict[str, Any]]:
    """Quality of each variant's `translate` output against the references and against the baseline's: scores,
    paired-bootstrap deltas with CIs and p-values, the gate, exact-match rate and BLEU agreement with the baseline,
    and for an inconclusive gate the sentences that would decide it."""
    base = translations[baseline]["texts"]
    others = {name: t["texts"] for name, t in translations.items() if name != baseline}
    stats = paired_bootstrap(base, others, references)
    base_score = score(base, references)
    rows = {}
    for name, t in translations.items():
        if name == baseline:
            entry = {
                "bleu": base_score["bleu"],
                "chrf": base_score["chrf"],
                "bleu_delta": 0.0,
                "bleu_delta_ci": [0.0, 0.0],
                "chrf_delta": 0.0,
                "chrf_delta_ci": [0.0, 0.0],
                "p_value": None,
            }
        else:
            s = stats["systems"][name]
            entry = {k: s[k] for k in ("bleu", "chrf", "bleu_delta", "bleu_delta_ci", "chrf_delta", "chrf_delta_ci")}
            entry["p_value"] = s["bleu_p_value"]
        entry["gate"] = verdicts.gate(entry["bleu_delta"], entry["bleu_delta_ci"], gate_bleu)
        entry["sentences_needed"] = (
            verdicts.sentences_needed(entry["bleu_delta"], entry["bleu_delta_ci"], gate_bleu, len(references))
            if entry["gate"] == "inconclusive"
            else None
        )
        entry["exact_match"] = round(float(np.mean([a == b for a, b in zip(t["texts"], base)])), 3)
        entry["agree_bleu"] = score(t["texts"], base)["bleu"]
        entry["tokens_sha"] = t["tokens_sha"]
        rows[name] = entry
    signature = stats["signature"]
    return {"rows": rows, "signature": signature, "sentences": len(references)}


SPEED_KEYS = ("p50_ms_b1", "p90_ms_b1", "p50_ms_b8", "p90_ms_b8", "p50_ms_beam4_b1", "times_ms_b1", "times_ms_b8")
QUALITY_KEYS = (
    "bleu",
    "chrf",
    "bleu_delta",
    "bleu_delta_ci",
    "chrf_delta",
    "chrf_delta_ci",
    "p_value",
    "gate",
    "sentences_needed",
    "exact_match",
    "agree_bleu",
    "tokens_sha",
)
PEERS = ("pytorch-fp32", "ct2-int8")  # timed beside the variants on the same sentences (measure.peers.contenders)


def table(
    quality: dict[str, dict[str, Any]],
    speed: dict[str, dict[str, Any]],
    footprints: dict[str, dict[str, Any]],
    finite: dict[str, bool],
) -> dict[str, dict[str, Any]]:
    """One row per variant of `quality` (in its order): footprint, speed (and, for the peers that were timed,
    the speed ratio against them at batch 1 and 8: the peer's median / the variant's), quality, finite outputs."""
    rows = {}
    for name, q in quality.items():
        row = {**footprints[name], **{k: speed[name][k] for k in SPEED_KEYS}}
        for peer in (p for p in PEERS if p in speed):
            for b in ("b1", "b8"):
                row[f"vs_{peer}_{b}"] = round(speed[peer][f"p50_ms_{b}"] / speed[name][f"p50_ms_{b}"], 2)
        rows[name] = {**row, **{k: q[k] for k in QUALITY_KEYS}, "finite_outputs": finite[name]}
    return rows


def write_translations(
    variants_dir: str | Path, sources: list[str], references: list[str], translations: dict[str, dict[str, Any]]
) -> Path:
    """variants/translations.json: the eval set and every variant's translations of it (the report's samples and
    `mtonnx compare`'s changed translations read it)."""
    from mtonnx.foundation.files import write_json
    from mtonnx.runtime import layout

    return write_json(
        Path(variants_dir) / layout.TRANSLATIONS,
        {
            "sources": sources,
            "references": references,
            "variants": {name: t["texts"] for name, t in translations.items()},
        },
    )
