"""The benchmark as studies that run one at a time: each is its own function with its own result, so a notebook (or
`mtonnx bench --only peers,corpus`) runs, inspects and reruns exactly the part it teaches.

- `Bench` is what every study starts from, prepared once and lazily: the params, the engines' files (measure.peers,
  built by the variant registry and keyed by content), the evaluation set as token ids.
- `STUDIES` names each study, what it measures, the metrics section it records into (the notebook that teaches it:
  `bench` for notebook 07's peers, `tuning` for notebook 09, `bytes` for notebook 10) and the studies it reads.
- `run(bench, names)` runs them (their prerequisites first, once), keeps every result in `bench.json` beside the
  earlier ones, and returns the results; `metrics(bench, names)` is what each records.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mtonnx import data
from mtonnx.engines import BY_NAME as ENGINES_BY_NAME
from mtonnx.engines import CORPUS
from mtonnx.foundation.files import write_json
from mtonnx.measure import ablation as ablations
from mtonnx.measure import benchmark, peers, profile, restriction, search_graph, step_bytes, timing

RESULTS = "bench.json"
CORPUS_ENGINES, CORPUS_BATCH, CORPUS_THREADS, CORPUS_REPEATS = CORPUS, 32, (1, 2), 3
# The profile study: the peers' int8 and the batch-invariant int8 the pipeline deploys, at batch 8 and the corpus's
PROFILED, PROFILE_BATCHES = ("int8-tuned", "int8-rows-tuned"), (8, CORPUS_BATCH)


@dataclass
class Bench:
    """What the studies of one run share: params, run directory, the engines' files and the eval set's ids."""

    params: dict[str, Any]
    run_dir: Path
    models_dir: Path
    log: Callable[[str], None] = print
    results: dict[str, Any] = field(default_factory=dict)  # each study's result, by name, as run by this bench

    @classmethod
    def open(cls, params: dict[str, Any], run_dir: str | Path, models_dir: str | Path, log=print) -> Bench:
        """A bench over a run directory (a study another one needs runs again in it: never read from an earlier,
        maybe differently configured, run)."""
        return cls(params, Path(run_dir), Path(models_dir), log)

    @cached_property
    def model_dir(self) -> str:
        """The resolved source model."""
        from mtonnx.sources import models

        return models.resolve(self.params["model"], self.models_dir, self.params.get("_root"))["dir"]

    @cached_property
    def available(self) -> tuple[list[str], dict[str, str]]:
        """(the params' engines whose libraries are installed, the others with the reason)."""
        return benchmark.available_engines(self.params["bench"]["engines"])

    @property
    def engines(self) -> list[str]:
        """The engines this machine can run."""
        return self.available[0]

    @cached_property
    def paths(self) -> peers.Paths:
        """Every engine's files, built where their build key does not match."""
        e = self.params["export"]
        self.log("preparing the engines' files (exports, the registry's variants, CTranslate2 models) ...")
        ct2 = not any(ENGINES_BY_NAME[name].kind == "ct2" for name in self.available[1])
        return peers.prepare(self.model_dir, self.run_dir, e["exporter"], e["opset"], ct2=ct2, log=self.log)

    @cached_property
    def rows(self) -> list[list[int]]:
        """The evaluation set as token ids (the same for every engine: tokenization is never timed)."""
        from mtonnx.runtime import load_tokenizer

        tokenizer, prefix = load_tokenizer(self.paths.fp32_export), self.params["model"]["source_prefix"]
        return [tokenizer.encode(f"{prefix} {p.en}".strip()) for p in data.eval_set(self.params["data"])]

    @property
    def corpus_rows(self) -> list[list[int]]:
        """The rows the real-length studies time: `bench.corpus_sentences` of the eval set, evenly spaced (a subset
        with the set's lengths, so a timing costs less and reads the same), or all of them when that is 0."""
        wanted, rows = self.params["bench"]["corpus_sentences"], self.rows
        if not wanted or wanted >= len(rows):
            return rows
        return [rows[i * len(rows) // wanted] for i in range(wanted)]

    @property
    def tokens(self) -> int:
        """The forced length the headline numbers are read at."""
        return benchmark.headline_tokens(self.params["bench"]["tokens"])

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """Every (batch, beams) of the params' bench matrix."""
        b = self.params["bench"]
        return list(itertools.product(b["batches"], b["beams"]))


def _peers(bench: Bench) -> dict[str, Any]:
    b = bench.params["bench"]
    configs = [
        peers.Config(batch, beams, threads, tokens)
        for batch, beams, threads, tokens in itertools.product(b["batches"], b["beams"], b["threads"], b["tokens"])
    ]
    bench.log(f"{len(bench.engines)} engines x {len(configs)} configurations, {b['repeats']} repeats ...")
    results = peers.measure_engines(bench.engines, bench.paths, configs, bench.rows, b["warmup"], b["repeats"])
    return {"results": results, "skipped": bench.available[1], "tokens": bench.tokens, "paths": bench.paths.__dict__}


def _bound(bench: Bench) -> dict[str, Any]:
    per_token = benchmark.bytes_per_token(bench.model_dir)
    working_set = per_token["weights_per_token"]  # int8: a byte a weight, what the int8 engines read each step
    return {
        "bytes_per_token": per_token,
        "bandwidth_gbs": benchmark.memory_bandwidth_gbs(working_set),
        "working_set_mb": round(working_set / 2**20, 1),
        "caches": benchmark.cache_sizes(),
    }


def _corpus(bench: Bench) -> dict[str, Any]:
    g, b = bench.params["generation"], bench.params["bench"]
    engines = [e for e in CORPUS_ENGINES if e in bench.engines]
    configs = [peers.Config(CORPUS_BATCH, g["num_beams"], t, g["max_new_tokens"], True) for t in CORPUS_THREADS]
    rows = bench.corpus_rows
    bench.log(
        f"the eval corpus at its real lengths ({len(rows)} of {len(bench.rows)} sentences, evenly spaced), "
        f"batches of {CORPUS_BATCH}, threads {CORPUS_THREADS}: {engines}"
    )
    results = peers.measure_engines(engines, bench.paths, configs, rows, 1, min(b["repeats"], CORPUS_REPEATS))
    return {"results": results, "sentences": len(rows), "of": len(bench.rows)}


def _real_lengths(option: str) -> Callable[[Bench], dict[str, Any]]:
    def study(bench: Bench) -> dict[str, Any]:
        g = bench.params["generation"]
        repeats = min(bench.params["bench"]["repeats"], CORPUS_REPEATS)
        return ablations.real_lengths(
            bench.paths.int8_tuned,
            bench.corpus_rows,
            CORPUS_BATCH,
            g["num_beams"],
            g["max_new_tokens"],
            option,
            repeats=repeats,
        )

    return study


def _profile(bench: Bench) -> dict[str, Any]:
    from mtonnx import artefacts

    g, b = bench.params["generation"], bench.params["bench"]
    artefacts.build(bench.paths.fp32_export, Path(bench.paths.variants), list(PROFILED), log=bench.log, required=True)
    rows, repeats = bench.corpus_rows, min(b["repeats"], CORPUS_REPEATS)
    ct2 = peers.Engine(profile.PEER, bench.paths, 1) if profile.PEER in bench.engines else None
    bench.log(
        f"where the time goes: {len(rows)} sentences at their real lengths, batches {PROFILE_BATCHES}: {PROFILED}"
        + (f", beside {profile.PEER}" if ct2 else "")
    )
    out = {}
    for batch in PROFILE_BATCHES:
        parts = {
            name: profile.profile(bench.paths.variant(name), rows, batch, g["num_beams"], g["max_new_tokens"], repeats)
            for name in PROFILED
        }
        if ct2 is not None:
            work = functools.partial(ct2.corpus, rows, g["num_beams"], g["max_new_tokens"], batch)
            peer = timing.timed(work, 1, repeats)
            seconds = round(peer["median_ms"] / 1000, 4)
            times = [round(ms / 1000, 4) for ms in peer["times_ms"]]
            parts = {**profile.against(parts, seconds), profile.PEER: {"seconds": seconds, "times_s": times}}
        out[f"batch{batch}"] = parts
    return out


def _search_graph(bench: Bench) -> dict[str, Any]:
    b = bench.params["bench"]
    return search_graph.compare_search(
        bench.paths,
        bench.rows,
        bench.pairs,
        bench.tokens,
        bench.params["generation"],
        bench.engines,
        warmup=b["warmup"],
        repeats=b["repeats"],
    )


def _tuning(bench: Bench) -> dict[str, Any]:
    b = bench.params["bench"]
    tuned = {"int8": bench.paths.int8_variant, "int8-tuned": bench.paths.int8_tuned}
    bench.log(f"the tuning steps one by one ({len(ablations.STEPS)} variants) ...")
    return {
        "ablation": ablations.ablation(
            tuned, bench.rows, bench.pairs, tokens=b["tokens"][0], warmup=b["warmup"], repeats=b["repeats"]
        ),
        "graphs": ablations.graph_changes(tuned),
    }


def _memory(bench: Bench) -> dict[str, Any]:
    b = bench.params["bench"]
    largest = ((bench.rows * max(b["batches"]))[: max(b["batches"])], max(b["beams"]), max(b["tokens"]))
    memory = peers.rss_after_load(bench.engines, bench.paths, run=largest)
    loaded = {name: m["after_load"] for name, m in memory.items()}
    ran = {name: m["after_run"] for name, m in memory.items()}
    return {
        "rss_mb": {name: m["rss_mb"] for name, m in loaded.items()},
        "rss_after_run_mb": {name: m["rss_mb"] for name, m in ran.items()},
        "rss_kinds_mb": {"after_load": _kinds(loaded), "after_run": _kinds(ran)},
    }


def _tuning_memory(bench: Bench) -> dict[str, Any]:
    tuned = {"int8": bench.paths.int8_variant, "int8-tuned": bench.paths.int8_tuned}
    return {"steps": ablations.memory_ablation(tuned)}


def _kinds(memory: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each engine's resident memory by kind (peers.rss_after_load), where the platform tells it."""
    return {name: m["kinds_mb"] for name, m in memory.items() if m["kinds_mb"]}


def _restriction(bench: Bench) -> dict[str, Any]:
    from mtonnx import artefacts
    from mtonnx.variants import registry

    name = registry.INT8_TUNED.name + "-target-vocab"
    variants = Path(bench.paths.int8_tuned).parent
    artefacts.build(bench.paths.fp32_export, variants, [name], log=bench.log, required=True)
    return {
        "restricted": benchmark.against_source(bench.paths.int8_tuned, variants / name, bench.params),
        "step_bytes": step_bytes.per_variant(variants),  # every variant of the run, measured from its step file
    }


def _restriction_sizes(bench: Bench) -> dict[str, Any]:
    b = bench.params["bench"]
    variants = Path(bench.paths.int8_tuned).parent
    sized = restriction.sizes(
        bench.paths.fp32_export,
        b["restriction_sizes"],
        variants,
        bench.rows,
        bench.tokens,
        bench.pairs,
        warmup=b["warmup"],
        repeats=b["repeats"],
    )
    return {"sizes": sized}


def _shortlist(bench: Bench) -> dict[str, Any]:
    return benchmark.shortlist(bench.paths, bench.run_dir, bench.params, bench.engines)


@dataclass(frozen=True)
class Study:
    """One study: its name, what it measures, the section it records into, what it reads, how it runs."""

    name: str
    about: str
    section: str
    run: Callable[[Bench], dict[str, Any]]
    needs: tuple[str, ...] = ()


STUDIES: tuple[Study, ...] = (
    Study("peers", "PyTorch, optimum, the runtime and CTranslate2 at forced output lengths", "bench", _peers),
    Study("bound", "the bytes a step reads and the memory bandwidth at that working set", "bench", _bound, ("peers",)),
    Study("corpus", "the eval corpus at real lengths against CTranslate2 int8, 1 and 2 threads", "bench", _corpus),
    Study("memory", "resident memory after load and after a generation, by kind", "bench", _memory),
    Study("profile", "where a generation's time goes at real lengths: ORT, feeds, reorder, search", "bench", _profile),
    Study("tuning", "what each tuning step of the decoder bought, tokens kept", "tuning", _tuning),
    Study("tuning-memory", "resident memory after load at each tuning step", "tuning", _tuning_memory),
    Study(
        "retirement",
        "retiring done sentences at real lengths, with and without",
        "tuning",
        _real_lengths("retire_finished"),
    ),
    Study(
        "encoder-groups",
        "encoding rows of similar length together, with and without",
        "tuning",
        _real_lengths("group_encoder"),
    ),
    Study("restriction", "the output rows cut to the target side: tokens, gate, speed", "bytes", _restriction),
    Study("restriction-sizes", "the speed of keeping N output rows", "bytes", _restriction_sizes),
    Study("shortlist", "a lexical shortlist per batch, beside CTranslate2's vmap", "bytes", _shortlist),
    Study("search-graph", "the whole search inside ORT's BeamSearch op", "bytes", _search_graph),
)
BY_NAME = {s.name: s for s in STUDIES}


def select(text: str | None) -> list[str]:
    """`--only peers,corpus` as study names (every study without it); ValueError naming the unknown ones."""
    if text is None:
        return [s.name for s in STUDIES]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise ValueError(f"--only {text!r}: unknown study {', '.join(unknown) or '(none)'}; see mtonnx bench --list")
    return names


def run(bench: Bench, names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Run the studies `names` (each one's `needs` first, unless this bench ran it already), keep their results in
    the run's bench.json beside the earlier ones; returns {name: result} of `names`."""
    for name in names:
        for needed in BY_NAME[name].needs:
            if needed not in bench.results:
                run(bench, [needed])
        bench.log(f"study {name}: {BY_NAME[name].about} ...")
        bench.results[name] = BY_NAME[name].run(bench)
        path = bench.run_dir / RESULTS
        earlier = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        write_json(path, {**(earlier if isinstance(earlier, dict) else {}), **bench.results})
    return {name: bench.results[name] for name in names}


def metrics(bench: Bench, names: list[str] | tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """What the studies `names` record, by section (benchmark.metrics reads each from its result)."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        study = BY_NAME[name]
        out.setdefault(study.section, {}).update(benchmark.metrics(name, bench.results, bench.params))
    return out
