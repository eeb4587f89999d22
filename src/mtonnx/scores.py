"""BLEU and chrF of translations, per corpus, per data source and per sentence, and the paired bootstrap that puts
a 95 % CI on the difference between two systems on the same sentences.

Scores use sacrebleu with tokenize="zh" (character-level for Chinese), signatures recorded. sacrebleu is the lab's:
importing this module needs it, so the torch-free runtime never does.
"""

from __future__ import annotations

from itertools import zip_longest
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF


def score(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """Corpus BLEU (tokenize="zh") and chrF, with sacrebleu's signatures."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(tokenize="zh"), CHRF()
    return {
        "bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED = 1000, 12345  # sacrebleu's defaults, pinned (a seed of 0 would not be fixed)


def paired_bootstrap(
    baseline: list[str],
    systems: dict[str, list[str]],
    references: list[str],
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """Each system against the baseline on the same sentences, with sacrebleu's paired bootstrap resampling.

    Per system and metric (BLEU tokenize="zh", chrF): the score, the delta to the baseline, the delta's 95 % CI
    and the p-value. sacrebleu's `PairedTest` gives the scores and p-values; it reports a CI per system, not of
    the difference, so the delta's CI is read off the same resamples (the same seeded index draw, sacrebleu's own
    sufficient statistics and its percentile rule). A system whose outputs equal the baseline's gets delta 0,
    CI [0, 0] and no p-value (sacrebleu would report its smallest p for a zero difference).
    """
    import os

    from sacrebleu.significance import PairedTest

    metrics = {"bleu": BLEU(tokenize="zh"), "chrf": CHRF()}
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        test = PairedTest(
            [("baseline", baseline), *systems.items()],
            dict(metrics),
            references=[references],
            test_type="bs",
            n_samples=samples,
            n_jobs=1,
        )
        signatures, scores = test()
    finally:
        if previous is None:
            os.environ.pop("SACREBLEU_SEED")
        else:
            os.environ["SACREBLEU_SEED"] = previous
    by_metric = dict(zip(metrics, [key for key in scores if key != "System"]))  # "BLEU", "chrF2"
    rows = np.random.default_rng(seed).choice(len(references), size=(samples, len(references)), replace=True)
    low, high = samples // 40, samples - samples // 40 - 1  # sacrebleu's 95 % rule (estimate_ci)
    out: dict[str, Any] = {"signature": {k: signatures[by_metric[k]].format() for k in metrics}, "systems": {}}
    resampled = {k: _resampled(m, baseline, references, rows) for k, m in metrics.items()}
    for i, (name, hypotheses) in enumerate(systems.items(), start=1):
        entry: dict[str, Any] = {"identical": hypotheses == baseline}
        for key, metric in metrics.items():
            result, base = scores[by_metric[key]][i], scores[by_metric[key]][0]
            deltas = np.sort(_resampled(metric, hypotheses, references, rows) - resampled[key])
            identical = entry["identical"]
            entry[key] = round(result.score, 2)
            entry[f"{key}_delta"] = 0.0 if identical else round(result.score - base.score, 2)
            entry[f"{key}_delta_ci"] = (
                [0.0, 0.0] if identical else [round(float(deltas[low]), 2), round(float(deltas[high]), 2)]
            )
            entry[f"{key}_p_value"] = None if identical else round(float(result.p_value), 4)
        out["systems"][name] = entry
    return out


def fidelity(
    hypotheses: list[str], fp32: list[str], samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED
) -> dict[str, Any]:
    """How far a variant's translations are fp32's own, sentence by sentence: the share identical with its 95 % CI
    (the same seeded resamples and percentile rule as `paired_bootstrap`), and chrF of the variant against fp32's
    output as its reference (how much the sentences that differ, differ)."""
    if len(hypotheses) != len(fp32) or not fp32:
        raise ValueError(f"{len(hypotheses)} translations for {len(fp32)} fp32 sentences")
    same = np.array([a == b for a, b in zip(hypotheses, fp32)], dtype=float)
    rows = np.random.default_rng(seed).choice(len(fp32), size=(samples, len(fp32)), replace=True)
    shares = np.sort(same[rows].mean(axis=1))
    low, high = samples // 40, samples - samples // 40 - 1
    return {
        "same_as_fp32": round(float(same.mean()), 3),
        "same_as_fp32_ci": [round(float(shares[low]), 3), round(float(shares[high]), 3)],
        "chrf_vs_fp32": round(CHRF().corpus_score(hypotheses, [fp32]).score, 2),
    }


def _resampled(metric, hypotheses: list[str], references: list[str], rows: np.ndarray) -> np.ndarray:
    """The corpus score of each bootstrap resample (`rows`: its sentence indices), computed as sacrebleu does."""
    stats = np.array(metric._extract_corpus_statistics(hypotheses, [references]), dtype="float32")
    return np.array([metric._compute_score_from_stats(s.sum(0)).score for s in stats[rows]])


def by_source(sources: list[str], hypotheses: list[str], references: list[str]) -> dict[str, dict[str, Any]]:
    """Corpus BLEU and chrF per data source (`sources[i]` names sentence i's: "hsk" in domain, "techdocs" out)."""
    out = {}
    for name in dict.fromkeys(sources):
        picked = [i for i, s in enumerate(sources) if s == name]
        scores = score([hypotheses[i] for i in picked], [references[i] for i in picked])
        out[name] = {"sentences": len(picked), "bleu": scores["bleu"], "chrf": scores["chrf"]}
    return out


def sentence_chrf(hypotheses: list[str], references: list[str]) -> list[float]:
    """Each translation's chrF against its reference, rounded to 0.1."""
    chrf = CHRF()
    return [round(chrf.sentence_score(h, [r]).score, 1) for h, r in zip(hypotheses, references)]


def showcase(hypotheses: list[str], references: list[str], count: int = 6) -> list[int]:
    """The rows of an example table: the best and the worst translations by sentence chrF, alternating from the best
    (ties by position), so a reader sees where the model is right next to where it is wrong, never only the first
    rows of the set."""
    scored = sentence_chrf(hypotheses, references)
    order = sorted(range(len(scored)), key=lambda i: (-scored[i], i))
    best = order[: (count + 1) // 2]
    worst = [i for i in reversed(order) if i not in best][: count // 2]
    return [i for pair in zip_longest(best, worst) for i in pair if i is not None]


def best_and_worst(pairs: list, hypotheses: list[str], count: int = 2) -> list[dict[str, Any]]:
    """Per data source, the `count` best and `count` worst translations by sentence chrF (ties by position), to
    show what a corpus score means next to it (out of domain, even the best are often wrong)."""
    chrf, out = CHRF(), []
    for name in dict.fromkeys(p.source for p in pairs):
        picked = [i for i, p in enumerate(pairs) if p.source == name]
        scores = {i: chrf.sentence_score(hypotheses[i], [pairs[i].zh]).score for i in picked}
        order = sorted(picked, key=lambda i: (-scores[i], i))
        for kind, chosen in (("best", order[:count]), ("worst", order[::-1][:count])):
            out += [
                {
                    "source": name,
                    "kind": kind,
                    "chrf": round(scores[i], 1),
                    "en": pairs[i].en,
                    "reference": pairs[i].zh,
                    "model": hypotheses[i],
                }
                for i in chosen
            ]
    return out
