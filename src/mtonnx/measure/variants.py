"""Every variant measured the same way, on the same sentences, with the runtime a deployment loads.

- `translate`: the whole eval set, batch 8, greedy, untimed: the texts and token ids the quality verdict uses;
  `translate_all` translates several variants side by side, one per core (each session keeps its own thread count,
  so the tokens are those of one variant at a time: the cores only shorten the wait).
- `compare`: BLEU / chrF of each variant against the references, its deltas to fp32 with 95 % CIs and p-values
  from sacrebleu's paired bootstrap (mtonnx.scores), the quality gate (measure.verdicts); its fidelity to fp32
  (the share of sentences identical to fp32's, with a 95 % CI, chrF against fp32's output) and the fidelity gate.
- `invariance`: the first sentences of the eval set translated alone, in batches and shuffled, at beam 1 and at the
  workload's beams: the share whose tokens are the same every way (a translation must not depend on what it is
  batched with), and the sentences that change; `invariance_all` does several variants, one per core, untimed;
- `speed`: the workload (the params' batch sizes at their beams, what the service and batch run) on a fixed subset
  of the sentences (a corpus workload: that many at their real lengths, sorted into batches), repetitions
  interleaved across all variants (so a verdict can tell a real speed difference from the machine's drift), and
  the objective: the workload's time, one number per variant and repetition. A subset because timing every
  sentence of every variant would cost minutes and tell no more.
- `footprint`: size on disk, session load time, resident memory after load in a fresh process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx.foundation.side_by_side import per_core
from mtonnx.measure import verdicts
from mtonnx.measure.probe import import_cost
from mtonnx.measure.timing import interleaved, paired_ratio, summary
from mtonnx.runtime import SessionSettings, Translator
from mtonnx.scores import fidelity, paired_bootstrap, score
from mtonnx.variants.build import size_mb

Contender = Callable[[list[str], int], Any]  # translates a batch of sentences with a beam count


@dataclass(frozen=True)
class Workload:
    """What the objective times: batches of `batch` sentences at `beams` beams, weighted by `weight`; with
    `corpus` > 0, that many sentences of the eval set at their real lengths, sorted by length into those batches."""

    batch: int
    beams: int
    weight: float = 1.0
    corpus: int = 0

    @property
    def key(self) -> str:
        """b<batch>_beam<beams> (corpus_b<batch>_beam<beams> for a corpus): how its timings are keyed
        (`times_ms_<key>`, `p50_ms_<key>`)."""
        return f"{'corpus_' if self.corpus else ''}b{self.batch}_beam{self.beams}"


def workload(quant: dict[str, Any], generation: dict[str, Any]) -> tuple[Workload, ...]:
    """The params' workload: `quant.workload_batches` at `quant.workload_beams` (default: generation.num_beams, what
    the service and batch decode with), each weighted by `quant.workload_weights` (default 1), over
    `quant.workload_corpus` sentences at their real lengths when it is set (absent or 0: the latency workload)."""
    beams = quant["workload_beams"] or generation["num_beams"]
    weights = quant["workload_weights"] or [1.0] * len(quant["workload_batches"])
    if len(weights) != len(quant["workload_batches"]):
        raise ValueError(
            f"quant.workload_weights has {len(weights)} weights for {len(quant['workload_batches'])} batch sizes"
        )
    corpus = quant.get("workload_corpus") or 0
    return tuple(Workload(b, beams, w, corpus) for b, w in zip(quant["workload_batches"], weights))


def corpus_batches(sources: list[str], count: int, batch: int) -> list[list[str]]:
    """A corpus workload's batches: `count` of `sources`, evenly spaced (all of them when there are fewer), sorted
    longest first by characters (a measure every contender shares: no tokenizer decides the batches), in batches
    of at most `batch`."""
    picked = sources if count >= len(sources) else [sources[i * len(sources) // count] for i in range(count)]
    ordered = sorted(picked, key=len, reverse=True)
    return [ordered[i : i + batch] for i in range(0, len(ordered), batch)]


@dataclass(frozen=True)
class VariantBench:
    """The sentences, references and settings every variant of a run is measured with."""

    sources: list[str]
    references: list[str]
    max_new_tokens: int
    session: SessionSettings = SessionSettings()
    source_prefix: str = ""
    timing_sentences: int = 16
    repeats: int = 5
    warmup: int = 1
    workload: tuple[Workload, ...] = (Workload(1, 4), Workload(8, 4))
    invariance_sentences: int = 200
    invariance_batch: int = 16

    @property
    def objective(self) -> str:
        """The objective's name (verdicts.objective_name), e.g. latency@b1,b8;beams=4."""
        beams = {w.beams for w in self.workload}
        return verdicts.objective_name(
            [w.batch for w in self.workload],
            beams.pop() if len(beams) == 1 else 0,
            [w.weight for w in self.workload],
            max(w.corpus for w in self.workload),
        )

    def _translator(self, variant_dir: str | Path) -> Translator:
        return Translator(variant_dir, session=self.session)  # the layout a deployment loads (decoder="auto")

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

    def invariance(self, variant_dir: str | Path) -> dict[str, Any]:
        """The first `invariance_sentences` sources, each beam count of (1, the workload's beams): translated one
        at a time, in batches of `invariance_batch`, and shuffled (a fixed permutation) in batches of that size.
        Per beam count the share of sentences whose tokens are identical all three ways; `share` is the lowest, and
        `changed` lists, per beam count, the indices of the sentences that differ."""
        translator = self._translator(variant_dir)
        sources = self.sources[: self.invariance_sentences]
        order = np.random.default_rng(0).permutation(len(sources)).tolist()
        out: dict[str, Any] = {"sentences": len(sources), "batch": self.invariance_batch, "changed": {}}
        for beams in sorted({1, *(w.beams for w in self.workload)}):
            alone = [self._generate(translator, [s], 1, beams)[0] for s in sources]
            batched = self._generate(translator, sources, self.invariance_batch, beams)
            shuffled = self._generate(translator, [sources[i] for i in order], self.invariance_batch, beams)
            unshuffled = [shuffled[order.index(i)] for i in range(len(sources))]
            changed = [i for i in range(len(sources)) if not alone[i] == batched[i] == unshuffled[i]]
            out[f"beam{beams}"] = round(1 - len(changed) / max(len(sources), 1), 4)
            out["changed"][f"beam{beams}"] = changed
        out["share"] = min(v for k, v in out.items() if k.startswith("beam"))
        return out

    def invariance_examples(
        self,
        moving: tuple[str, str | Path],
        steady: tuple[str, str | Path],
        changed: list[int],
        beams: int,
        limit: int = 5,
    ) -> list[dict[str, str]]:
        """Up to `limit` of the `changed` sentences (`invariance`'s indices for the variant `moving`, (name, dir), at
        `beams`) whose translation alone differs from the one in its batch (the batches `invariance` made), beside
        the variant `steady`'s translation alone, for a lesson to show."""
        (name, directory), (steady_name, steady_dir) = moving, steady
        moved, fixed, size = self._translator(directory), self._translator(steady_dir), self.invariance_batch
        rows = []
        for i in changed:
            start = i - i % size
            batched = self._generate(moved, self.sources[start : start + size], size, beams)[i - start]
            alone = self._generate(moved, [self.sources[i]], 1, beams)[0]
            if alone == batched:
                continue  # it moved when shuffled only
            steady_alone = self._generate(fixed, [self.sources[i]], 1, beams)[0]
            rows.append(
                {
                    "English": self.sources[i],
                    f"{name}, alone": moved.tokenizer.decode(alone),
                    f"{name}, in a batch of {size}": moved.tokenizer.decode(batched),
                    f"{steady_name}, any batch": fixed.tokenizer.decode(steady_alone),
                }
            )
            if len(rows) == limit:
                break
        return rows

    def invariance_all(self, variant_dirs: Mapping[str, str | Path], workers: int = 0) -> dict[str, dict[str, Any]]:
        """`invariance` of every variant in `variant_dirs`, `workers` at a time (0: one per usable core). Untimed."""
        return dict(zip(variant_dirs, per_core(self.invariance, variant_dirs.values(), workers)))

    def translate_all(self, variant_dirs: Mapping[str, str | Path], workers: int = 0) -> dict[str, dict[str, Any]]:
        """`translate` of every variant in `variant_dirs` ({name: dir}), `workers` at a time on threads (0: one per
        usable core; ONNX Runtime releases the GIL while it computes). Untimed: never run it beside a measurement."""
        return dict(zip(variant_dirs, per_core(self.translate, variant_dirs.values(), workers)))

    def runtime(self, variant_dir: str | Path) -> Contender:
        """A speed contender: the runtime on a variant directory."""
        translator = self._translator(variant_dir)
        return lambda batch, beams: self._generate(translator, batch, len(batch), beams)

    def _timed_once(self, contender: Contender) -> dict[str, list[float]]:
        """One repetition of the workload: the timing sentences in batches of each workload's size and beams (a
        corpus workload: its sentences in `corpus_batches`)."""
        subset = self.sources[: self.timing_sentences]
        out: dict[str, list[float]] = {}
        for w in self.workload:
            out[w.key] = []
            batches = (
                corpus_batches(self.sources, w.corpus, w.batch)
                if w.corpus
                else [subset[i : i + w.batch] for i in range(0, len(subset), w.batch)]
            )
            for batch in batches:
                start = time.perf_counter()
                contender(batch, w.beams)
                out[w.key].append((time.perf_counter() - start) * 1000)
        return out

    def speed(self, contenders: dict[str, Contender]) -> dict[str, dict[str, Any]]:
        """Latency of every contender (`runtime(dir)`, or a peer engine from measure.peers), repetitions interleaved
        across them: per workload entry the per-batch median and p90 and the total of each repetition
        (`times_ms_<key>`), and the objective, one number per repetition (`times_ms_workload`: the weighted sum of
        the totals) with its median (`workload_ms`)."""
        timed = interleaved(
            {name: functools.partial(self._timed_once, c) for name, c in contenders.items()}, self.warmup, self.repeats
        )
        out = {}
        for name, t in timed.items():
            row: dict[str, Any] = {}
            for w in self.workload:
                pooled = summary([ms for rep in t["results"] for ms in rep[w.key]])
                row[f"p50_ms_{w.key}"], row[f"p90_ms_{w.key}"] = pooled["median_ms"], pooled["p90_ms"]
                row[f"times_ms_{w.key}"] = [round(sum(rep[w.key]), 2) for rep in t["results"]]
            row["times_ms_workload"] = [
                round(sum(w.weight * sum(rep[w.key]) for w in self.workload), 2) for rep in t["results"]
            ]
            row["workload_ms"] = round(float(np.median(row["times_ms_workload"])), 2)
            out[name] = row
        return out

    def footprint(self, variant_dir: str | Path, rss: bool = True) -> dict[str, Any]:
        """Size on disk (the whole directory a deployment copies), load time, and (`rss`) resident memory after
        load in a fresh process."""
        start = time.perf_counter()
        self._translator(variant_dir)
        row = {"size_mb": size_mb(variant_dir), "load_s": round(time.perf_counter() - start, 3)}
        if rss:
            code = f"from mtonnx.runtime import Translator; Translator({str(variant_dir)!r})"
            row["rss_mb"] = import_cost(code, repeats=1)["rss_mb"]
        return row


def compare(
    translations: dict[str, dict[str, Any]],
    references: list[str],
    gate_bleu: float,
    fidelity_min: float,
    baseline: str = "fp32",
    invariance: dict[str, dict[str, Any]] | None = None,
    exempt: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The gates of each variant's `translate` output: quality against the references (scores, paired-bootstrap
    deltas to the baseline with CIs and p-values, the gate, and for an inconclusive gate the sentences that would
    decide it), fidelity to the baseline's own translations (the share identical with its CI, chrF against
    them, the fidelity gate at `fidelity_min`) and, given `invariance` (`VariantBench.invariance` by name), batch
    invariance with its gate (`not measured` for a variant it lacks), `exempt` naming the variants opted out and
    why. ValueError for an exemption of a variant that is not among the translations."""
    unknown = sorted(set(exempt or {}) - set(translations))
    if unknown:
        raise ValueError(
            f"quant.invariance_exempt names {', '.join(unknown)}, which this run does not build: "
            f"known here: {', '.join(translations)}"
        )
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
        entry["fidelity"] = fidelity(t["texts"], base)
        entry["fidelity_gate"] = verdicts.fidelity_gate(entry["fidelity"]["same_as_fp32_ci"], fidelity_min)
        if invariance is not None:
            entry["batch_invariance"] = invariance.get(name)
            entry["invariance_gate"] = verdicts.invariance_gate(invariance.get(name), (exempt or {}).get(name))
        entry["tokens_sha"] = t["tokens_sha"]
        rows[name] = entry
    signature = stats["signature"]
    return {"rows": rows, "signature": signature, "sentences": len(references)}


def candidates(rows: dict[str, dict[str, Any]], baseline: str = "fp32") -> list[str]:
    """The variants the recommendation chooses among, the baseline first: deployable, and past every gate
    (verdicts.passes). Only they are timed: a variant that fails a gate is never recommended, however fast."""
    from mtonnx.variants import registry

    passing = [n for n, r in rows.items() if verdicts.passes(r)]
    return [
        n for n in dict.fromkeys([baseline, *passing]) if n not in registry.BY_NAME or registry.BY_NAME[n].deployable
    ]


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
    "fidelity",
    "fidelity_gate",
    "batch_invariance",
    "invariance_gate",
    "tokens_sha",
)
PEERS = ("pytorch-fp32", "ct2-int8")  # timed beside the variants on the same sentences (measure.peers.contenders)


def table(
    quality: dict[str, dict[str, Any]],
    speed: dict[str, dict[str, Any]],
    footprints: dict[str, dict[str, Any]],
    finite: dict[str, bool],
) -> dict[str, dict[str, Any]]:
    """One row per variant of `quality` (in its order): what the registry says of it (deployable, lossy), its
    footprint, speed (and, for the peers that were timed, the objective's ratio against them: the peer's workload
    time / the variant's, paired repetition by repetition, the median), every gate, finite outputs."""
    from mtonnx.variants import registry

    rows = {}
    for name, q in quality.items():
        recipe = registry.BY_NAME.get(name)
        row = {
            "deployable": recipe.deployable if recipe else True,
            "lossy": recipe.lossy if recipe else None,
            **footprints[name],
            **speed.get(name, {}),  # only the candidates are timed: the others fail a gate or cannot be deployed
        }
        for peer in (p for p in PEERS if p in speed and name in speed):
            paired = paired_ratio(speed[peer]["times_ms_workload"], speed[name]["times_ms_workload"])
            row[f"vs_{peer}"] = (paired or {}).get("median")
        rows[name] = {**row, **{k: q[k] for k in QUALITY_KEYS if k in q}, "finite_outputs": finite[name]}
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
