"""What a notebook records: its metrics as `metrics/<section>.json` and its figures as `figures/<name>.png`;
the runner merges the metrics into metrics.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mtonnx.report.artifacts import write_atomic, write_json

METRICS_DIR, FIGURES_DIR = "metrics", "figures"


def record(run_dir: str | Path, section: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """Save one notebook's metrics as `metrics/<section>.json`; they appear as `<section>.<key>`."""
    write_json(Path(run_dir) / METRICS_DIR / f"{section}.json", metrics)
    return metrics


def recorded(run_dir: str | Path, section: str) -> dict[str, Any]:
    """Metrics an earlier notebook of this run recorded ({} when it has not run)."""
    path = Path(run_dir) / METRICS_DIR / f"{section}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def save_figure(fig, run_dir: str | Path, name: str) -> Path:
    """Save a matplotlib figure as `figures/<name>.png` (the report shows every figure there)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return write_atomic(Path(run_dir) / FIGURES_DIR / f"{name}.png", buffer.getvalue())


def merge_metrics(run_dir: str | Path) -> dict[str, Any]:
    """Merge every `metrics/<section>.json` into `metrics.json` ({section: {...}})."""
    run_dir = Path(run_dir)
    merged = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted((run_dir / METRICS_DIR).glob("*.json"))}
    write_json(run_dir / "metrics.json", merged)
    return merged


def flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: the dotted names the report, compare and tests use."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
