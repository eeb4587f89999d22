"""Verdicts that do not move with timing noise: the quality gate as a non-inferiority test, the recommended
variant, and whether a speed target is met.

- Quality: a variant `pass`es when the lower end of the 95 % CI of its BLEU delta against fp32 lies above
  -gate_bleu, `fail`s when the delta itself lies below it, and is `inconclusive` otherwise: too few sentences
  to tell a real loss from chance. Inconclusive is never treated as a pass.
- Speed: one engine counts as faster than another only when it is faster by at least `margin` in every paired
  repetition (repetition i of both ran seconds apart), of at least MIN_REPEATS; otherwise the two are within
  noise. With equal engines each repetition is a coin toss, so "every one of n" happens by chance with odds 2^-n:
  three repetitions (1 in 8) flipped the recommendation between two CI runs of the same commit; five is 1 in 32.
- Recommendation: among the variants that pass, those no other passing variant is faster than; of those, the
  smallest on disk, then the first in a fixed order. It depends on a timing only where the timing is beyond noise.
"""

from __future__ import annotations

import math
from typing import Any

GATES = ("pass", "fail", "inconclusive")
SPEED_MARGIN = 1.1  # faster means at least 10 % faster, in every paired repetition
MIN_REPEATS = 5  # fewer paired repetitions never make a speed difference


def gate(delta: float, ci: list[float], gate_bleu: float) -> str:
    """`pass` / `fail` / `inconclusive` for a BLEU delta and its 95 % CI against the baseline."""
    if ci[0] > -gate_bleu:
        return "pass"
    if delta < -gate_bleu:
        return "fail"
    return "inconclusive"


def sentences_needed(delta: float, ci: list[float], gate_bleu: float, sentences: int) -> int | None:
    """How many sentences would make an inconclusive delta pass if it stayed where it is (the CI narrows as
    1/sqrt(n)); None when it could not pass (the delta is at or below -gate_bleu)."""
    if delta <= -gate_bleu:
        return None
    half_width = delta - ci[0]
    return math.ceil(sentences * (half_width / (delta + gate_bleu)) ** 2)


def faster_beyond_noise(fast_ms: list[float], slow_ms: list[float], margin: float = SPEED_MARGIN) -> bool:
    """True when `fast` took at most slow / margin in every paired repetition, of at least MIN_REPEATS."""
    return (
        len(fast_ms) >= MIN_REPEATS
        and len(fast_ms) == len(slow_ms)
        and all(s / f >= margin for f, s in zip(fast_ms, slow_ms))
    )


def target(paired: dict[str, float] | None, wanted: float) -> str:
    """`met` when every paired repetition's ratio reaches `wanted` (its min), `missed` when none does (its max),
    else `within noise`; `paired` is timing.paired_ratio's {median, min, max}."""
    if not paired:
        return "not measured"
    if paired["min"] >= wanted:
        return "met"
    if paired["max"] < wanted:
        return "missed"
    return "within noise"


def recommend(
    rows: dict[str, dict[str, Any]],
    baseline: str = "fp32",
    margin: float = SPEED_MARGIN,
    times: tuple[str, ...] = ("times_ms_b1", "times_ms_b8"),
) -> tuple[str, str]:
    """(variant, why) from rows holding `gate`, `size_mb`, `bleu_delta`/`bleu_delta_ci` and, under each of `times`
    the rows all have, the time of each paired repetition (batch 1 for latency, batch 8 for throughput). Out are
    the variants another passing variant beats beyond noise at some batch without being beaten back at any; of the
    rest the smallest on disk, then the first in the rows' order (the fixed order that breaks the last ties)."""
    order = list(rows)
    passing = [name for name in order if rows[name]["gate"] == "pass"]
    if not passing:
        return baseline, f"{baseline}: no variant passes the quality gate, so the baseline stays"
    keys = [t for t in times if all(t in rows[name] for name in passing)]

    def wins(fast: str, slow: str) -> list[str]:
        return [t for t in keys if faster_beyond_noise(rows[fast][t], rows[slow][t], margin)]

    beaten_by = {
        name: [other for other in passing if other != name and wins(other, name) and not wins(name, other)]
        for name in passing
    }
    by_size = lambda names: sorted(names, key=lambda n: (rows[n]["size_mb"], order.index(n)))  # noqa: E731
    front = by_size(name for name in passing if not beaten_by[name]) or by_size(passing)
    choice = front[0]
    beats = [name for name in passing if choice in beaten_by[name]]
    row = rows[choice]
    parts = [
        f"{choice}: passes the quality gate (BLEU delta {row['bleu_delta']:+.2f}, 95 % CI "
        f"[{row['bleu_delta_ci'][0]:+.2f}, {row['bleu_delta_ci'][1]:+.2f}])"
        if choice != baseline
        else f"{choice}: the baseline"
    ]
    if beats:
        batches = " or ".join(t.removeprefix("times_ms_") for t in keys)
        parts.append(
            f"at least {margin:.2f}x faster than {', '.join(beats)} in every paired repetition ({batches}), "
            "never slower beyond noise"
        )
    if any(len(row[t]) < MIN_REPEATS for t in keys):
        parts.append(
            f"{min(len(row[t]) for t in keys)} paired repetitions, fewer than {MIN_REPEATS}: no speed difference counts"
        )
    ties = [name for name in front if name != choice]
    if ties:
        parts.append(
            f"within noise of {', '.join(ties)}: chosen as the smallest on disk ({row['size_mb']} MB), "
            "then by the fixed order"
        )
    losers = [name for name in order if rows[name]["gate"] != "pass"]
    if losers:
        parts.append("not considered: " + ", ".join(f"{n} ({rows[n]['gate']})" for n in losers))
    return choice, "; ".join(parts)
