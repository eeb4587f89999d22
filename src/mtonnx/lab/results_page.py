"""The results page's speed tables, every row read from a published run (its metrics.json and env.json) and named by
the workload that timed it.

A time or a ratio answers a question only together with its workload. The lab times three kinds, and they differ on
purpose: the engines at forced lengths (notebook 07's peers, notebook 10's shortlist and search graph: token ids in,
exactly the same number of new tokens from every engine), the objective the recommendation optimizes (notebook 06:
text in, each sentence decoded to its own end) and the corpus (notebook 07: the eval set at its real lengths).
`workloads` defines each once, from the run's params and the constants of the code that times it, and every table
names its rows by those definitions, so the page never sets two numbers side by side without saying what each timed.

- `workload_table`: the definitions, one row per workload;
- `forced_table`: per workload and engine, the median ms with its min–max over the repetitions, tokens/s and the
  ratio against CTranslate2 int8 and PyTorch fp32, each ratio read in the session that timed both engines (the
  layouts that only notebook 10 times, CTranslate2's vocabulary map among them, come from their own sessions);
- `objective_table`, `corpus_table`: the same columns for the objective's variants and the corpus;
- `profile_table`: where a pass over the corpus goes (the profile study), beside CTranslate2 int8;
- `target_table`: each ratio the params hold to a target, in words, with the target's value and the verdict.
ENGINE_PACKAGES names the packages whose versions the page's stamps show (lab.docs).

A cell the run did not measure or did not publish says so in words; nothing is filled in.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any

from mtonnx import engines
from mtonnx.measure import benchmark, profile, studies, variants
from mtonnx.measure.peers import Config
from mtonnx.measure.timing import paired_ratio
from mtonnx.report.index import profile_rows

ENGINE_PACKAGES = ("torch", "transformers", "optimum", "optimum-onnx", "onnxruntime", "ctranslate2")
ENGINES = {e.name: e.words for e in engines.ENGINES}  # how the page names each engine
CT2, PYTORCH = "ct2-int8", "pytorch-fp32"  # what every ratio of the page is measured against
ITSELF, NOT_TIMED, NOT_RECORDED, NOT_MEASURED = "itself", "not timed together", "not recorded", "not measured"
NOT_COUNTED = "not counted"  # the tokens of a workload at real lengths
SPEED_HEADER = (
    "| workload | engine | session | median ms (min–max) | tokens/s | vs CTranslate2 int8 | vs PyTorch fp32 |\n"
    "| --- | --- | --- | --- | --- | --- | --- |"
)


@dataclass(frozen=True)
class Workload:
    """What one kind of timing runs, in words, as the code that times it reads the run's params."""

    name: str
    batch: str
    beams: str
    lengths: str
    sentences: str
    tokenization: str
    threads: str
    repetitions: str
    timed_by: str


WORKLOAD_HEADER = (
    "workload",
    "batch",
    "beams",
    "output length",
    "sentences",
    "tokenization",
    "threads",
    "repetitions",
    "timed by",
)


def workloads(params: dict[str, Any]) -> tuple[Workload, ...]:
    """The run's three workloads: forced lengths (measure.peers.run_configs), the objective
    (measure.variants.VariantBench.speed) and the corpus (measure.studies' corpus study)."""
    b, g, q = params["bench"], params["generation"], params["quant"]
    objective = variants.workload(q, g)
    weights, corpus = {w.weight for w in objective}, max(w.corpus for w in objective)
    real = f"each sentence to its end, at most {g['max_new_tokens']} new tokens"
    return (
        Workload(
            "forced",
            _join(b["batches"]),
            _join(b["beams"]),
            f"exactly {benchmark.headline_tokens(b['tokens'])} new tokens, the end of sentence suppressed",
            "the first *batch* of the eval set",
            "not timed: token ids in",
            _join(b["threads"]) + ("" if b["threads"] == [1] else " (shortlist and search-graph sessions: 1)"),
            f"{b['repeats']}, interleaved across the session's engines",
            "notebook 07's `peers`; notebook 10's `shortlist` and `search-graph`",
        ),
        Workload(
            "objective",
            " + ".join(str(w.batch) if weights == {1.0} else f"{w.weight:g} × {w.batch}" for w in objective)
            + (", sorted by length" if corpus else ""),
            _join(sorted({w.beams for w in objective})),
            real,
            f"{corpus} of the eval set, evenly spaced, at their real lengths"
            if corpus
            else f"the first {q['timing_sentences']} of the eval set, in batches of each size",
            "timed: text in",
            str(params["runtime"]["threads"]),
            f"{q['speed_repeats']}, interleaved across the variants and peers",
            "notebook 06's recommendation",
        ),
        Workload(
            "corpus",
            f"up to {studies.CORPUS_BATCH}, sorted by length",
            str(g["num_beams"]),
            real,
            f"{b['corpus_sentences']} of the eval set, evenly spaced" if b["corpus_sentences"] else "the eval set",
            "not timed: token ids in",
            f"{_join(studies.CORPUS_THREADS)} (above 1: one engine per process)",
            f"{min(b['repeats'], studies.CORPUS_REPEATS)}, interleaved across the engines",
            "notebook 07's `corpus`",
        ),
    )


def workload_table(env: dict[str, Any]) -> str:
    """The run's workloads as a table, or a sentence saying its env.json records no params to define them by."""
    params = env.get("params", {})
    if not all(section in params for section in ("bench", "generation", "quant", "runtime")):
        return "This run's env.json records no bench, generation, quant and runtime params: its workloads are unnamed."
    out = [_row(WORKLOAD_HEADER), _row(["---"] * len(WORKLOAD_HEADER))]
    return "\n".join(out + [_row(astuple(w)) for w in workloads(params)])


def forced_name(batch: int, beams: int, threads: int, tokens: int | None) -> str:
    """A forced-length workload in words, its arguments in measure.peers.Config's order (without its length where
    the run did not record it)."""
    length = f", {tokens} tokens" if tokens else ""
    return f"forced: batch {batch}, beam {beams}{length}, {_threads(threads)}"


def forced_table(metrics: dict[str, Any]) -> str:
    """Per forced-length workload, every engine of each session that timed it: the peers (bench.results), the
    shortlist beside CTranslate2's vocabulary map (bytes.shortlist.speed) and the search graph
    (bytes.search_graph)."""
    bench, layouts = metrics.get("bench", {}), metrics.get("bytes", {})
    tokens = bench.get("headline_tokens")
    rows: dict[tuple[int, int, int, int], list[str]] = {}
    for config in dict.fromkeys((r["batch"], r["beams"], r["threads"], r["tokens"]) for r in bench.get("results", [])):
        timed = {r["engine"]: r for r in bench["results"] if r["config"] == Config(*config).name}
        for engine, r in timed.items():
            rows.setdefault(config, []).append(
                _speed_row(
                    forced_name(*config),
                    engine,
                    "peers",
                    _ms(r["median_ms"], r["min_ms"], r["max_ms"]),
                    _tokens_per_s(r["batch"] * r["tokens"], r["median_ms"]),
                    *(_paired(timed, against, engine) for against in (CT2, PYTORCH)),
                )
            )
    for speed in layouts.get("shortlist", {}).get("speed", []) if tokens else []:
        config = (speed["batch"], speed["beams"], 1, tokens)
        for engine in ENGINES:
            if f"{engine} ms" in speed:
                rows.setdefault(config, []).append(
                    _speed_row(
                        forced_name(*config),
                        engine,
                        "shortlist",
                        _ms(speed[f"{engine} ms"]),
                        _tokens_per_s(speed["batch"] * tokens, speed[f"{engine} ms"]),
                        _shortlist_vs_ct2(speed, engine),
                        NOT_TIMED,
                    )
                )
    search = layouts.get("search_graph", {}).get("speedup_vs_ct2_int8", {})
    for config in [c for c in rows if c[2:] == (1, tokens)]:
        key = benchmark.config_key({"batch": config[0], "beams": config[1]})
        if key in search:
            rows[config].append(
                _speed_row(
                    forced_name(*config),
                    "mtonnx-search-int8",
                    "search-graph",
                    NOT_RECORDED,
                    NOT_RECORDED,
                    _ratio(search[key]),
                    NOT_TIMED,
                )
            )
    if not rows:
        return "This run recorded no timing at forced lengths."
    return "\n".join([SPEED_HEADER, *(row for config in rows for row in rows[config])])


def objective_table(metrics: dict[str, Any]) -> str:
    """Every variant the objective timed (the recommended one starred), with its ratios against the peers that ran
    beside it, then those peers' own times (a run that predates `quant.peers` recorded only the ratios); no tokens
    are counted at real lengths."""
    quant = metrics.get("quant", {})
    peers = quant.get("peers", {})
    out = [
        _speed_row(
            "objective",
            f"mtonnx {name}{' ★' if name == quant.get('recommended') else ''}",
            "objective",
            _ms(row["workload_ms"], *_span(row.get("times_ms_workload"))),
            NOT_COUNTED,
            *(_ratio(row.get(f"vs_{against}"), NOT_TIMED) for against in (CT2, PYTORCH)),
        )
        for name, row in quant.items()
        if isinstance(row, dict) and "workload_ms" in row
    ]
    out += [
        _speed_row(
            "objective",
            name,
            "objective",
            _ms(row["workload_ms"], *_span(row.get("times_ms_workload"))),
            NOT_COUNTED,
            *(_paired(peers, against, name, "times_ms_workload") for against in (CT2, PYTORCH)),
        )
        for name, row in peers.items()
    ]
    return "\n".join([SPEED_HEADER, *out]) if out else "This run timed no variant on the objective."


def corpus_table(metrics: dict[str, Any]) -> str:
    """The corpus engines at each thread count: tokens/s and the ratio over CTranslate2 int8 (the run records
    throughput, not times)."""
    bench = metrics.get("bench", {})
    corpus, spread = bench.get("corpus", {}), bench.get("corpus_ratio_per_repetition", {})
    out = []
    for threads in studies.CORPUS_THREADS:
        for engine in studies.CORPUS_ENGINES:
            per_s = corpus.get(engine, {}).get(benchmark.corpus_prefix(threads) + "tokens_per_s")
            if per_s is None:
                continue
            paired = spread.get(benchmark.corpus_ratio_key(threads)) or {}
            out.append(
                _speed_row(
                    f"corpus: {_threads(threads)}",
                    engine,
                    "corpus",
                    NOT_RECORDED,
                    f"{per_s:.1f}",
                    ITSELF if engine == CT2 else _ratio(paired.get("median")),
                    NOT_TIMED,
                )
            )
    return "\n".join([SPEED_HEADER, *out]) if out else "This run recorded no corpus throughput."


PROFILE_HEADER = (
    "batch",
    "variant",
    "s a pass",
    *profile.PARTS,
    "CTranslate2 int8 s",
    "vs CTranslate2 int8",
    "ORT alone vs CTranslate2 int8",
    "rows beyond outputs",
    "padded encoder positions",
    "quantization in ORT",
    "top operators in ORT",
)


def profile_table(metrics: dict[str, Any]) -> str:
    """The profile study (notebook 07): per batch and variant, a pass's seconds, each part's share, CTranslate2
    int8's time on the same rows and the two ratios, the work no output needed and what takes ORT's time."""
    split = profile_rows(metrics.get("bench", {}).get("profile", {}))
    if not split:
        return "This run recorded no profile."
    out = [_row(PROFILE_HEADER), _row(["---"] * len(PROFILE_HEADER))]
    for r in split:
        shares = [f"{r[part]:.0%}" for part in profile.PARTS]
        peer = r["ct2-int8 seconds"]
        out.append(
            _row(
                [
                    str(r["batch"]),
                    f"`{r['variant']}`",
                    f"{r['seconds']:.3f}",
                    *shares,
                    NOT_MEASURED if peer is None else f"{peer:.3f}",
                    _ratio(r["vs ct2-int8"], NOT_MEASURED),
                    _ratio(r["ORT alone vs ct2-int8"], NOT_MEASURED),
                    f"{r['rows beyond outputs']:.1%}",
                    NOT_RECORDED if r["padded encoder positions"] is None else f"{r['padded encoder positions']:.1%}",
                    f"{r['quantization in ORT']:.1%}",
                    r["top operators"],
                ]
            )
        )
    return "\n".join(out)


def target_table(metrics: dict[str, Any], env: dict[str, Any]) -> str:
    """Each ratio the params hold to a target, in words: the median over paired repetitions with their min–max, the
    target's value and name, and the verdict (met: every repetition reaches it; missed: none does)."""
    bench, wanted = metrics.get("bench", {}), env.get("params", {}).get("targets", {})
    tokens, int8, ct2 = bench.get("headline_tokens"), ENGINES["mtonnx-int8"], ENGINES[CT2]
    held = [
        (
            f"{ENGINES[fast]} vs {ENGINES[slow]}, {forced_name(batch, beams, 1, tokens)}",
            "",
            key,
            benchmark.TARGET_OF[key],
        )
        for key, (slow, fast, batch, beams) in benchmark.HEADLINE.items()
    ]
    held += [
        (f"{int8} vs {ct2}, corpus: {_threads(t)}", "corpus_", benchmark.corpus_ratio_key(t), "corpus_vs_ct2_int8")
        for t in studies.CORPUS_THREADS
    ]
    out = ["| held to a target | measured: median (min–max) | target | verdict |", "| --- | --- | --- | --- |"]
    for words, prefix, key, target in held:
        verdict = bench.get(f"{prefix}targets", {}).get(key)
        if verdict is None:
            continue
        paired = bench.get(f"{prefix}ratio_per_repetition", {}).get(key)
        measured = f"{paired['median']:.2f} ({paired['min']:.2f}–{paired['max']:.2f})" if paired else NOT_MEASURED
        value = f"≥ {wanted[target]:g}" if target in wanted else NOT_RECORDED
        out.append(_row([words, measured, f"{value} (`targets.{target}`)", verdict]))
    return "\n".join(out) if len(out) > 2 else "This run held no ratio to a target."


def scale_tables(metrics: dict[str, Any], env: dict[str, Any]) -> str:
    """The opus-shape run's speed section: the workloads, then the engines at forced lengths, the objective's
    variants, the corpus and the targets, each under a line saying what it holds."""
    return "\n\n".join(
        [
            "The workloads, each defined once; every row below names one:",
            workload_table(env),
            "Every engine at forced lengths. `session`: the study that timed the row. `vs`: how many times faster than "
            "that engine this one ran (above 1: faster), the median over the repetitions of that engine's time ÷ this "
            "one's, both timed in that session; a time without its min–max: the study records only the median.",
            forced_table(metrics),
            "The variants that passed every gate, on the objective (per repetition, the sum of its batch sizes' "
            "times). Text in and real lengths: its ratios answer another question than the forced rows', as the "
            "workloads table shows. The run records the peers' ratios on it, not their times, and counts no tokens at "
            "real lengths.",
            objective_table(metrics),
            "The corpus at its real lengths. The run records each engine's tokens/s, not its time; above 1 thread "
            "each engine ran in its own process, so the ratio there is of medians, not of paired repetitions.",
            corpus_table(metrics),
            "Where a pass over the corpus goes (notebook 07's `profile`): ONNX Runtime's runs (encoder, decoder) and "
            "the host's parts between them, CTranslate2 int8 on the same rows, and the ratio if the host's parts took "
            "no time (ORT alone). A diagnosis timed in turn; the corpus rows above are the verdict.",
            profile_table(metrics),
            "The ratios the run's params hold to a target: met when every repetition reaches the target, missed "
            "when none does, within noise otherwise (the corpus above 1 thread: its range brackets the extremes).",
            target_table(metrics, env),
        ]
    )


def _speed_row(workload: str, engine: str, session: str, ms: str, per_s: str, vs_ct2: str, vs_pt: str) -> str:
    return _row([workload, ENGINES.get(engine, engine), f"`{session}`", ms, per_s, vs_ct2, vs_pt])


def _paired(timed: dict[str, dict[str, Any]], against: str, engine: str, times: str = "times_ms") -> str:
    """`against`'s time over `engine`'s, repetition by repetition (timing.paired_ratio) of their `times`, the
    median."""
    if engine == against:
        return ITSELF
    if against not in timed:
        return NOT_TIMED
    paired = paired_ratio(timed[against][times], timed[engine][times])
    return _ratio((paired or {}).get("median"))


def _shortlist_vs_ct2(speed: dict[str, Any], engine: str) -> str:
    """The shortlist session's paired ratio of CTranslate2 int8 over `engine`, where the study records it."""
    if engine == CT2:
        return ITSELF
    key = next((k for k, (fast, slow) in benchmark.SHORTLIST_PAIRS.items() if fast == engine and slow == CT2), None)
    return _ratio((speed.get(f"speedup {key}") or {}).get("median"))


def _ms(median: float, low: float | None = None, high: float | None = None) -> str:
    return f"{median:.1f}" + (f" ({low:.1f}–{high:.1f})" if low is not None and high is not None else "")


def _span(times: list[float] | None) -> tuple[float | None, float | None]:
    return (min(times), max(times)) if times else (None, None)


def _tokens_per_s(tokens: int, ms: float) -> str:
    return f"{tokens * 1000 / ms:.1f}"


def _ratio(value: float | None, missing: str = NOT_RECORDED) -> str:
    return missing if value is None else f"{value:.2f}"


def _threads(threads: int) -> str:
    return f"{threads} thread{'s' * (threads != 1)}"


def _join(values: list[int] | tuple[int, ...]) -> str:
    return ", ".join(map(str, values))


def _row(cells: list[str] | tuple[str, ...]) -> str:
    return "| " + " | ".join(cells) + " |"
