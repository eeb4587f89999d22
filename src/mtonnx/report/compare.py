"""`mtonnx compare RUN_A RUN_B`: what changed between two runs, and whether any of it is a regression.

Every metric of the two metrics.json files is classified by its kind in report.schema (KINDS), and judged by the
direction the schema declares for it:
- quality and parity (token matches, BLEU/chrF and their deltas, gate outcomes, token-id hashes, doctor failures,
  pitfalls reproduced): any change is reported; a move against its direction is a regression (a changed token-id
  hash too: the same code should translate the same way);
- speed: a timing needs at least MIN_REPEATS repetitions on both sides to be judged (fewer: "too few
  repetitions", listed only). Where it was measured beside at least MIN_GROUP others (one benchmark configuration,
  one quantization timing), each repetition is divided by the median of the other members' same repetition, which
  ran a second apart: a machine busy for a moment slows a whole repetition of every engine, and that cancels out.
  A change counts when the median of all (A repetition, B repetition) ratios, the Hodges-Lehmann estimate, is beyond
  `speed_margin` and the medians in ms moved the same way by `speed_margin`. A median of the pairs rather than a
  share of them: on a VM one repetition of one variant jumps two or three times slower, and a rule that needs
  nearly every pair beyond the margin let that one repetition hide a threefold slowdown. Timings without such a
  group are judged on the ratios in ms alone; otherwise a change is "within noise". A peer engine's timing (the
  bench's PyTorch, optimum and CTranslate2) is judged alike but reads "peer slower" / "peer faster", never a
  regression: it measures the machine and the peer, not this project;
- size and memory: beyond `size_threshold` (relative), against its direction, is a regression; a memory reading
  (RSS) must also move by MEMORY_FLOOR_MB, since a fresh process's RSS varies by a few tenths of a MB and a
  relative threshold alone would call that noise a regression on a small reading;
- identity (names, settings, counts) and keys the schema does not declare (an older run's) are listed as changed.
Plus the params and environment differences, the translations that changed per variant, and whether the two
run fingerprints are equal. Reads JSON only: no notebook runs and torch is never imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mtonnx.foundation.repetitions import MIN_REPEATS
from mtonnx.params import SCHEMA
from mtonnx.report import schema
from mtonnx.report.record import flatten
from mtonnx.runtime import layout

KINDS = {  # report.schema's kinds as compare reports them; an undeclared key (an older run's) is "other"
    schema.QUALITY: "quality",
    schema.TIMING: "speed",
    schema.SIZE: "size",
    schema.MEMORY: "size",
    schema.IDENTITY: "other",
}
MEMORY_FLOOR_MB = 1.0  # a memory reading that moved less than this is within threshold, whatever the ratio
MIN_GROUP = 3  # timings measured side by side that a relative check needs
OURS = "mtonnx"  # bench engines whose names start with it are this project's; the others are peers
PEER_VERDICTS = {"regression": "peer slower", "improvement": "peer faster"}


class CompareError(ValueError):
    """Runs that cannot be compared; str() is the one line shown to the user."""


@dataclass(frozen=True)
class Thresholds:
    """When a change counts: speed beyond the spread by `speed_margin`, size/memory beyond `size_threshold`."""

    speed_margin: float = SCHEMA["compare"]["speed_margin"].default
    size_threshold: float = SCHEMA["compare"]["size_threshold"].default


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """A run directory's metrics, env and translations; CompareError (one line naming the file) when it is not a
    run directory or a file in it does not have the shape a run writes."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CompareError(f"{run_dir} is not a directory")
    metrics = _read_json(run_dir / "metrics.json", dict)
    for key in metrics:  # a run records every section as an object
        _mapping(metrics, key, run_dir / "metrics.json")
    results = metrics.get("bench", {}).get("results", [])
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise CompareError(f"{run_dir / 'metrics.json'}: 'bench.results' is not a list of rows")
    env = _read_json(run_dir / "env.json", dict)
    for key in ("params", "packages", "cpu", "git"):
        if not isinstance(env.get(key, {}), dict):
            raise CompareError(f"{run_dir / 'env.json'}: '{key}' is {type(env[key]).__name__}, not an object")
    if not isinstance(env.get("params", {}).get("model", {}), dict):
        raise CompareError(f"{run_dir / 'env.json'}: 'params.model' is not an object")
    translations_path = run_dir / "variants" / layout.TRANSLATIONS
    translations = _read_json(translations_path, dict) if translations_path.exists() else {}
    if not isinstance(translations.get("sources", []), list) or not all(
        isinstance(texts, list) for texts in _mapping(translations, "variants", translations_path).values()
    ):
        raise CompareError(f"{translations_path}: expected sources as a list and variants as lists of translations")
    run = {"dir": str(run_dir), "metrics": metrics, "env": env, "translations": translations}
    thresholds_of(run)  # its params' compare section is read later: checked now, for either side
    return run


def _read_json(path: Path, kind: type) -> Any:
    """A JSON file's content of the given kind; CompareError naming the file otherwise."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CompareError(f"{path.parent} is not a run directory: it has no {path.name}") from None
    except (OSError, ValueError) as err:
        raise CompareError(f"{path} cannot be read: {' '.join(str(err).split())[:160]}") from None
    if not isinstance(value, kind):
        raise CompareError(f"{path} holds a JSON {type(value).__name__}, not an object: not a file a run writes")
    return value


def _mapping(container: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = container.get(key, {})
    if not isinstance(value, dict):
        raise CompareError(f"{path}: '{key}' is {type(value).__name__}, not an object")
    return value


def thresholds_of(run: dict[str, Any]) -> Thresholds:
    """The `compare` section of the params a run recorded (defaults where it has none)."""
    section = _mapping(run["env"].get("params", {}), "compare", Path(run["dir"]) / "env.json")
    values = {k: section[k] for k in ("speed_margin", "size_threshold") if k in section}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise CompareError(f"{Path(run['dir']) / 'env.json'}: params.compare.{key} is {value!r}, not a number")
    return Thresholds(**values)


def compare(a: dict[str, Any], b: dict[str, Any], thresholds: Thresholds = Thresholds()) -> dict[str, Any]:
    """Everything that differs between runs `a` and `b` (load_run's dicts), classified, with the regressions."""
    model_a, model_b = (run["env"].get("params", {}).get("model", {}).get("name") for run in (a, b))
    if model_a != model_b:
        raise CompareError(f"the runs are of different models ({model_a} and {model_b}): nothing to compare")
    flat_a, flat_b = flatten(_without_timing_lists(a["metrics"])), flatten(_without_timing_lists(b["metrics"]))
    changes = {"quality": [], "speed": [], "size": [], "other": []}
    for key in sorted(set(flat_a) | set(flat_b)):
        if key.startswith("run.") or flat_a.get(key) == flat_b.get(key):
            continue
        kind = classify(key)
        changes[kind].append(_judge(kind, key, flat_a.get(key), flat_b.get(key), thresholds))
    changes["speed"] = [c for c in changes["speed"] if c is not None] + _speed(a["metrics"], b["metrics"], thresholds)
    translations = _translations(a["translations"], b["translations"])
    regressions = [
        f"{c['kind']}: {c['key']} {_short(c['a'])} -> {_short(c['b'])}"
        for kind in changes
        for c in changes[kind]
        if c["verdict"] == "regression"
    ]
    regressions += [
        f"translations: {name}: {t['changed']} of {t['sentences']} changed"
        for name, t in translations.items()
        if t["changed"]
    ]
    fingerprints = [run["metrics"].get("run", {}).get("fingerprint") for run in (a, b)]
    return {
        "a": a["dir"],
        "b": b["dir"],
        "model": model_a,
        "thresholds": thresholds.__dict__,
        "fingerprints": {"a": fingerprints[0], "b": fingerprints[1], "equal": fingerprints[0] == fingerprints[1]},
        "params": _diff(flatten(a["env"].get("params", {})), flatten(b["env"].get("params", {}))),
        "environment": _diff(_env(a["env"]), _env(b["env"])),
        "changes": changes,
        "translations": translations,
        "regressions": regressions,
    }


def classify(key: str) -> str:
    """quality / speed / size / other for a flattened metric key, from its kind in report.schema."""
    metric = schema.declared(key)
    return KINDS[metric.kind] if metric else "other"


def _judge(kind: str, key: str, a: Any, b: Any, t: Thresholds) -> dict[str, Any] | None:
    change = {"kind": kind, "key": key, "a": a, "b": b, "verdict": "changed"}
    better = _better(key)
    if kind == "quality":
        change["verdict"] = "regression" if _worse(key, a, b) else "changed"
    elif kind == "size" and better and _number(a) and _number(b) and a:
        grew, shrank = b > a * (1 + t.size_threshold), b < a * (1 - t.size_threshold)
        worse, improved = (grew, shrank) if better == schema.LOWER else (shrank, grew)
        change["verdict"] = (
            "within threshold"
            if schema.declared(key).kind == schema.MEMORY and abs(b - a) < MEMORY_FLOOR_MB
            else "regression"
            if worse
            else ("improvement" if improved else "within threshold")
        )
    elif kind == "speed":
        change["verdict"] = "single measurement"
    return change


def _better(key: str) -> str | None:
    """The declared direction of a key (None when it has none or is not declared)."""
    metric = schema.declared(key)
    return metric.better if metric else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _worse(key: str, a: Any, b: Any) -> bool:
    """Whether a quality metric moved the wrong way: against its direction, down a gate's ranks, any change of
    one that must stay the same (a token-id hash), or gone; a metric without a direction is only listed."""
    better = _better(key)
    if better is None:
        return False
    if a is None or b is None:
        return b is None
    if better == schema.SAME:
        return True
    if schema.unit(key) == schema.GATE:
        return schema.GATE_RANK.get(b, -1) < schema.GATE_RANK.get(a, -1)
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) and not b if better == schema.HIGHER else bool(b) and not a
    if _number(a) and _number(b):
        return b < a if better == schema.HIGHER else b > a
    return False


def _without_timing_lists(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics without the per-repetition lists (compared by `_speed`) and bench's row lists."""
    out = json.loads(json.dumps(metrics))
    out.get("bench", {}).pop("results", None)
    out.get("tuning", {}).pop("ablation", None)
    for variant in out.get("quant", {}).values():
        if isinstance(variant, dict):
            for key in [k for k in variant if k.startswith("times_ms")]:
                variant.pop(key)
    return out


def _series(metrics: dict[str, Any]) -> dict[str, tuple[str, list[float]]]:
    """Every per-repetition timing a run recorded, by a stable name: (its group, its times)."""
    series = {
        f"bench {r.get('engine')} {r.get('config')}": (f"bench {r.get('config')}", r["times_ms"])
        for r in metrics.get("bench", {}).get("results", [])
        if _timings(r.get("times_ms"))
    }
    for name, row in metrics.get("quant", {}).items():
        if isinstance(row, dict):
            series.update(
                {
                    f"quant {name} {k}": (f"quant {k}", v)
                    for k, v in row.items()
                    if k.startswith("times_ms") and _timings(v)
                }
            )
    return series


def _timings(value: Any) -> bool:
    """A non-empty list of numbers (anything else under a timing key is listed as changed, not judged)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in value)
    )


def _relative(series: dict[str, tuple[str, list[float]]], keys: set[str]) -> dict[str, list[float]]:
    """Each timing's repetitions divided by the median of the other members' same repetitions (groups of
    MIN_GROUP+). The others only: in a group of three, a member that became three times slower is the one that
    sets its group's median, which then moves with it and hides most of the slowdown."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(series[key][0], []).append(key)
    out = {}
    for members in groups.values():
        reps = {len(series[k][1]) for k in members}
        if len(members) < MIN_GROUP or len(reps) != 1:
            continue
        for key in members:
            others = [series[k][1] for k in members if k != key]
            out[key] = [t / float(np.median([o[i] for o in others])) for i, t in enumerate(series[key][1])]
    return out


def _beyond(ta: list[float], tb: list[float], margin: float) -> str:
    """Regression when the median of all B/A repetition ratios is above `margin`, improvement when below
    1/`margin`, else within noise."""
    ratio = float(np.median(np.asarray(tb, dtype=float)[None, :] / np.asarray(ta, dtype=float)[:, None]))
    if ratio > margin:
        return "regression"
    if ratio * margin < 1:
        return "improvement"
    return "within noise"


def _speed(a: dict[str, Any], b: dict[str, Any], t: Thresholds) -> list[dict[str, Any]]:
    series_a, series_b = _series(a), _series(b)
    keys = set(series_a) & set(series_b)
    relative_a, relative_b = _relative(series_a, keys), _relative(series_b, keys)
    out = []
    for key in sorted(keys):
        ta, tb = series_a[key][1], series_b[key][1]
        if ta == tb:  # the same numbers: nothing changed (comparing a run with itself)
            continue
        if min(len(ta), len(tb)) < MIN_REPEATS:
            verdict = "too few repetitions"
        elif key in relative_a and key in relative_b:
            verdict = _beyond(relative_a[key], relative_b[key], t.speed_margin)
            if _beyond([float(np.median(ta))], [float(np.median(tb))], t.speed_margin) != verdict:
                verdict = "within noise"
        else:
            verdict = _beyond(ta, tb, t.speed_margin)
        if key.startswith("bench ") and not key.split()[1].startswith(OURS):
            verdict = PEER_VERDICTS.get(verdict, verdict)
        out.append(
            {
                "kind": "speed",
                "key": key,
                "a": round(sorted(ta)[len(ta) // 2], 2),
                "b": round(sorted(tb)[len(tb) // 2], 2),
                "spread_a": [min(ta), max(ta)],
                "spread_b": [min(tb), max(tb)],
                "verdict": verdict,
            }
        )
    return out


def _translations(a: dict[str, Any], b: dict[str, Any], examples: int = 3) -> dict[str, dict[str, Any]]:
    out = {}
    sources = b.get("sources") or a.get("sources") or []
    for name in sorted(set(a.get("variants", {})) & set(b.get("variants", {}))):
        ta, tb = a["variants"][name], b["variants"][name]
        changed = [i for i, (x, y) in enumerate(zip(ta, tb)) if x != y]
        out[name] = {
            "sentences": len(tb),
            "changed": len(changed),
            "examples": [
                {"en": sources[i] if i < len(sources) else "", "a": ta[i], "b": tb[i]} for i in changed[:examples]
            ],
        }
    return out


def _env(env: dict[str, Any]) -> dict[str, Any]:
    return {
        "python": env.get("python"),
        **{f"packages.{k}": v for k, v in env.get("packages", {}).items()},
        "cpu": env.get("cpu", {}).get("model"),
        "git.sha": env.get("git", {}).get("sha"),
        "git.dirty": env.get("git", {}).get("dirty"),
        "params_hash": env.get("params_hash"),
    }


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "a": a.get(k), "b": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def summary_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kind of change: how many changed, how many regressed (the summary table of every format)."""
    rows = [
        {
            "kind": kind,
            "changed": len(items),
            "regressions": sum(c["verdict"] == "regression" for c in items),
            "within noise": sum(c["verdict"] in ("within noise", "within threshold") for c in items),
        }
        for kind, items in result["changes"].items()
    ]
    changed = sum(t["changed"] > 0 for t in result["translations"].values())
    rows.append({"kind": "translations", "changed": changed, "regressions": changed, "within noise": 0})
    return rows


def to_markdown(result: dict[str, Any]) -> str:
    """A pull-request comment: the summary table first, the details in collapsible sections."""
    verdict = "**no regression**" if not result["regressions"] else f"**{len(result['regressions'])} regression(s)**"
    fingerprint = "equal" if result["fingerprints"]["equal"] else "different"
    lines = [
        f"## mtonnx compare: {verdict}",
        "",
        f"`{result['a']}` -> `{result['b']}` ({result['model']}); fingerprints {fingerprint}",
        "",
        "| kind | changed | regressions | within noise |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['kind']} | {r['changed']} | {r['regressions']} | {r['within noise']} |" for r in summary_rows(result)
    ]
    if result["regressions"]:
        lines += ["", "Regressions:", *[f"- {r}" for r in result["regressions"]]]
    sections = [
        ("Params", result["params"]),
        ("Environment", result["environment"]),
        *[(f"{kind.capitalize()} changes", items) for kind, items in result["changes"].items()],
    ]
    for title, items in sections:
        if not items:
            continue
        lines += [
            "",
            f"<details><summary>{title} ({len(items)})</summary>",
            "",
            "| key | A | B | verdict |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| `{i['key']}` | {_short(i['a'])} | {_short(i['b'])} | {i.get('verdict', '')} |" for i in items]
        lines += ["", "</details>"]
    for name, t in result["translations"].items():
        if t["changed"]:
            lines += [
                "",
                f"<details><summary>Translations changed: {name} ({t['changed']} of {t['sentences']})</summary>",
                "",
                "| English | A | B |",
                "| --- | --- | --- |",
            ]
            lines += [f"| {e['en']} | {e['a']} | {e['b']} |" for e in t["examples"]]
            lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def to_html(result: dict[str, Any]) -> str:
    """The same content as the markdown, in the report's style."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    jinja = Environment(loader=PackageLoader("mtonnx.report", "templates"), autoescape=select_autoescape())
    jinja.filters["short"] = _short
    return jinja.get_template("compare.html").render(result=result, summary=summary_rows(result))
