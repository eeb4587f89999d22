"""What a notebook records: its metrics as `metrics/<section>.json` and its figures as `figures/<name>.png` (with
their captions in `figures/captions.json`); the runner merges the metrics into metrics.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import write_atomic, write_json
from mtonnx.report import schema

METRICS_DIR, FIGURES_DIR = "metrics", "figures"
CAPTIONS = "captions.json"


class Recorded(dict):
    """The metrics `record` saved; a notebook shows them as a short table, not a screen of raw dict."""

    def __init__(self, section: str, metrics: dict[str, Any]):
        super().__init__(metrics)
        self.section = section

    def _rows(self, limit: int = 12) -> list[tuple[str, str]]:
        flat = flatten(dict(self))
        rows = [(k, _short(v)) for k, v in list(flat.items())[:limit]]
        return rows + ([("...", f"{len(flat) - limit} more")] if len(flat) > limit else [])

    def __repr__(self) -> str:
        return f"{len(flatten(dict(self)))} metrics recorded as {self.section}.*"

    def _repr_html_(self) -> str:
        from html import escape

        body = "".join(
            f"<tr><td><code>{escape(self.section)}.{escape(k)}</code></td><td>{escape(v)}</td></tr>"
            for k, v in self._rows()
        )
        return f"<p>{escape(repr(self))}</p><table>{body}</table>"


def record(run_dir: str | Path, section: str, metrics: dict[str, Any]) -> Recorded:
    """Save one notebook's metrics as `metrics/<section>.json`; they appear as `<section>.<key>`. A key that
    report.schema does not declare is saved all the same, with a warning naming it."""
    write_json(Path(run_dir) / METRICS_DIR / f"{section}.json", metrics)
    schema.warn_undeclared(flatten({section: metrics}))
    return Recorded(section, metrics)


def recorded(run_dir: str | Path, section: str) -> dict[str, Any]:
    """Metrics an earlier notebook of this run recorded ({} when it has not run)."""
    path = Path(run_dir) / METRICS_DIR / f"{section}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def save_figure(fig, run_dir: str | Path, name: str, caption: str = "") -> None:
    """Save a matplotlib figure as `figures/<name>.png` with its caption (the report shows every figure there), and
    show that same PNG as the cell's output when a notebook runs this: the lesson shows its figure, not a path."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    write_atomic(Path(run_dir) / FIGURES_DIR / f"{name}.png", buffer.getvalue())
    if caption:
        write_json(Path(run_dir) / FIGURES_DIR / CAPTIONS, {**captions(run_dir), name: caption})
    show_png(buffer.getvalue(), caption or name)


def show_png(png: bytes, alt: str) -> bool:
    """Display a PNG as an output of the Jupyter kernel running this, `alt` its text form (False, and nothing shown,
    outside one)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if getattr(shell, "kernel", None) is None:
        return False
    import base64

    from IPython.display import display

    bundle = {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": alt}
    display(bundle, raw=True, metadata={"image/png": {"alt": alt}})
    return True


def captions(run_dir: str | Path) -> dict[str, str]:
    """The figures' captions ({} when none was given)."""
    path = Path(run_dir) / FIGURES_DIR / CAPTIONS
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


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


def _short(value: Any, width: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."
