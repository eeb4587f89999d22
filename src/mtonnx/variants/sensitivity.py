"""Per-group sensitivity: each group of weights quantized alone (the rest fp32), so its cost in quality and its
gain in speed can be measured on its own, and the mixed recipe built from the groups that pass the quality gate
(measure.verdicts) on their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtonnx.variants.build import build_variant
from mtonnx.variants.transforms import GROUPS, dynamic_int8


def group_variant(group: str) -> str:
    """The variant (and directory) name of a group's sensitivity variant."""
    return f"group-{group}"


def group_variants(fp32_dir: str | Path, variants_dir: str | Path) -> dict[str, Path]:
    """Build `group-<name>` for every sensitivity group: only that group's weights int8 (embeddings: the Gathers)."""
    built = {}
    for group in GROUPS:
        op_types = ("Gather",) if group == "embeddings" else ("MatMul",)
        built[group] = Path(variants_dir) / group_variant(group)
        build_variant(
            built[group].name,
            fp32_dir,
            built[group],
            dynamic_int8(op_types=op_types, groups=(group,)),
            {"groups": [group]},
        )
    return built


def safe_groups(gates: dict[str, str]) -> tuple[str, ...]:
    """The MatMul groups whose quality gate passes when they alone are int8 (the lm_head alone when none does)."""
    safe = tuple(g for g, outcome in gates.items() if g != "embeddings" and outcome == "pass")
    return safe or ("lm_head",)


def build_mixed(fp32_dir: str | Path, variants_dir: str | Path, groups: tuple[str, ...]) -> Path:
    """`int8-mixed`: dynamic int8 of exactly `groups`."""
    out = Path(variants_dir) / "int8-mixed"
    build_variant(out.name, fp32_dir, out, dynamic_int8(groups=groups), {"groups": list(groups)})
    return out


def table(
    quality: dict[str, dict[str, Any]], speed: dict[str, dict[str, Any]], baseline: str = "fp32"
) -> dict[str, dict[str, Any]]:
    """Per group: its variant's BLEU delta with CI and gate, and its batch-1 speedup against the baseline."""
    return {
        group: {
            "bleu_delta": quality[group_variant(group)]["bleu_delta"],
            "bleu_delta_ci": quality[group_variant(group)]["bleu_delta_ci"],
            "gate": quality[group_variant(group)]["gate"],
            "p50_b1_speedup": round(speed[baseline]["p50_ms_b1"] / speed[group_variant(group)]["p50_ms_b1"], 2),
        }
        for group in GROUPS
    }
