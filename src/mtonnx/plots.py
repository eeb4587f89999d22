"""Matplotlib figures shared by the notebooks (headless backend; no Chinese text in plots)."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def barh(rows: list[dict[str, Any]], label: str, value: str, title: str, xlabel: str | None = None):
    """A horizontal bar chart of rows[i][value] labelled by rows[i][label], largest on top."""
    rows = sorted(rows, key=lambda r: r[value])
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    bars = ax.barh([str(r[label]) for r in rows], [r[value] for r in rows], color="#4c72b0")
    ax.bar_label(bars, labels=[f"{r[value]:,}" for r in rows], padding=3, fontsize=8)
    ax.set_title(title)
    ax.set_xlabel(xlabel or value)
    ax.margins(x=0.18)
    fig.tight_layout()
    return fig
