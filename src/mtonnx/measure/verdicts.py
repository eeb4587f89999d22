"""Verdicts that do not move with timing noise: the quality gate as a non-inferiority test, the recommended
variant, and whether a speed target is met.

- Quality: a variant `pass`es when the lower end of the 95 % CI of its BLEU delta against fp32 lies above
  -gate_bleu, `fail`s when the delta itself lies below it, and is `inconclusive` otherwise: too few sentences
  to tell a real loss from chance. Inconclusive is never treated as a pass.
- Speed: one engine counts as faster than another only when it is faster by at least `margin` in every paired
  repetition (repetition i of both ran seconds apart), of at least MIN_REPEATS; otherwise the two are within
  noise. With equal engines each repetition is a coin toss, so "every one of n" happens by chance with odds 2^-n:
  three repetitions (1 in 8) flipped the recommendation between two CI runs of the same commit; five is 1 in 32.
- Fidelity: a variant `pass`es when the 95 % CI of its share of sentences identical to fp32's translation lies
  at or above the params' minimum, `fail`s when it lies below, and is `inconclusive` otherwise. BLEU against human
  references cannot see a model that says something different for every second sentence when the model's own BLEU
  is low; this gate can.
- Batch invariance: a variant `pass`es when every measured sentence has the same tokens alone, in batches and
  shuffled, at every beam count measured (a translation is a function of the sentence, not of its neighbours), and
  `fail`s otherwise; the params may exempt a variant with a stated reason (`exempt`, shown wherever the gate is);
  a variant not measured is `not measured` and is not a candidate.
- Recommendation: a declared objective (the workload's time: the params' batch sizes at their beams, one number per
  variant and repetition) among the deployable variants that pass every gate; out is every one another is faster
  than beyond noise on it; of the rest the smallest on disk, then the first in a fixed order. It depends on a
  timing only where the timing is beyond noise.
"""

from __future__ import annotations

import math
from typing import Any

from mtonnx.foundation.repetitions import MIN_REPEATS

SPEED_MARGIN = 1.1  # faster means at least 10 % faster, in every paired repetition


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


def fidelity_gate(same_ci: list[float], minimum: float) -> str:
    """`pass` / `fail` / `inconclusive` for the share of sentences identical to fp32 and its 95 % CI: pass when even
    the CI's lower end reaches `minimum`, fail when its upper end stays below it, inconclusive in between."""
    if same_ci[0] >= minimum:
        return "pass"
    if same_ci[1] < minimum:
        return "fail"
    return "inconclusive"


def invariance_gate(measured: dict[str, Any] | None, exempt: str | None = None) -> str:
    """`pass` when `measured["share"]` (VariantBench.invariance) is 1, `exempt: <reason>` when the params opt the
    variant out, `not measured` without a measurement, else `fail`."""
    if exempt:
        return f"exempt: {exempt}"
    if measured is None:
        return "not measured"
    return "pass" if measured["share"] == 1 else "fail"


def passes(row: dict[str, Any]) -> bool:
    """Past every gate: quality and fidelity pass, batch invariance passes or is exempt (a row without the
    invariance gate, from a run before it existed, is judged on the other two)."""
    invariant = row.get("invariance_gate", "pass")
    return (
        row["gate"] == "pass"
        and row["fidelity_gate"] == "pass"
        and (invariant == "pass" or invariant.startswith("exempt"))
    )


def objective_name(batches: list[int], beams: int, weights: list[float], corpus: int = 0) -> str:
    """The objective as a name: `latency@b1,b8;beams=4`, with the weights when they are not all 1; a corpus
    workload of N sentences at their real lengths (`corpus`) is `corpus<N>@b32;beams=4`."""
    weighted = "" if all(w == 1 for w in weights) else ";weights=" + ",".join(f"{w:g}" for w in weights)
    kind = f"corpus{corpus}" if corpus else "latency"
    return f"{kind}@{','.join(f'b{b}' for b in batches)};beams={beams}{weighted}"


def recommend(
    rows: dict[str, dict[str, Any]],
    margin: float = SPEED_MARGIN,
    objective: str = "latency",
    baseline: str = "fp32",
) -> tuple[str, str]:
    """(variant, why) by a declared policy. Candidates are the deployable variants that pass every gate (the
    quality gate against the references, the fidelity gate against fp32's translations, batch invariance or its
    stated exemption: `passes`). Each has one number
    per paired repetition, `times_ms_workload` (the objective: the workload's time). Out is every candidate another
    candidate is faster than beyond noise on that number (`faster_beyond_noise`: by `margin` in every paired
    repetition); of the rest, which are within noise of each other, the smallest on disk, then the first in the
    rows' order. The reason names the objective, the gates and the margin."""
    order = list(rows)
    candidates = [n for n in order if passes(rows[n]) and rows[n].get("deployable", True)]
    if not candidates:
        return baseline, f"{baseline}: no deployable variant passes every gate, so the baseline stays"

    def beats(fast: str, slow: str) -> bool:
        return faster_beyond_noise(rows[fast]["times_ms_workload"], rows[slow]["times_ms_workload"], margin)

    front = [n for n in candidates if not any(beats(other, n) for other in candidates if other != n)]
    front.sort(key=lambda n: (rows[n]["size_mb"], order.index(n)))
    choice, row = front[0], rows[front[0]]
    repetitions = len(row["times_ms_workload"])
    parts = [
        f"{choice}: passes the quality gate (BLEU delta {row['bleu_delta']:+.2f}, 95 % CI "
        f"[{row['bleu_delta_ci'][0]:+.2f}, {row['bleu_delta_ci'][1]:+.2f}]), the fidelity gate "
        f"({row['fidelity']['same_as_fp32']:.0%} of sentences identical to fp32, 95 % CI "
        f"[{row['fidelity']['same_as_fp32_ci'][0]:.0%}, {row['fidelity']['same_as_fp32_ci'][1]:.0%}])"
        + _invariance_clause(row),
        f"objective {objective}: {row['workload_ms']} ms a workload; no candidate is faster beyond noise "
        f"(at least {margin:.2f}x in every one of {repetitions} paired repetitions)",
    ]
    beaten = [n for n in candidates if n not in front]
    if beaten:
        parts.append(f"faster beyond noise than {', '.join(beaten)}")
    if repetitions < MIN_REPEATS:
        parts.append(f"{repetitions} paired repetitions, fewer than {MIN_REPEATS}: no speed difference counts")
    ties = front[1:]
    if ties:
        parts.append(
            f"within noise of {', '.join(ties)}: chosen as the smallest on disk ({row['size_mb']} MB), "
            "then by the fixed order"
        )
    left: dict[str, list[str]] = {}
    for name in (n for n in order if n not in candidates):
        left.setdefault(_why_not(rows[name]), []).append(name)
    if left:
        parts.append("not candidates: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in left.items()))
    return choice, "; ".join(parts)


def _invariance_clause(row: dict[str, Any]) -> str:
    measured, verdict = row.get("batch_invariance"), row.get("invariance_gate")
    if verdict is None:
        return ""
    if measured is None:
        return f" and batch invariance ({verdict})"
    return (
        f" and batch invariance ({measured['share']:.0%} of {measured['sentences']} sentences identical alone, "
        f"in batches of {measured['batch']} and shuffled; {verdict})"
    )


def _why_not(row: dict[str, Any]) -> str:
    if not row.get("deployable", True):
        return "not deployable"
    why = f"quality {row['gate']}, fidelity {row['fidelity_gate']}"
    return why + (f", batch invariance {row['invariance_gate']}" if "invariance_gate" in row else "")
