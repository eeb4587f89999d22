"""index.html: the report a team reviews, opening with the answer.

The first screen holds the verdict (every export token-identical to PyTorch or not, the recommended variant
and why), the variant table (size, latency with spread, speed against PyTorch fp32 and CTranslate2 int8,
BLEU/chrF with the delta's 95 % CI, gate, exact-match rate), the peer chart and the run's identity. Below it:
where a pass over the corpus goes (notebook 07's profile), what the model knows (in and out of domain), sample
translations with the tokens that differ from PyTorch marked, pitfalls and doctor tables, the figures grouped by
notebook, the notebooks, and every metric in a collapsed, filterable section with the unit, kind and direction
report.schema declares for it. Rendered with Jinja2 from the run directory's files.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from mtonnx.data import HSK_CREDIT
from mtonnx.engines import PROFILE_PEER
from mtonnx.foundation.files import write_atomic
from mtonnx.report import schema
from mtonnx.report.baseline import BASELINE_FILE
from mtonnx.report.record import FIGURES_DIR, captions, flatten
from mtonnx.runtime import layout

# Figures are named after the notebook that draws them.
FIGURE_NOTEBOOKS = {  # a figure's name prefix -> the notebook that draws it; the first prefix that matches wins
    "inspect": "01 · the model",
    "manual_export": "02 · the hand export",
    "optimum": "03 · optimum",
    "graphview": "04 · the graphs",
    "runtime": "05 · the cached decoder",
    "quant": "06 · variants and the recommendation",
    "bench_ablation": "09 · tuning the decoder step",
    "bench_memory": "09 · tuning the decoder step",
    "bench_step_bytes": "10 · fewer bytes per token",
    "bench": "07 · the peers",
    "serve": "11 · serving",
    "scale": "12 · scale-out",
}
PARITY_LABELS = {
    "manual_export.greedy_token_match": "hand export, greedy over the files",
    "optimum_export.greedy_token_match": "optimum generate, split, greedy",
    "optimum_export.beam_token_match": "optimum generate, split, beam",
    "optimum_export.merged_greedy_token_match": "optimum generate, merged, greedy",
    "optimum_export.merged_beam_token_match": "optimum generate, merged, beam",
    "runtime.cached_equals_no_cache": "runtime, cached = no-cache",
}
SAMPLES = 8


def parity_checks(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Every token-match rate against PyTorch the run recorded, labelled: the exports and the runtime's layouts."""
    flat = flatten(metrics)
    checks = [{"check": label, "match": flat[key]} for key, label in PARITY_LABELS.items() if key in flat]
    checks += [
        {"check": f"runtime: {name}", "match": value}
        for name, value in metrics.get("runtime", {}).get("parity", {}).items()
    ]
    return checks


def verdict(metrics: dict[str, Any]) -> dict[str, Any]:
    """The first line: token-identical or not (and where not), and the recommended variant with its reason."""
    checks = parity_checks(metrics)
    off = [c for c in checks if c["match"] != 1.0]
    if not checks:
        parity = "no parity check was recorded"
    elif off:
        parity = "not token-identical to PyTorch: " + "; ".join(f"{c['check']} {c['match']:.0%}" for c in off)
    else:
        parity = f"every export token-identical to PyTorch ({len(checks)} checks, greedy and beam, every layout)"
    quant = metrics.get("quant", {})
    return {
        "identical": bool(checks) and not off,
        "parity": parity,
        "checks": checks,
        "recommended": quant.get("recommended"),
        "reason": quant.get("recommended_reason"),
    }


def variant_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The variants notebook 06 measured, in its order, with the recommended one marked."""
    quant = metrics.get("quant", {})
    return [
        {"name": name, **row, "recommended": name == quant.get("recommended")}
        for name, row in quant.items()
        if isinstance(row, dict) and "gate" in row
    ]


def peer_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The deployed runtime against its peers (notebook 07): ratio of medians, paired spread, verdict."""
    bench = metrics.get("bench", {})
    paired = bench.get("ratio_per_repetition", {})
    return [
        {"ratio": key, "measured": value, "paired": paired.get(key), "verdict": bench.get("targets", {}).get(key)}
        for key, value in bench.get("ratio", {}).items()
        if value is not None
    ]


def profile_rows(recorded: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The profile study as recorded (measure.profile.summary: `batch<N>` -> {variant: its profile, "ct2-int8": its
    seconds}) as one row per batch and variant: seconds, each part's share, CTranslate2 int8's seconds and the two
    ratios, the work no output needed, quantization's share of ORT's node time and its top operators (None: not
    recorded)."""
    out = []
    for entries in recorded.values():
        peer = entries.get(PROFILE_PEER, {}).get("seconds")
        for name, p in entries.items():
            if name == PROFILE_PEER:
                continue
            out.append(
                {
                    "batch": p["batch"],
                    "variant": name,
                    "sentences": p["sentences"],
                    "seconds": p["seconds"],
                    **p["shares"],
                    "ct2-int8 seconds": peer,
                    "vs ct2-int8": p.get("vs_ct2_int8"),
                    "ORT alone vs ct2-int8": p.get("ort_only_vs_ct2_int8"),
                    "rows beyond outputs": p["beyond_output_share"],
                    "padded encoder positions": p["padded_encoder_share"],
                    "quantization in ORT": p["quantization_share"],
                    "top operators": p["top_operators"],
                }
            )
    return out


def highlight(reference: str, text: str) -> Markup:
    """`text` with the characters that differ from `reference` marked (Chinese: a character is a token's worth)."""
    out = []
    for op, _, _, j1, j2 in difflib.SequenceMatcher(None, reference, text, autojunk=False).get_opcodes():
        piece = escape(text[j1:j2])
        out.append(piece if op == "equal" else Markup("<mark>") + piece + Markup("</mark>"))
    return Markup("").join(out)


def samples(run_dir: Path, recommended: str | None, count: int = SAMPLES) -> list[dict[str, Any]]:
    """English, reference, PyTorch (greedy) and the recommended variant, side by side: the sentences where the
    variant differs from PyTorch first, then the first of each data source."""
    baseline_path, translations_path = run_dir / BASELINE_FILE, run_dir / "variants" / layout.TRANSLATIONS
    if not (baseline_path.is_file() and translations_path.is_file() and recommended):
        return []
    items = json.loads(baseline_path.read_text(encoding="utf-8"))["items"]
    texts = json.loads(translations_path.read_text(encoding="utf-8"))["variants"].get(recommended, [])
    if len(texts) != len(items):
        return []
    differ = [i for i, item in enumerate(items) if item["greedy"] != texts[i]]
    by_source: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_source.setdefault(item["source"], []).append(i)
    rest = [i for group in zip(*by_source.values()) for i in group]
    chosen = list(dict.fromkeys(differ[: count // 2] + rest))[:count]
    return [
        {
            "source": items[i]["source"],
            "en": items[i]["en"],
            "reference": items[i]["zh"],
            "pytorch": items[i]["greedy"],
            "variant": highlight(items[i]["greedy"], texts[i]),
            "same": items[i]["greedy"] == texts[i],
        }
        for i in sorted(chosen)
    ]


def figure_groups(run_dir: Path) -> list[dict[str, Any]]:
    """The run's figures grouped by the notebook that drew them, with their captions."""
    names = captions(run_dir)
    groups: dict[str, list[dict[str, str]]] = {}
    for path in sorted((run_dir / FIGURES_DIR).glob("*.png")):
        notebook = next((label for prefix, label in FIGURE_NOTEBOOKS.items() if path.stem.startswith(prefix)), "other")
        groups.setdefault(notebook, []).append(
            {"src": path.relative_to(run_dir).as_posix(), "caption": names.get(path.stem, path.stem)}
        )
    order = sorted(groups, key=lambda label: (label == "other", label))  # by notebook number, the unknown last
    return [{"notebook": k, "figures": groups[k]} for k in order]


def identity(env: dict[str, Any]) -> dict[str, Any]:
    """The run's identity line: model, params file and hash, git commit, CPU, ONNX Runtime and torch, date."""
    git = env.get("git", {})
    return {
        "model": env.get("params", {}).get("model", {}).get("name"),
        "params_file": env.get("params_file"),
        "params_hash": env.get("params_hash"),
        "git": (git.get("sha") or "unknown")[:10],
        "dirty": bool(git.get("dirty")),
        "cpu": env.get("cpu", {}).get("model"),
        "onnxruntime": env.get("packages", {}).get("onnxruntime"),
        "torch": env.get("packages", {}).get("torch"),
        "date": env.get("started"),
    }


def write_index(run_dir: str | Path, notebooks: list[dict[str, Any]], env: dict[str, Any], status: str) -> Path:
    """Render index.html from the run directory (status: ok, failed or interrupted)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    first = verdict(metrics)
    failed = next((nb for nb in notebooks if nb["status"] != "ok"), None)
    jinja = Environment(loader=PackageLoader("mtonnx.report", "templates"), autoescape=select_autoescape())
    jinja.filters["fmt"] = format_value
    html = jinja.get_template("index.html").render(
        status=status,
        failed=failed,
        notebooks=notebooks,
        verdict=first,
        variants=variant_rows(metrics),
        peers=peer_rows(metrics),
        profile=profile_rows(metrics.get("bench", {}).get("profile", {})),
        identity=identity(env),
        env=env,
        metrics=metric_rows(metrics),
        inspect=metrics.get("inspect", {}),
        pitfalls=metrics.get("pitfalls", {}).get("each", {}),
        doctor=metrics.get("doctor", {}),
        samples=samples(run_dir, first["recommended"]),
        figures=figure_groups(run_dir),
        peer_chart=_first_existing(run_dir, "figures/bench_latency.png"),
        graphs=sorted(p.relative_to(run_dir).as_posix() for p in run_dir.glob("graphs/**/*") if p.suffix == ".png"),
        credit=HSK_CREDIT,
        gate=env.get("params", {}).get("quant", {}).get("gate_bleu"),
        fidelity_min=env.get("params", {}).get("quant", {}).get("fidelity_min"),
        objective=metrics.get("quant", {}).get("objective"),
        deploy=metrics.get("deploy"),
        footprint=metrics.get("run", {}).get("footprint"),
    )
    return write_atomic(run_dir / "index.html", html)


def metric_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Every recorded metric with the unit, kind and direction report.schema declares for it (blank: undeclared)."""
    rows = []
    for key, value in flatten(metrics).items():
        metric = schema.declared(key)
        declared = {"unit": metric.unit, "kind": metric.kind, "better": metric.better or ""} if metric else {}
        rows.append({"key": key, "value": value, "unit": "", "kind": "undeclared", "better": "", **declared})
    return rows


def _first_existing(run_dir: Path, *names: str) -> str | None:
    return next((name for name in names if (run_dir / name).is_file()), None)


def format_value(value: Any) -> str:
    """Short display form for a metric value."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"[{', '.join(map(str, value[:8]))}, ... ({len(value)} items)]"
    return str(value)
