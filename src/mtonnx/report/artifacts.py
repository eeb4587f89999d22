"""What a run leaves behind: per-notebook metrics, figures, merged metrics.json and index.html.

Notebooks call `record` and `save_figure`; the runner calls `merge_metrics` and `write_index`.
Every file is written to a temp path and moved into place, so a failed step never leaves half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mtonnx.data import HSK_CREDIT

METRICS_DIR, FIGURES_DIR = "metrics", "figures"


def write_atomic(path: str | Path, content: str | bytes) -> Path:
    """Write `content` to a temp file beside `path`, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    """Atomic, UTF-8 (Chinese stays readable), indented JSON."""
    return write_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


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
    """{"a": {"b": 1}} -> {"a.b": 1}: the dotted names the issues and tests use."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def write_index(run_dir: str | Path, notebooks: list[dict[str, Any]], env: dict[str, Any], status: str) -> Path:
    """Render index.html: run status, notebooks with links, headline metrics, figures, environment."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    figures = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / FIGURES_DIR).glob("*.png"))
    graphs = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.glob("graphs/**/*") if p.suffix in (".png", ".svg"))
    jinja = Environment(loader=PackageLoader("mtonnx", "templates"), autoescape=select_autoescape())
    jinja.filters["fmt"] = format_value
    html = jinja.get_template("index.html").render(
        status=status,
        notebooks=notebooks,
        sections={section: flatten(values) for section, values in metrics.items()},
        figures=figures,
        graphs=graphs,
        env=env,
        credit=HSK_CREDIT,
    )
    return write_atomic(run_dir / "index.html", html)


def format_value(value: Any) -> str:
    """Short display form for a metric value."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"[{', '.join(map(str, value[:8]))}, ... ({len(value)} items)]"
    return str(value)
