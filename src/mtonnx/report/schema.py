"""The declared metrics: every key a run records, what kind of number it is, its unit and which way is better.

A key is a recorded metric's flattened, dotted name (`quant.int8.size_mb`, record.flatten). The fingerprint (which
metrics a rerun must reproduce), `mtonnx compare` (how a change is judged) and the report (units beside values)
read the kind from here instead of guessing it from the words in a key, and `report.record` warns about a key that
is not declared here, so a new metric is declared, with its kind, before it is trusted.

A pattern is a dotted key in which `*` stands for any text within one part (a variant, an engine, a concurrency
level) and `**` for any text, dots included (a file name such as `encoder_model.onnx` holds a dot, so do a study's
nested results).
The first pattern that matches declares the key: the specific patterns of a section come before its general ones.

Kinds:
- timing: read off a clock, or computed from clock readings (latencies, rates, speedups, verdicts on them);
- memory: resident memory as the operating system reports it;
- quality: translation quality and correctness (token matches, BLEU/chrF, gates, parity, doctor, pitfalls);
- size: bytes on disk or bytes a step reads;
- identity: what was run (names, settings, counts, hashes, the recommendation).
Timings and memory readings vary from run to run; the other kinds are reproducible unless an entry says otherwise
(a verdict or a count that is read off a timing, netron's renders).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

TIMING, MEMORY, QUALITY, SIZE, IDENTITY = "timing", "memory", "quality", "size", "identity"
KINDS = (TIMING, MEMORY, QUALITY, SIZE, IDENTITY)
HIGHER, LOWER, SAME = "higher", "lower", "same"  # SAME: any change is for the worse (a token-id hash)
GATE = "gate"  # the unit of a gate's outcome: fail < inconclusive < pass
GATE_RANK = {"fail": 0, "inconclusive": 1, "pass": 2}


class UndeclaredMetricWarning(UserWarning):
    """A notebook recorded a key this module does not declare (report.record saves it all the same)."""


@dataclass(frozen=True)
class Metric:
    """One declared key pattern: its kind (KINDS), unit, which way is better (HIGHER, LOWER, SAME or None) and
    whether a rerun of the same commit and params on the same machine reproduces it (None: from the kind)."""

    pattern: str
    kind: str
    unit: str = ""
    better: str | None = None
    stable: bool | None = None

    def __post_init__(self):
        if self.kind not in KINDS or self.better not in (HIGHER, LOWER, SAME, None):
            raise ValueError(f"{self.pattern}: kind {self.kind!r} or direction {self.better!r} is not one of the known")

    @property
    def reproducible(self) -> bool:
        """True when the fingerprint hashes it: a rerun of the same commit, params and machine gives it again."""
        return self.stable if self.stable is not None else self.kind not in (TIMING, MEMORY)


# fmt: off
METRICS: tuple[Metric, ...] = (
    # 01 · inspect (and the trained model's own report)
    Metric("inspect.params_total", IDENTITY, "count"),
    Metric("inspect.shared_embedding_share", IDENTITY, "share"),
    Metric("inspect.vocab_size", IDENTITY, "count"),
    Metric("inspect.eval_pairs", IDENTITY, "count"),
    Metric("inspect.bleu_*", QUALITY, "BLEU", HIGHER),
    Metric("inspect.chrf_*", QUALITY, "chrF", HIGHER),
    Metric("inspect.generate_seconds_*", TIMING, "s", LOWER),
    Metric("inspect.domains.*.sentences", IDENTITY, "count"),
    Metric("inspect.domains.*.bleu", QUALITY, "BLEU", HIGHER),
    Metric("inspect.domains.*.chrf", QUALITY, "chrF", HIGHER),
    Metric("inspect.examples", IDENTITY),
    Metric("model.train_minutes", TIMING, "min"),
    Metric("model.steps", IDENTITY, "count"),
    Metric("model.test_bleu*", QUALITY, "BLEU", HIGHER),
    Metric("model.test_chrf", QUALITY, "chrF", HIGHER),
    Metric("model.baseline_bleu", QUALITY, "BLEU"),
    # 02 · the hand export
    Metric("manual_export.exporter", IDENTITY),
    Metric("manual_export.opset", IDENTITY),
    Metric("manual_export.max_abs_diff.**", QUALITY, "abs diff", LOWER),
    Metric("manual_export.max_abs_diff_worst", QUALITY, "abs diff", LOWER),
    Metric("manual_export.parity_pass", QUALITY, "", HIGHER),
    Metric("manual_export.greedy_token_match", QUALITY, "share", HIGHER),
    Metric("manual_export.dynamo.**", IDENTITY, "status"),
    Metric("manual_export.torchscript.**", IDENTITY, "status"),
    Metric("manual_export.size_mb.**", SIZE, "MB", LOWER),
    Metric("manual_export.embedding_copies.**", IDENTITY, "count"),
    Metric("manual_export.static_axes_error_caught", QUALITY, "", HIGHER),
    # 03 · optimum's export
    Metric("optimum_export.*token_match", QUALITY, "share", HIGHER),
    Metric("optimum_export.max_abs_diff.**", QUALITY, "abs diff", LOWER),
    Metric("optimum_export.size_mb.**", SIZE, "MB", LOWER),
    Metric("optimum_export.*duplicated_mb", SIZE, "MB", LOWER),
    Metric("optimum_export.export_seconds", TIMING, "s", LOWER),
    # 04 · netron's renders depend on a browser's timing: listed, never hashed
    Metric("graphview.rendered", IDENTITY, "files", stable=False),
    Metric("graphview.not_rendered**", IDENTITY, "reason", stable=False),
    Metric("graphview.seconds**", TIMING, "s", LOWER),
    # 05 · the cached decoder
    Metric("runtime.*token_match", QUALITY, "share", HIGHER),
    Metric("runtime.cached_equals_no_cache", QUALITY, "share", HIGHER),
    Metric("runtime.parity.**", QUALITY, "share", HIGHER),
    Metric("runtime.cache_speedup", TIMING, "ratio", HIGHER),
    Metric("runtime.vs_generate_b1", TIMING, "ratio", HIGHER),
    Metric("runtime.*_tokens", IDENTITY, "tokens"),
    Metric("runtime.*import_s", TIMING, "s", LOWER),
    Metric("runtime.runtime_imports_torch", QUALITY, "", LOWER),
    # 06 · variants: the recommendation, its reason (which quotes timings), the sensitivity groups, the failures
    Metric("quant.recommended", IDENTITY, "variant"),
    Metric("quant.recommended_reason", IDENTITY, "text", stable=False),
    Metric("quant.objective", IDENTITY),
    Metric("quant.*_signature", IDENTITY),
    Metric("quant.sentences", IDENTITY, "count"),
    Metric("quant.candidates", IDENTITY, "variants"),  # past every gate: the ones the objective timed
    Metric("quant.session.*", IDENTITY),  # the ONNX Runtime session settings of every translation and timing
    Metric("quant.naive_dequantizes_embedding", IDENTITY),
    Metric("quant.failed**", IDENTITY, "reason"),
    Metric("quant.groups.*.bleu_delta", QUALITY, "BLEU", HIGHER),
    Metric("quant.groups.*.same_as_fp32", QUALITY, "share", HIGHER),
    Metric("quant.groups.*.*_ci", QUALITY, "interval"),
    Metric("quant.groups.*.*gate", QUALITY, GATE, HIGHER),
    # 06 · one row per variant
    Metric("quant.peers.*.workload_ms", TIMING, "ms", LOWER),  # the peers timed beside the variants
    Metric("quant.peers.*.times_ms_*", TIMING, "ms", LOWER),
    Metric("quant.peers.*.p50_ms_*", TIMING, "ms", LOWER),
    Metric("quant.peers.*.p90_ms_*", TIMING, "ms", LOWER),
    Metric("quant.*.deployable", IDENTITY),
    Metric("quant.*.lossy", IDENTITY),
    Metric("quant.*.size_mb", SIZE, "MB", LOWER),
    Metric("quant.*.load_s", TIMING, "s", LOWER),
    Metric("quant.*.rss_mb", MEMORY, "MB", LOWER),
    Metric("quant.*.workload_ms", TIMING, "ms", LOWER),
    Metric("quant.*.times_ms_*", TIMING, "ms", LOWER),
    Metric("quant.*.p50_ms_*", TIMING, "ms", LOWER),
    Metric("quant.*.p90_ms_*", TIMING, "ms", LOWER),
    Metric("quant.*.vs_*", TIMING, "ratio", HIGHER),
    Metric("quant.*.bleu", QUALITY, "BLEU", HIGHER),
    Metric("quant.*.chrf", QUALITY, "chrF", HIGHER),
    Metric("quant.*.bleu_delta", QUALITY, "BLEU", HIGHER),
    Metric("quant.*.chrf_delta", QUALITY, "chrF", HIGHER),
    Metric("quant.*.*_delta_ci", QUALITY, "interval"),
    Metric("quant.*.p_value", QUALITY, "p"),
    Metric("quant.*.sentences_needed", QUALITY, "count"),
    Metric("quant.*.gate", QUALITY, GATE, HIGHER),
    Metric("quant.*.fidelity_gate", QUALITY, GATE, HIGHER),
    Metric("quant.*.fidelity.same_as_fp32", QUALITY, "share", HIGHER),
    Metric("quant.*.fidelity.same_as_fp32_ci", QUALITY, "interval"),
    Metric("quant.*.fidelity.chrf_vs_fp32", QUALITY, "chrF", HIGHER),
    Metric("quant.*.invariance_gate", QUALITY, GATE, HIGHER),
    Metric("quant.*.batch_invariance", QUALITY),  # null: not measured (not deployable)
    Metric("quant.*.batch_invariance.share", QUALITY, "share", HIGHER),
    Metric("quant.*.batch_invariance.beam*", QUALITY, "share", HIGHER),
    Metric("quant.*.batch_invariance.sentences", QUALITY, "count"),
    Metric("quant.*.batch_invariance.batch", QUALITY, "count"),
    Metric("quant.*.batch_invariance.changed.beam*", QUALITY, "sentence indices"),
    Metric("quant.*.tokens_sha", QUALITY, "hash", SAME),
    Metric("quant.*.finite_outputs", QUALITY, "", HIGHER),
    Metric("deploy.*", IDENTITY),
    # the web export (pipeline.stages.web): its size, Node against the Python runtime on the same files (fp32 and
    # int8), int8's fidelity to fp32, and the page in Chromium against Node
    Metric("web.size_mb", SIZE, "MB", LOWER),
    Metric("web.published", QUALITY, "", HIGHER),
    Metric("web.gate", QUALITY, GATE, HIGHER),
    Metric("web.node.gate", QUALITY, GATE, HIGHER),
    Metric("web.node.sentences", IDENTITY, "count"),
    Metric("web.node.reason", IDENTITY),
    Metric("web.node.*", QUALITY, "sentences identical", HIGHER),
    Metric("web.q8.node.gate", QUALITY, GATE, HIGHER),
    Metric("web.q8.node.sentences", IDENTITY, "count"),
    Metric("web.q8.node.reason", IDENTITY),
    Metric("web.q8.node.*", QUALITY, "sentences identical", HIGHER),
    Metric("web.q8.fidelity_gate", QUALITY, GATE, HIGHER),
    Metric("web.*.fidelity.same_as_fp32", QUALITY, "share", HIGHER),
    Metric("web.*.fidelity.same_as_fp32_ci", QUALITY, "interval"),
    Metric("web.*.fidelity.chrf_vs_fp32", QUALITY, "chrF", HIGHER),
    Metric("web.browser.gate", QUALITY, GATE, HIGHER),
    Metric("web.browser.same_as_node", QUALITY, "sentences identical", HIGHER),
    Metric("web.browser.load_s", TIMING, "s", LOWER),
    Metric("web.browser.sentences", IDENTITY, "count"),
    Metric("web.browser.*", IDENTITY),
    Metric("web.*", IDENTITY),
    # 13 · the same model from JavaScript: tokenizers against the runtime, Transformers.js, speed in three runtimes
    Metric("javascript.tokenizer.*", QUALITY, "sentences whose ids differ", LOWER),
    Metric("javascript.transformersjs.sentences", IDENTITY, "count"),
    Metric("javascript.transformersjs.*", QUALITY, "sentences identical", HIGHER),
    Metric("javascript.speed.words_per_second.*", TIMING, "words/s", HIGHER),
    Metric("javascript.speed.vs_python.**", TIMING, "ratio", LOWER),
    Metric("javascript.speed.seconds.**", TIMING, "s", LOWER),
    Metric("javascript.speed.page_load_s", TIMING, "s", LOWER),
    Metric("javascript.speed.*", IDENTITY),
    # 07 · the peers: timings, ratios of timings and the verdicts read off them; the bound; memory
    Metric("bench.results", TIMING, "rows"),
    Metric("bench.ratio.*", TIMING, "ratio", HIGHER),
    Metric("bench.ratio_per_repetition.**", TIMING, "ratio", HIGHER),
    Metric("bench.targets.*", TIMING, "verdict"),
    Metric("bench.headline_tokens", IDENTITY, "tokens"),
    Metric("bench.skipped**", IDENTITY, "reason"),
    Metric("bench.bandwidth_gbs", TIMING, "GB/s", HIGHER),
    Metric("bench.bound_working_set_mb", SIZE, "MB"),
    Metric("bench.bound_fraction_b1", TIMING, "share", HIGHER),
    Metric("bench.corpus.*.*generated_tokens", IDENTITY, "tokens"),
    Metric("bench.corpus.*.*sentences_per_s", TIMING, "sentences/s", HIGHER),
    Metric("bench.corpus.*.*tokens_per_s", TIMING, "tokens/s", HIGHER),
    Metric("bench.corpus_ratio.*", TIMING, "ratio", HIGHER),
    Metric("bench.profile.*.*.seconds", TIMING, "s", LOWER),
    Metric("bench.profile.*.*.shares.*", TIMING, "share"),
    Metric("bench.profile.*.*.quantization_share", TIMING, "share"),
    Metric("bench.profile.*.*.beyond_output_share", QUALITY, "share", LOWER),
    Metric("bench.profile.*.*.padded_encoder_share", QUALITY, "share", LOWER),
    Metric("bench.profile.*.*.vs_ct2_int8", TIMING, "ratio", HIGHER),
    Metric("bench.profile.*.*.ort_only_vs_ct2_int8", TIMING, "ratio", HIGHER),
    Metric("bench.profile.*.*.top_operators", TIMING),
    Metric("bench.profile.*.*.*", IDENTITY, "count"),
    Metric("bench.corpus_ratio_per_repetition.**", TIMING, "ratio", HIGHER),
    Metric("bench.corpus_targets.*", TIMING, "verdict"),
    Metric("bench.rss_mb.*", MEMORY, "MB", LOWER),
    Metric("bench.rss_after_run_mb.*", MEMORY, "MB", LOWER),
    Metric("bench.rss_kinds_mb.**", MEMORY, "MB", LOWER),
    Metric("tuning.memory_ablation**", MEMORY, "MB", LOWER),
    # 08 · pitfalls reproduced (the cache's, read off notebook 05's timing, is not hashed) and the doctor
    Metric("pitfalls.reproduced", QUALITY, "count", HIGHER, stable=False),
    Metric("pitfalls.of", IDENTITY, "count"),
    Metric("pitfalls.each.no cache", QUALITY, "", HIGHER, stable=False),
    Metric("pitfalls.each.*", QUALITY, "", HIGHER),
    Metric("doctor.*.failures", QUALITY, "count", LOWER),
    Metric("doctor.*.warnings", QUALITY, "count", LOWER),
    # 09 · tuning the decoder step: rows of timings and tokens kept; real-length options
    Metric("tuning.ablation", TIMING, "rows"),
    Metric("tuning.*.option", IDENTITY),
    Metric("tuning.*.batch", IDENTITY, "sentences"),
    Metric("tuning.*.beams", IDENTITY, "beams"),
    Metric("tuning.*.sentences", IDENTITY, "count"),
    Metric("tuning.*.same_tokens", QUALITY, "count", HIGHER),
    Metric("tuning.*.sentences_per_s*", TIMING, "sentences/s", HIGHER),
    Metric("tuning.*.speedup**", TIMING, "ratio", HIGHER),
    # 10 · fewer bytes per token: the cut output rows, the shortlist, the search graph
    Metric("bytes.bytes_per_token.*", SIZE, "bytes", LOWER),
    Metric("bytes.restricted_rows.*.step_mb", SIZE, "MB", LOWER),
    Metric("bytes.restricted_rows.*.speedup_*", TIMING, "ratio", HIGHER),
    Metric("bytes.restricted_rows", SIZE, "MB"),  # {} when the study measured no size
    Metric("bytes.*.vocab", IDENTITY, "count"),
    Metric("bytes.*.rows_kept", IDENTITY, "count"),
    Metric("bytes.*.mean_columns.*", SIZE, "columns", LOWER),
    Metric("bytes.*.tokens", QUALITY, "rows"),
    Metric("bytes.*.bleu", QUALITY, "BLEU", HIGHER),
    Metric("bytes.*.bleu_delta", QUALITY, "BLEU", HIGHER),
    Metric("bytes.*.bleu_delta_ci", QUALITY, "interval"),
    Metric("bytes.*.gate", QUALITY, GATE, HIGHER),
    Metric("bytes.*.identical_translations", QUALITY, "", HIGHER),
    Metric("bytes.*.speed", TIMING, "rows"),
    Metric("bytes.shortlist.learned.**", IDENTITY, "count"),
    Metric("bytes.shortlist.always", IDENTITY, "count"),
    Metric("bytes.shortlist.*step_mb**", SIZE, "MB", LOWER),
    Metric("bytes.shortlist.speedup.**", TIMING, "ratio", HIGHER),
    Metric("bytes.search_graph.sentences", IDENTITY, "count"),
    Metric("bytes.search_graph.same_tokens.*", QUALITY, "count", HIGHER),
    Metric("bytes.search_graph.speedup_vs_*.*", TIMING, "ratio", HIGHER),
    # 11 · serving: per concurrency level, with and without dynamic batching
    Metric("serve.errors", QUALITY, "count", LOWER),
    Metric("serve.batching_speedup_*", TIMING, "ratio", HIGHER),
    Metric("serve.**.sentences_per_s", TIMING, "sentences/s", HIGHER),
    Metric("serve.**.p*_ms", TIMING, "ms", LOWER),
    # 12 · scale-out: the runs, what Ray costs, and the plan computed from the measured rate
    Metric("scale.model", IDENTITY),
    Metric("scale.corpus_lines", IDENTITY, "count"),
    Metric("scale.files", IDENTITY, "count"),
    Metric("scale.rows", IDENTITY, "count"),
    Metric("scale.errors", QUALITY, "count", LOWER),
    Metric("scale.identical_to_local", QUALITY, "", HIGHER),
    Metric("scale.ray_processes_left", QUALITY, "count", LOWER),
    Metric("scale.nodes_identical_to_local", QUALITY, "", HIGHER),
    Metric("scale.nodes_processes_left", QUALITY, "count", LOWER),
    Metric("scale.nodes2_vs_nodes1*", TIMING, "ratio", HIGHER),
    Metric("scale.kill_worker_lost_s*", TIMING, "s", LOWER),
    Metric("scale.*.repeats", IDENTITY, "count"),
    Metric("scale.**sentences_per_s*", TIMING, "sentences/s", HIGHER),
    Metric("scale.*.seconds", TIMING, "s", LOWER),
    Metric("scale.ray_speedup_w2*", TIMING, "ratio", HIGHER),
    # The Ray pool's peak: one reading summed over Ray's own worker processes, which moves by a tenth between two
    # runs of one commit; compare reports it as changed, never as a regression.
    Metric("scale.ray_rss_peak_*", MEMORY, "MB"),
    Metric("scale.ray_rss_*", MEMORY, "MB", LOWER),
    Metric("scale.*_s", TIMING, "s", LOWER),
    Metric("scale.ray_job_overhead_seconds", TIMING, "s", LOWER),
    Metric("scale.io_per_s.rows_per_s", TIMING, "rows/s", HIGHER),
    Metric("scale.io_per_s.bytes_in_per_row", SIZE, "bytes", LOWER),
    Metric("scale.io_per_s.bytes_out_per_row", SIZE, "bytes", LOWER, stable=False),  # rows hold their input's path
    Metric("scale.plan_times.wall_s.**", TIMING, "s", LOWER),
    Metric("scale.plan_times.workers_for_**", TIMING, "workers", LOWER),
    Metric("scale.plan_times.break_even_sentences_w2", TIMING, "sentences", LOWER),
    # the runner: the fingerprint and what it hashed; the footprint is what the run left on disk
    Metric("run.fingerprint", IDENTITY, "hash"),
    Metric("run.fingerprint_inputs**", IDENTITY),
    Metric("run.notebook_seconds.*", TIMING, "s"),  # one reading per notebook: compare says changed, never slower
    Metric("run.footprint.*_mb", SIZE, "MB", LOWER),
    Metric("run.footprint.disk_vs_export", SIZE, "ratio", LOWER),
    Metric("run.footprint.removed", IDENTITY, "paths"),
    Metric("run.footprint.kept_variants", IDENTITY, "variants"),
)
# fmt: on


def _regex(pattern: str) -> re.Pattern[str]:
    """`*`: any text within one dotted part; `**`: any text, dots included; everything else literally."""
    parts = re.split(r"(\*\*|\*)", pattern)
    return re.compile("".join(".*" if p == "**" else "[^.]*" if p == "*" else re.escape(p) for p in parts) + r"\Z")


_COMPILED = tuple((_regex(m.pattern), m) for m in METRICS)


@lru_cache(maxsize=8192)
def declared(key: str) -> Metric | None:
    """The first declaration whose pattern matches the flattened key, or None."""
    return next((metric for regex, metric in _COMPILED if regex.match(key)), None)


def undeclared(keys: Iterable[str]) -> list[str]:
    """The flattened keys no pattern declares, in their order."""
    return [key for key in keys if declared(key) is None]


def reproducible(key: str) -> bool:
    """Whether the fingerprint hashes the key (an undeclared key is hashed: a reviewer then sees it)."""
    metric = declared(key)
    return metric is None or metric.reproducible


def unit(key: str) -> str:
    """The declared unit ("" when none or undeclared)."""
    metric = declared(key)
    return metric.unit if metric else ""


def warn_undeclared(keys: Iterable[str]) -> list[str]:
    """Warn (UndeclaredMetricWarning, one warning naming them) about the flattened keys not declared; returns them.
    A warning and not an error: a notebook that records a new metric still finishes, and the tests fail on it."""
    missing = undeclared(keys)
    if missing:
        warnings.warn(missing_line(missing), UndeclaredMetricWarning, stacklevel=3)
    return missing


def missing_line(keys: list[str], shown: int = 8) -> str:
    """One line naming undeclared keys (the first `shown` of them)."""
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return f"{len(keys)} metric(s) not declared in mtonnx/report/schema.py: {', '.join(keys[:shown])}{more}"
