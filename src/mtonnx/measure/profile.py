"""Where a generation's time goes at real lengths, part by part: the lesson behind a speed gap at many rows a step.

One translator decodes rows (the eval corpus, sorted by length, in batches) with every session wrapped
(`Translator(wrap=...)`) and every run of the decoding loop wrapped, so one pass splits its wall time into:
- `encoder`: ONNX Runtime's runs of the encoder (and of the cross K/V file, on the lean layouts);
- `decoder`: ONNX Runtime's runs of the decoder step (and of the search head);
- `feeds`: the rest of each step: building its feeds, updating the cache (host code around the decoder's runs);
- `reorder`: gathering the cache rows that beams continue and dropping retired sentences' rows;
- `search`: the decoding loop itself (log-softmax, candidates, top-k, the finished set), what is left.
Each part is the median over `repeats` passes of its seconds; the shares are of the median pass's total.

Two counts say how much of the work could not change any output:
- `row_steps`: decoder rows computed, summed over steps, against `output_row_steps`: each sentence's beams times
  its own output's length, the rows no search can avoid (the rest are padding in length-mixed batches, beams of
  sentences that ended but stay in the batch, and beam search's look-ahead past a sentence's final output);
- `encoder_positions`: positions the encoder computed, against the sources' real tokens.

Beside CTranslate2 int8 on the same rows (`against`): `vs_ct2_int8`, its time over ours, and `ort_only_vs_ct2_int8`,
its time over ONNX Runtime's runs alone: the ratio the runtime would reach if every host part took no time, so the
two say how much of a gap the host side explains and how much lies in ONNX Runtime's kernels. A diagnosis, timed in
turn rather than interleaved: the corpus study's paired repetitions are the verdict.

Inside ONNX Runtime, one more pass with ORT's profiler on (its own sessions: profiling slows every node alike)
gives each operator type's share of the nodes' time, and `quantization_share`: the operators that quantize
activations (QUANTIZE_OPS). Written by hand: ORT's profiler sees its nodes but not the Python between runs, and
Python's profilers see a run as one call; the split needs both sides at once.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtonnx.engines import PROFILE_PEER
from mtonnx.runtime import SessionSettings, Translator, layout

ENCODER_FILES = (layout.ENCODER, layout.CROSS_KV)
PARTS = ("encoder", "decoder", "feeds", "reorder", "search")
ORT_PARTS = ("encoder", "decoder")  # ONNX Runtime's own runs; the other parts are the host's
PEER = PROFILE_PEER  # the same rows, batches and beams; it sorts them its own way
# The operators that quantize activations: dynamic int8's, and the per-row form's (passes.row_scales: |x|, its
# row maximum, x / range, QuantizeLinear). Abs and ReduceMax appear in Marian's graphs only there.
QUANTIZE_OPS = ("DynamicQuantizeLinear", "QuantizeLinear", "Abs", "ReduceMax")


class _Clock:
    """Seconds by part, and the counts, of one pass."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.row_steps = 0
        self.encoder_positions = 0


class _TimedSession:
    """A session stand-in that adds each run's seconds to the encoder's or the decoder's part."""

    def __init__(self, session: Any, part: str, clock_of: Any):
        self._session, self._part, self._clock_of = session, part, clock_of

    def _timed(self, method: str, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return getattr(self._session, method)(*args, **kwargs)
        finally:
            self._clock_of().seconds[self._part] += time.perf_counter() - start

    def run(self, *args: Any, **kwargs: Any) -> Any:
        feeds = args[1] if len(args) > 1 else kwargs.get("input_feed", {})
        if self._part == "encoder" and "input_ids" in feeds:
            self._clock_of().encoder_positions += int(feeds["input_ids"].size)
        return self._timed("run", *args, **kwargs)

    def run_with_iobinding(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("run_with_iobinding", *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class _TimedRun:
    """A decoding run stand-in: its steps (ORT's decoder runs inside them are the decoder's part, the rest feeds)
    and reorders timed, its rows counted."""

    def __init__(self, run: Any, clock: _Clock):
        self._run, self._clock = run, clock

    def _step(self, method: str, tokens: Any, *args: Any) -> Any:
        c = self._clock
        inside, start = c.seconds["decoder"], time.perf_counter()
        try:
            return getattr(self._run, method)(tokens, *args)
        finally:
            c.seconds["feeds"] += time.perf_counter() - start - (c.seconds["decoder"] - inside)
            c.row_steps += len(tokens)

    def step(self, tokens: Any) -> Any:
        return self._step("step", tokens)

    def step_top(self, tokens: Any, k: int) -> Any:
        return self._step("step_top", tokens, k)

    def reorder(self, rows: Any) -> None:
        start = time.perf_counter()
        try:
            self._run.reorder(rows)
        finally:
            self._clock.seconds["reorder"] += time.perf_counter() - start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)


def profile(
    variant_dir: str | Path,
    rows: list[list[int]],
    batch: int,
    beams: int,
    max_new_tokens: int,
    repeats: int = 3,
    threads: int = 1,
) -> dict[str, Any]:
    """The split of `rows`' generation (Translator.generate_sorted, `batch` rows a batch, `beams`) on
    `variant_dir`: seconds and shares of each part (PARTS), the row and position counts, and ORT's operator
    shares (see the module docstring)."""
    clock = _Clock()
    translator = Translator(
        variant_dir,
        session=SessionSettings(threads=threads),
        wrap=lambda file, session: _TimedSession(session, _part_of(file), lambda: clock),
    )
    begin = translator.decoder.begin
    translator.decoder.begin = lambda *args, **kwargs: _TimedRun(begin(*args, **kwargs), clock)
    options = {"num_beams": beams, "max_new_tokens": max_new_tokens}
    translator.generate_sorted(rows, batch, **options)  # warm-up
    passes, outputs = [], None
    for _ in range(repeats):
        clock = _Clock()
        start = time.perf_counter()
        outputs = translator.generate_sorted(rows, batch, **options)
        total = time.perf_counter() - start
        clock.seconds["search"] = total - sum(clock.seconds[p] for p in PARTS if p != "search")
        passes.append((total, clock))
    totals = [t for t, _ in passes]
    median_total = statistics.median(totals)
    seconds = {p: round(statistics.median(c.seconds[p] for _, c in passes), 4) for p in PARTS}
    counts = passes[0][1]
    output_row_steps = sum(beams * len(out) for out in outputs)
    return {
        "variant": Path(variant_dir).name,
        "sentences": len(rows),
        "batch": batch,
        "beams": beams,
        "threads": threads,
        "repeats": repeats,
        "seconds": round(median_total, 4),
        "times_s": [round(t, 4) for t in totals],
        "parts_s": seconds,
        "shares": {p: round(seconds[p] / median_total, 3) for p in PARTS},
        "row_steps": counts.row_steps,
        "output_row_steps": output_row_steps,
        "beyond_output_share": round(1 - output_row_steps / counts.row_steps, 3) if counts.row_steps else None,
        "encoder_positions": counts.encoder_positions,
        "source_tokens": sum(len(r) for r in rows),
        "operators": operator_shares(variant_dir, rows, batch, options, threads),
    }


@dataclass(frozen=True)
class _Profiled(SessionSettings):
    """The runtime's session settings with ORT's profiler on, writing to `profile_prefix`*.json."""

    profile_prefix: str = "ort"

    def options(self) -> Any:
        options = super().options()
        options.enable_profiling = True
        options.profile_file_prefix = self.profile_prefix
        return options


def _part_of(file: str) -> str:
    return "encoder" if file in ENCODER_FILES else "decoder"


def operator_shares(
    variant_dir: str | Path, rows: list[list[int]], batch: int, options: dict[str, Any], threads: int = 1
) -> dict[str, Any]:
    """One pass with ORT's profiler on: each operator type's share of the nodes' time (the 8 largest, the rest as
    `other`), and `quantization_share` (QUANTIZE_OPS)."""
    with tempfile.TemporaryDirectory() as work:
        sessions: list[Any] = []

        def keep(file: str, session: Any) -> Any:
            sessions.append(session)
            return session

        settings = _Profiled(threads=threads, profile_prefix=str(Path(work) / "ort"))
        Translator(variant_dir, session=settings, wrap=keep).generate_sorted(rows, batch, **options)
        by_op: dict[str, float] = defaultdict(float)
        for session in sessions:
            trace = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
            for event in trace:
                if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
                    by_op[event["args"]["op_name"]] += event["dur"]
    total = sum(by_op.values()) or 1.0
    ranked = sorted(by_op.items(), key=lambda kv: -kv[1])
    shares = {op: round(us / total, 3) for op, us in ranked[:8]}
    shares["other"] = round(sum(us for _, us in ranked[8:]) / total, 3)
    return {"shares": shares, "quantization_share": round(sum(by_op[op] for op in QUANTIZE_OPS) / total, 3)}


def against(profiles: dict[str, dict[str, Any]], peer_seconds: float) -> dict[str, dict[str, Any]]:
    """Each profile with the peer's time (`peer_seconds`, the same rows) over its own (`vs_ct2_int8`) and over its
    ONNX Runtime parts alone (`ort_only_vs_ct2_int8`)."""
    out = {}
    for name, p in profiles.items():
        ort = sum(p["parts_s"][part] for part in ORT_PARTS)
        out[name] = {
            **p,
            "vs_ct2_int8": round(peer_seconds / p["seconds"], 3),
            "ort_only_vs_ct2_int8": round(peer_seconds / ort, 3) if ort else None,
        }
    return out


def summary(result: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """What the metrics keep of the profile study's result (`batch<N>`: {variant: profile, PEER: its time}): per
    batch and variant its seconds and shares, the counts of work no output needed, quantization's share of ORT's
    node time, the three operators that take most of it, and the peer's ratios; the peer's seconds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for key, entries in result.items():
        out[key] = {}
        for name, p in entries.items():
            if name == PEER:
                out[key][name] = {"seconds": p["seconds"]}
                continue
            ops = [(op, share) for op, share in p["operators"]["shares"].items() if op != "other"][:3]
            out[key][name] = {
                **{k: p[k] for k in ("batch", "sentences", "seconds", "shares", "beyond_output_share")},
                "padded_encoder_share": round(1 - p["source_tokens"] / p["encoder_positions"], 3)
                if p["encoder_positions"]
                else None,
                "quantization_share": p["operators"]["quantization_share"],
                "top_operators": ", ".join(f"{op} {share:.0%}" for op, share in ops),
                **{k: p[k] for k in ("vs_ct2_int8", "ort_only_vs_ct2_int8") if k in p},
            }
    return out
