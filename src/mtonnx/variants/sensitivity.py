"""Per-group sensitivity: each group of weights quantized alone (the rest fp32), what it costs in quality and
buys in speed, and the mixed recipe built from the groups that stay inside the quality gate on their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mtonnx.measure.variants import VariantBench
from mtonnx.variants.build import build_variant
from mtonnx.variants.transforms import GROUPS, dynamic_int8


def group_variants(fp32_dir: str | Path, variants_dir: str | Path) -> dict[str, Path]:
    """Build `group-<name>` for every sensitivity group: only that group's weights int8 (embeddings: the Gathers)."""
    built = {}
    for group in GROUPS:
        op_types = ("Gather",) if group == "embeddings" else ("MatMul",)
        built[group] = Path(variants_dir) / f"group-{group}"
        build_variant(
            built[group].name,
            fp32_dir,
            built[group],
            dynamic_int8(op_types=op_types, groups=(group,)),
            {"groups": [group]},
        )
    return built


def analyse(
    fp32_dir: str | Path, variants_dir: str | Path, bench: VariantBench, fp32_row: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each group's variant measured (no beam timing beyond one sentence, no RSS probe) against fp32."""
    rows = {}
    for group, directory in group_variants(fp32_dir, variants_dir).items():
        row = bench.measure(directory, fp32_texts=fp32_row["texts"], rss=False, beam_sentences=1)
        rows[group] = {
            **row,
            "bleu_change": round(row["bleu"] - fp32_row["bleu"], 2),
            "p50_b1_speedup": round(fp32_row["p50_ms_b1"] / row["p50_ms_b1"], 2),
        }
    return rows


def safe_groups(rows: dict[str, dict[str, Any]], gate_bleu: float) -> tuple[str, ...]:
    """The MatMul groups whose BLEU loss alone stays within `gate_bleu` (the lm_head alone when none does)."""
    safe = tuple(g for g, r in rows.items() if g != "embeddings" and -r["bleu_change"] <= gate_bleu)
    return safe or ("lm_head",)


def build_mixed(fp32_dir: str | Path, variants_dir: str | Path, groups: tuple[str, ...]) -> Path:
    """`int8-mixed`: dynamic int8 of exactly `groups`."""
    out = Path(variants_dir) / "int8-mixed"
    build_variant(out.name, fp32_dir, out, dynamic_int8(groups=groups), {"groups": list(groups)})
    return out
