"""index.html: the run's report, rendered from metrics.json, env.json and the figures with Jinja2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mtonnx.data import HSK_CREDIT
from mtonnx.report.artifacts import write_atomic
from mtonnx.report.record import FIGURES_DIR, flatten


def write_index(run_dir: str | Path, notebooks: list[dict[str, Any]], env: dict[str, Any], status: str) -> Path:
    """Render index.html: run status, notebooks with links, headline metrics, figures, environment."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    figures = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / FIGURES_DIR).glob("*.png"))
    graphs = sorted(
        p.relative_to(run_dir).as_posix() for p in run_dir.glob("graphs/**/*") if p.suffix in (".png", ".svg")
    )
    jinja = Environment(loader=PackageLoader("mtonnx.report", "templates"), autoescape=select_autoescape())
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
