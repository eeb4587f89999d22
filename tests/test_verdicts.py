"""Verdicts that hold: the quality gate's three outcomes from sacrebleu's paired bootstrap, a recommendation that
moves only with a speed difference beyond noise, and speed targets read off paired repetitions."""

from __future__ import annotations

import numpy as np
import pytest
from sacrebleu.metrics import BLEU
from sacrebleu.significance import _compute_p_value

from mtonnx import data, scores
from mtonnx.measure import verdicts

PAIRS = data.eval_set({"hsk_size": 120, "techdocs_size": 0, "eval_split": "test"})
REFS = [p.zh for p in PAIRS]


def degraded(refs: list[str], every: int) -> list[str]:
    """Every `every`-th sentence cut to its first half: a known, deterministic loss."""
    return [r[: len(r) // 2] if i % every == 0 else r for i, r in enumerate(refs)]


def gates(systems: dict[str, list[str]], base: list[str], refs: list[str], gate_bleu: float = 0.5) -> dict[str, str]:
    stats = scores.paired_bootstrap(base, systems, refs)["systems"]
    return {n: verdicts.gate(s["bleu_delta"], s["bleu_delta_ci"], gate_bleu) for n, s in stats.items()}


def test_identical_passes_half_broken_fails_a_near_tie_on_ten_sentences_is_inconclusive():
    base = degraded(REFS, 3)
    assert gates({"same": list(base), "broken": degraded(base, 2)}, base, REFS) == {"same": "pass", "broken": "fail"}
    # ten sentences, one a little worse and one a little better: a near-tie whose interval is far wider than the gate
    small_base, small_refs = base[:10], REFS[:10]
    changed = list(small_base)
    changed[1] = small_base[1][:-2]
    changed[3] = small_refs[3][: len(small_refs[3]) * 3 // 4]
    stats = scores.paired_bootstrap(small_base, {"near": changed}, small_refs)["systems"]["near"]
    assert abs(stats["bleu_delta"]) < 0.5 and stats["bleu_delta_ci"][0] < -0.5
    assert verdicts.gate(stats["bleu_delta"], stats["bleu_delta_ci"], 0.5) == "inconclusive"
    needed = verdicts.sentences_needed(stats["bleu_delta"], stats["bleu_delta_ci"], 0.5, 10)
    assert needed > 10


def test_the_delta_interval_comes_from_sacrebleus_own_resamples():
    """The p-value recomputed from our resampled deltas equals sacrebleu PairedTest's: the same paired draws."""
    base, system = degraded(REFS, 3), degraded(REFS, 5)
    result = scores.paired_bootstrap(base, {"system": system}, REFS)
    rows = np.random.default_rng(scores.BOOTSTRAP_SEED).choice(len(REFS), size=(1000, len(REFS)), replace=True)
    deltas = scores._resampled(BLEU(tokenize="zh"), system, REFS, rows) - scores._resampled(
        BLEU(tokenize="zh"), base, REFS, rows
    )
    real = BLEU(tokenize="zh").corpus_score(system, [REFS]).score - BLEU(tokenize="zh").corpus_score(base, [REFS]).score
    assert (
        round(_compute_p_value(np.abs(deltas) - np.abs(deltas).mean(), abs(real)), 4)
        == result["systems"]["system"]["bleu_p_value"]
    )
    low, high = result["systems"]["system"]["bleu_delta_ci"]
    assert low < result["systems"]["system"]["bleu_delta"] < high
    assert "bs:1000|seed:12345" in result["signature"]["bleu"] and "tok:zh" in result["signature"]["bleu"]
    assert scores.paired_bootstrap(base, {"system": system}, REFS) == result  # fixed seed: the same numbers again


def row(gate: str, size: float, times: list[float], same: float = 1.0, fidelity: str = "pass") -> dict:
    return {
        "gate": gate,
        "fidelity_gate": fidelity,
        "size_mb": size,
        "times_ms_workload": times,
        "workload_ms": float(np.median(times)),
        "bleu_delta": -0.1,
        "bleu_delta_ci": [-0.3, 0.1],
        "fidelity": {"same_as_fp32": same, "same_as_fp32_ci": [same - 0.05, min(same + 0.05, 1.0)]},
    }


def test_recommendation_is_stable_within_noise_and_moves_with_a_real_difference():
    rng = np.random.default_rng(0)
    picks = set()
    for _ in range(50):  # speeds equal up to +-8 % noise: size decides, every time
        noisy = lambda: list(100 * (1 + rng.uniform(-0.08, 0.08, 5)))  # noqa: E731
        rows = {
            "fp32": row("pass", 8.0, noisy()),
            "int8": row("pass", 2.5, noisy()),
            "fp16": row("pass", 4.0, noisy()),
            "int8-naive": row("fail", 2.0, noisy()),
        }
        picks.add(verdicts.recommend(rows)[0])
    assert picks == {"int8"}
    rows = {
        "fp32": row("pass", 8.0, [100, 104, 98, 101, 99]),
        "int8": row("pass", 2.5, [100, 96, 103, 99, 101]),
        "fp16": row("pass", 4.0, [80, 84, 79, 85, 82]),
    }  # fp16 faster by >= 10 % in every repetition
    choice, reason = verdicts.recommend(rows, objective="latency@b1,b8;beams=4")
    assert choice == "fp16" and "faster beyond noise than fp32, int8" in reason
    assert "objective latency@b1,b8;beams=4" in reason and "at least 1.10x in every one of 5" in reason
    rows["fp16"]["times_ms_workload"][2] = 97  # one repetition within noise: no longer faster beyond noise
    assert verdicts.recommend(rows)[0] == "int8"
    assert verdicts.recommend({"fp32": row("pass", 8, [1]), "x": row("inconclusive", 1, [0.1])})[0] == "fp32"


def test_a_variant_that_rewrites_half_the_translations_fails_fidelity_and_is_never_recommended():
    """Issue 37: int4 passed a BLEU gate a small model cannot resolve while giving fp32's translation for 47 % of
    the sentences; as small and as fast as int8, it won on size."""
    rows = {
        "fp32": row("pass", 8.0, [100] * 5),
        "int8": row("pass", 2.5, [60] * 5, same=0.9),
        "int4": row("pass", 1.5, [60] * 5, same=0.47, fidelity=verdicts.fidelity_gate([0.42, 0.52], 0.8)),
    }
    choice, reason = verdicts.recommend(rows)
    assert rows["int4"]["fidelity_gate"] == "fail"
    assert choice == "int8" and "int4 (quality pass, fidelity fail)" in reason
    assert verdicts.fidelity_gate([0.75, 0.85], 0.8) == "inconclusive"
    assert verdicts.fidelity_gate([0.8, 0.9], 0.8) == "pass"


def test_one_number_per_repetition_a_win_at_one_batch_cannot_cancel_a_loss_at_another():
    """The workload's time sums both batch sizes: int4 as fast at batch 1 and 1.43x slower at batch 8 is slower."""
    b1 = {"int8": [60] * 5, "int4": [54] * 5}  # int4 1.11x faster at batch 1
    b8 = {"int8": [120] * 5, "int4": [172] * 5}  # ... and 1.43x slower at batch 8
    rows = {n: row("pass", size, [a + b for a, b in zip(b1[n], b8[n])]) for n, size in (("int8", 2.5), ("int4", 1.5))}
    choice, reason = verdicts.recommend(rows)
    assert choice == "int8" and "faster beyond noise than int4" in reason


def test_a_variant_that_cannot_be_deployed_is_never_recommended():
    rows = {"fp32": row("pass", 8.0, [100] * 5), "search": row("pass", 1.0, [10] * 5)}
    rows["search"]["deployable"] = False
    choice, reason = verdicts.recommend(rows)
    assert choice == "fp32" and "search (not deployable)" in reason


def test_too_few_repetitions_never_make_a_speed_difference():
    few = {"fp32": row("pass", 8.0, [100, 100, 100]), "fp16": row("pass", 4.0, [50, 50, 50])}
    few["int8"] = row("pass", 2.5, [100, 100, 100])  # half as fast as fp16 in all 3: still within noise
    choice, reason = verdicts.recommend(few)
    assert choice == "int8" and "3 paired repetitions, fewer than 5: no speed difference counts" in reason
    assert not verdicts.faster_beyond_noise([50] * 4, [100] * 4) and verdicts.faster_beyond_noise([50] * 5, [100] * 5)


def test_the_objective_is_named_by_its_batches_beams_and_weights():
    assert verdicts.objective_name([1, 8], 4, [1.0, 1.0]) == "latency@b1,b8;beams=4"
    assert verdicts.objective_name([8], 1, [2.0]) == "latency@b8;beams=1;weights=2"
    assert verdicts.objective_name([32], 4, [1.0], corpus=200) == "corpus200@b32;beams=4"


@pytest.mark.parametrize(
    ("paired", "verdict"),
    [
        ({"median": 1.3, "min": 1.2, "max": 1.4}, "met"),
        ({"median": 1.0, "min": 0.9, "max": 1.1}, "missed"),
        ({"median": 1.16, "min": 1.05, "max": 1.3}, "within noise"),
        (None, "not measured"),
    ],
)
def test_target_verdicts_read_the_paired_repetitions(paired, verdict):
    assert verdicts.target(paired, 1.15) == verdict
