"""A run's footprint: what stays on disk once the run is complete, and how large it is against its fp32 export.

Scratch builds are measured during the run and removed at its end: the sensitivity probes and every variant the
params do not keep (`quant.keep`: the recommended one by default, which deploy/ also holds, its bytes stored once
through hard links), the pitfall exports, CTranslate2's conversions, the restriction sweep's cuts and the batch
study's corpus. Each is rebuilt, by its build key, by the run that needs it again. What stays: the exports, the
kept variants with every variant's translations, deploy/, the notebooks, figures, metrics and the report.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtonnx.runtime import layout

SCRATCH = ("pitfalls", "pitfall_static", "ct2", "restriction-sizes", "scale")  # directories of a run, each scratch


def disk_mb(path: str | Path) -> float:
    """MB a directory holds on disk, each file once however many hard links it has (as `du` counts)."""
    seen, total = set(), 0
    for root, _, names in os.walk(path):
        for name in names:
            stat = os.lstat(os.path.join(root, name))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return round(total / 2**20, 1)


def kept(variants_dir: Path, keep: list[str], recommended: str | None) -> set[str]:
    """The variant directories `quant.keep` asks to keep: "all", "recommended" (the run's), or names."""
    names = {p.name for p in variants_dir.iterdir() if p.is_dir()} if variants_dir.is_dir() else set()
    if "all" in keep:
        return names
    wanted = {recommended if k == "recommended" else k for k in keep}
    return names & wanted


def tidy(
    run_dir: str | Path,
    keep: list[str],
    recommended: str | None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Remove the run's scratch builds; returns what the run holds now: `disk_mb`, its fp32 export's `export_mb`,
    their ratio and what was removed."""
    run_dir = Path(run_dir)
    variants = run_dir / "variants"
    keeping = kept(variants, keep, recommended)
    removed = (
        [variants / name for name in sorted(p.name for p in variants.iterdir() if p.is_dir())]
        if (variants.is_dir())
        else []
    )
    removed = [p for p in removed if p.name not in keeping] + [run_dir / d for d in SCRATCH if (run_dir / d).is_dir()]
    before = disk_mb(run_dir)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    after, export = disk_mb(run_dir), disk_mb(run_dir / "export_manual") if (run_dir / "export_manual").is_dir() else 0
    if log and removed:
        log(f"removed {len(removed)} scratch directories ({before - after:.1f} MB); the run holds {after} MB")
    return {
        "disk_mb": after,
        "export_mb": export,
        "disk_vs_export": round(after / export, 2) if export else None,
        "removed": [p.relative_to(run_dir).as_posix() for p in removed],
        "kept_variants": sorted(keeping),
        "deploy_mb": disk_mb(run_dir / layout.DEPLOY) if (run_dir / layout.DEPLOY).is_dir() else None,
    }
