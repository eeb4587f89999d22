"""Matplotlib figures shared by the notebooks (a CJK font when one is installed).

Each figure is a `matplotlib.figure.Figure` made without pyplot: it needs no backend, so importing this module
leaves the process's backend alone (JupyterLab's inline one included), and pyplot never shows it a second time.
`report.save_figure` writes it for the report and shows it in the notebook.
"""

from __future__ import annotations

from typing import Any

import matplotlib
from matplotlib import font_manager
from matplotlib.figure import Figure

# Chinese text needs a CJK font (Debian: fonts-noto-cjk); with none installed, matplotlib's default stays.
CJK_FONT = next((f.name for f in font_manager.fontManager.ttflist if "CJK" in f.name), None)
if CJK_FONT:
    matplotlib.rcParams["font.sans-serif"] = [CJK_FONT, *matplotlib.rcParams["font.sans-serif"]]


def _axes(width: float, height: float):
    """A new figure of `width` x `height` inches with one set of axes."""
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def barh(rows: list[dict[str, Any]], label: str, value: str, title: str, xlabel: str | None = None):
    """A horizontal bar chart of rows[i][value] labelled by rows[i][label], largest on top."""
    rows = sorted(rows, key=lambda r: r[value])
    fig, ax = _axes(7, 0.45 * len(rows) + 1.2)
    bars = ax.barh([str(r[label]) for r in rows], [r[value] for r in rows], color="#4c72b0")
    ax.bar_label(bars, labels=[f"{r[value]:,}" for r in rows], padding=3, fontsize=8)
    ax.set_title(title)
    ax.set_xlabel(xlabel or value)
    ax.margins(x=0.18)
    fig.tight_layout()
    return fig


def grouped_bars(
    rows: list[dict[str, Any]],
    category: str,
    series: list[str],
    title: str,
    ylabel: str,
    stacked: bool = False,
    log: bool = False,
):
    """Bars per category (x axis), one bar per series side by side, or stacked."""
    import numpy as np

    labels = [str(r[category]) for r in rows]
    x = np.arange(len(rows))
    fig, ax = _axes(max(6, 1.6 * len(rows)), 4)
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


def decoding_flow(start: str = "pad"):
    """Which outputs feed which inputs: the encoder once, decoder_model at step 1 (fed the decoder start token, `start`
    in the model's family), decoder_with_past at step t."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = _axes(11, 5.2)
    ax.set_xlim(0, 11)
    ax.set_ylim(0, 5.2)
    ax.axis("off")
    boxes = {
        "source": (0.2, 2.3, 1.6, 0.8, "source ids\n+ attention_mask", "#dddddd"),
        "encoder": (2.4, 2.3, 1.8, 0.8, "encoder_model\n(once)", "#a6cee3"),
        "first": (5.0, 3.8, 2.0, 0.9, "decoder_model\n(step 1)", "#b2df8a"),
        "past": (5.0, 0.5, 2.0, 0.9, "decoder_with_past\n(step t = 2, 3, ...)", "#fdbf6f"),
        "pick": (8.6, 2.3, 2.1, 0.8, "logits -> next token\n(argmax / beams)", "#dddddd"),
    }
    for x, y, w, h, text, color in boxes.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=color, ec="#333333"))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)

    def arrow(start, end, label, color="#333333", rad=0.0, dy=0.12, dx=0.0):
        ax.add_patch(
            FancyArrowPatch(
                start, end, arrowstyle="-|>", mutation_scale=12, color=color, connectionstyle=f"arc3,rad={rad}", lw=1.3
            )
        )
        ax.text(
            (start[0] + end[0]) / 2 + dx, (start[1] + end[1]) / 2 + dy, label, fontsize=7.5, ha="center", color=color
        )

    arrow((1.8, 2.7), (2.4, 2.7), "ids, mask")
    arrow((4.2, 2.9), (5.0, 4.1), "encoder_hidden_states\n+ encoder_attention_mask", dy=0.3, dx=-0.9)
    arrow((4.2, 2.5), (5.0, 1.0), "encoder_attention_mask", dy=-0.3, dx=-0.9)
    ax.text(6.0, 4.95, f"input_ids = decoder_start_token_id ({start})", fontsize=7.5, ha="center")
    arrow(
        (6.0, 3.8),
        (6.0, 1.4),
        "present.i.encoder.* -> past_key_values.i.encoder.*\n(cross K/V: computed once, reused)",
        color="#1f78b4",
        dy=0.0,
    )
    arrow((6.6, 3.8), (6.6, 1.4), "", color="#33a02c")
    ax.text(
        6.7,
        2.0,
        "present.i.decoder.*\n-> past_key_values.i.decoder.*\n(self K/V, length t-1)",
        fontsize=7.5,
        color="#33a02c",
    )
    arrow((7.0, 4.2), (8.6, 2.9), "logits", dy=0.2)
    arrow((7.0, 0.9), (8.6, 2.5), "logits", dy=-0.3)
    arrow((9.6, 2.3), (7.0, 0.6), "input_ids (the new token only)", rad=-0.3, dy=-0.55)
    ax.add_patch(
        FancyArrowPatch(
            (5.0, 0.7),
            (5.0, 1.2),
            arrowstyle="-|>",
            mutation_scale=12,
            color="#33a02c",
            connectionstyle="arc3,rad=-1.6",
            lw=1.3,
        )
    )
    ax.text(3.4, 0.15, "present.i.decoder.* (grown by 1) -> next step's past", fontsize=7.5, color="#33a02c")
    ax.set_title("How the exported subgraphs connect across decoding steps", fontsize=11)
    fig.tight_layout()
    return fig


def lines(
    frame,
    x: str,
    y: str,
    series: str,
    title: str,
    ylabel: str,
    spread: tuple[str, str] | None = None,
    logy: bool = False,
):
    """One line per value of `series` (a pandas DataFrame in long form), with an optional min-max band."""
    fig, ax = _axes(7, 4.2)
    for name, group in frame.groupby(series, sort=False):
        group = group.sort_values(x)
        ax.plot(group[x], group[y], marker="o", label=name)
        if spread:
            ax.fill_between(group[x], group[spread[0]], group[spread[1]], alpha=0.15)
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def scatter(points: list[dict[str, Any]], x: str, y: str, label: str, title: str, pareto: bool = False):
    """Labelled points; with `pareto`, the front of lowest x for highest y is drawn dashed."""
    fig, ax = _axes(7, 4.5)
    ax.scatter([p[x] for p in points], [p[y] for p in points], color="#4c72b0")
    for p in points:
        ax.annotate(str(p[label]), (p[x], p[y]), fontsize=7.5, xytext=(4, 3), textcoords="offset points")
    if pareto:
        front, best = [], float("-inf")
        for p in sorted(points, key=lambda p: (p[x], -p[y])):
            if p[y] > best:
                front.append(p)
                best = p[y]
        ax.plot([p[x] for p in front], [p[y] for p in front], "--", color="#dd8452", label="Pareto front")
        ax.legend()
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def deltas(rows: dict[str, dict[str, Any]], gate: float, metric: str = "bleu"):
    """Each variant's delta to the baseline with its 95 % CI as a whisker, coloured by gate, and the gate line."""
    colors = {"pass": "#2e7d32", "fail": "#c62828", "inconclusive": "#f9a825"}
    names = list(rows)
    fig, ax = _axes(7, 0.42 * len(names) + 1.4)
    for y, name in enumerate(names):
        row = rows[name]
        low, high = row[f"{metric}_delta_ci"]
        color = colors.get(row.get("gate"), "#4c72b0")
        ax.plot([low, high], [y, y], color=color, lw=2)
        ax.plot([row[f"{metric}_delta"]], [y], "o", color=color)
    ax.axvline(-gate, color="#c62828", ls="--", lw=1, label=f"gate: -{gate} {metric.upper()}")
    ax.axvline(0, color="#999999", lw=0.8)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric.upper()} delta against fp32, 95 % CI (paired bootstrap)")
    ax.set_title("Quality gate: green pass, red fail, amber inconclusive")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
