"""Per-group sensitivity: each group of weights quantized alone (the rest fp32; the registry's probes), so its cost
in quality and its gain in speed can be measured on its own, and the groups the mixed recipe quantizes: those that
pass the gates on their own."""

from __future__ import annotations

from typing import Any

from mtonnx.variants.transforms import GROUPS


def group_variant(group: str) -> str:
    """The variant (and directory) name of a group's sensitivity probe (variants.registry.group_probe)."""
    return f"group-{group}"


def safe_groups(gates: dict[str, str]) -> tuple[str, ...]:
    """The MatMul groups whose gates pass when they alone are int8 (`passing`; the lm_head alone when none does)."""
    safe = tuple(g for g, outcome in gates.items() if g != "embeddings" and outcome == "pass")
    return safe or ("lm_head",)


def table(gated: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per group: its probe's BLEU delta with CI and quality gate, its share of sentences identical to fp32 with CI
    and fidelity gate (measure.variants.compare's rows)."""
    return {
        group: {
            "bleu_delta": gated[group_variant(group)]["bleu_delta"],
            "bleu_delta_ci": gated[group_variant(group)]["bleu_delta_ci"],
            "gate": gated[group_variant(group)]["gate"],
            "same_as_fp32": gated[group_variant(group)]["fidelity"]["same_as_fp32"],
            "same_as_fp32_ci": gated[group_variant(group)]["fidelity"]["same_as_fp32_ci"],
            "fidelity_gate": gated[group_variant(group)]["fidelity_gate"],
        }
        for group in GROUPS
    }


def passing(gated: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Per group, "pass" when its probe passes both gates, else the first gate it does not pass."""
    out = {}
    for group in GROUPS:
        row = gated[group_variant(group)]
        out[group] = (
            "pass"
            if row["gate"] == row["fidelity_gate"] == "pass"
            else (row["gate"] if row["gate"] != "pass" else row["fidelity_gate"])
        )
    return out
