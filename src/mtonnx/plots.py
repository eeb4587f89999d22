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


def grouped_bars(rows: list[dict[str, Any]], category: str, series: list[str], title: str, ylabel: str,
                 stacked: bool = False, log: bool = False):
    """Bars per category (x axis), one bar per series side by side, or stacked."""
    import numpy as np

    labels = [str(r[category]) for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4))
    width = 0.8 if stacked else 0.8 / len(series)
    bottom = np.zeros(len(rows))
    for i, name in enumerate(series):
        values = np.array([r.get(name) or 0 for r in rows], dtype=float)
        offset = 0 if stacked else (i - (len(series) - 1) / 2) * width
        ax.bar(x + offset, values, width, bottom=bottom if stacked else None, label=name)
        if stacked:
            bottom += values
    ax.set_xticks(x, labels, rotation=15, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    return fig
