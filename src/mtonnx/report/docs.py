"""The documentation site's generated parts, and the reference run it publishes.

Pages hold markers (`<!-- generated: params -->`) that `render` replaces when the site is built (mkdocs' hook,
docs/hooks.py), so nothing generated is ever typed into a page and nothing can drift:
- `params`: the params reference, from the schema (mtonnx.params.SCHEMA): every key, its type, default, range, doc;
- `results`: the reference run's variant table with both gates, the peer table and memory, stamped with the commit,
  date, CPU and thread count of the run that measured them;
- `pitfalls`: what the reference run reproduced and what doctor found on its exports;
- `examples`: what the reference model knows, in and out of domain, with its best and worst translations;
- `figures`: the reference run's figures with their captions, grouped by the notebook that drew them;
- `scale_timings`: how long each notebook took at the real model's scale (params/opus-shape.yaml), from that run's
  metrics and env, published beside the reference run (SCALE_REFERENCE) since the site shows none of its notebooks.
A rendered block ends with GENERATED_END, so whatever reads the built page can tell generated text from prose.
`lab_nav` lists the reference run's notebooks in the site's navigation, under the lab's page.

`refresh` copies what the site needs from a run directory into docs/reference/ (executed notebooks with their
outputs, figures, metrics.json, env.json, the report, its screenshot and the deployed model's card; never an ONNX
file), refusing more than REFERENCE_LIMIT_MB. `publish_timings` copies only a run's metrics and env, for
`scale_timings`. `stale` says how a published run no longer matches the code. `fill` writes the generated blocks of
a file read outside the site (the README) in place. report.prose finds a measured number typed into prose, outside
these blocks, where it would go stale.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import staged_dir, write_atomic
from mtonnx.report.prose import GENERATED_END

REFERENCE_LIMIT_MB = 10.0
SCALE_REFERENCE = "reference-opus-shape"  # beside the reference run: the opus-shape run's notebook times
MARKER = re.compile(r"<!-- generated: (\w+) -->")
COPIED = ("metrics.json", "env.json", "index.html", "report.png", "deploy/model_card.md")
NOTEBOOK = "[0-9][0-9]_*.ipynb"
# The units of time, size, speed and share a measurement is written in (longest first where one starts another).


def params_reference() -> str:
    """Every params key as a table per section, from the schema itself."""
    from mtonnx.params import SCHEMA, Field

    def rows(schema: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for key, spec in schema.items():
            if isinstance(spec, Field):
                kind = spec.type.__name__ if isinstance(spec.type, type) else " or ".join(t.__name__ for t in spec.type)
                if spec.items is not None:
                    kind = f"list of {spec.items.__name__}"
                bounds = ", ".join(
                    part
                    for part in (
                        f"{spec.lo}..{spec.hi if spec.hi is not None else ''}" if spec.lo is not None else "",
                        "one of " + ", ".join(map(str, spec.choices)) if spec.choices else "",
                        "or " + ", ".join(spec.keywords) if spec.keywords else "",
                    )
                    if part
                )
                default = json.dumps(spec.default, ensure_ascii=False)
                out.append(f"| `{prefix}{key}` | {kind} | `{default}` | {bounds} | {spec.doc} |")
        return out

    parts = ["| key | type | default | allowed | what it does |", "| --- | --- | --- | --- | --- |", *rows(SCHEMA)]
    for section, spec in SCHEMA.items():
        if isinstance(spec, dict):
            parts += ["", f"### `{section}`", "", "| key | type | default | allowed | what it does |"]
            parts += ["| --- | --- | --- | --- | --- |", *rows(spec, f"{section}.")]
    return "\n".join(parts)


def _stamp(env: dict[str, Any], run: str = "the reference run") -> str:
    cpu, git = env.get("cpu", {}), env.get("git", {})
    threads = env.get("params", {}).get("runtime", {}).get("threads")
    return (
        f"Measured by {run} of commit `{(git.get('sha') or 'unknown')[:12]}` on {env.get('started')}: "
        f"{cpu.get('model')} ({cpu.get('usable_cores')} cores), {threads} ONNX Runtime thread(s), onnxruntime "
        f"{env.get('packages', {}).get('onnxruntime')}, params `{env.get('params', {}).get('name')}` "
        f"({env.get('params_hash')})."
    )


def results(reference: str | Path) -> str:
    """The reference run's variants with both gates, the deployed runtime against its peers, and memory."""
    metrics = _metrics(reference)
    env = json.loads((Path(reference) / "env.json").read_text(encoding="utf-8"))
    quant, bench = metrics.get("quant", {}), metrics.get("bench", {})
    out = [_stamp(env), "", f"Objective: `{quant.get('objective')}`. Recommended: **{quant.get('recommended')}**.", ""]
    out += [
        "| variant | MB | objective ms | vs PyTorch fp32 | vs CT2 int8 | BLEU Δ (95 % CI) | quality | identical to "
        "fp32 (95 % CI) | fidelity |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in quant.items():
        if not (isinstance(row, dict) and "fidelity" in row):
            continue
        f, ci = row["fidelity"], row["bleu_delta_ci"]
        star = " ★" if name == quant.get("recommended") else ""
        speed = " | ".join(str(row.get(k, "-")) for k in ("workload_ms", "vs_pytorch-fp32", "vs_ct2-int8"))
        out.append(
            f"| {name}{star} | {row.get('size_mb')} | {speed} | "
            f"{row['bleu_delta']:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}] | {row['gate']} | "
            f"{f['same_as_fp32']:.1%} [{f['same_as_fp32_ci'][0]:.1%}, {f['same_as_fp32_ci'][1]:.1%}] | "
            f"{row['fidelity_gate']} |"
        )
    paired, targets = bench.get("ratio_per_repetition", {}), bench.get("targets", {})
    if bench.get("ratio"):
        out += ["", "The deployed runtime against its peers, at forced lengths (ratio of medians, paired spread):", ""]
        out += ["| ratio | measured | per repetition | target |", "| --- | --- | --- | --- |"]
        for key, value in bench["ratio"].items():
            if value is not None:
                spread = paired.get(key) or {}
                span = f"{spread.get('min')}–{spread.get('max')}" if spread else "-"
                out.append(f"| `{key}` | {value} | {span} | {targets.get(key, '')} |")
    if bench.get("rss_mb"):
        out += ["", "Resident memory (MB) of a fresh process, after load and after one generation:", ""]
        out += ["| engine | after load | after a generation |", "| --- | --- | --- |"]
        for engine, mb in bench["rss_mb"].items():
            out.append(f"| {engine} | {mb} | {bench.get('rss_after_run_mb', {}).get(engine)} |")
    footprint = metrics.get("run", {}).get("footprint")
    if footprint:
        held = f"{footprint['disk_mb']} MB, {footprint['disk_vs_export']} times its fp32 export"
        out += ["", f"The run's directory holds {held}."]
    return "\n".join(out)


def timings(reference: str | Path, run: str = "the reference run") -> str:
    """How long each notebook of `run` (published in `reference`) took, as its runner measured it, and the total."""
    env = json.loads((Path(reference) / "env.json").read_text(encoding="utf-8"))
    seconds = _metrics(reference).get("run", {}).get("notebook_seconds") or {}
    if not seconds:
        return f"{run[0].upper()}{run[1:]} recorded no notebook times: publish a run that does."
    out = [_stamp(env, run), "", "| notebook | seconds |", "| --- | --- |"]
    out += [f"| {name} | {s:.0f} |" for name, s in seconds.items()]
    total = sum(seconds.values())
    out += [f"| **all {len(seconds)}** | **{total:.0f}** ({total / 60:.1f} minutes) |"]
    return "\n".join(out)


def pitfalls(reference: str | Path) -> str:
    """What the reference run reproduced of each pitfall, and doctor's failures and warnings per export."""
    metrics = _metrics(reference)
    each = metrics.get("pitfalls", {}).get("each", {})
    out = ["| pitfall | reproduced by the reference run |", "| --- | --- |"]
    out += [f"| {name} | {'yes' if done else 'no'} |" for name, done in each.items()]
    doctor = metrics.get("doctor", {})
    if doctor:
        out += ["", "| export | doctor's failures | warnings |", "| --- | --- | --- |"]
        out += [f"| {name} | {d.get('failures')} | {d.get('warnings')} |" for name, d in doctor.items()]
    return "\n".join(out)


def examples(reference: str | Path) -> str:
    """What the reference model knows: its scores per source (in and out of domain) and its best and worst
    translations of each, with the HSK data's attribution."""
    from mtonnx.data import HSK_CREDIT

    inspect = _metrics(reference).get("inspect", {})
    out = ["| source | sentences | BLEU | chrF |", "| --- | --- | --- | --- |"]
    out += [
        f"| {name} | {d['sentences']} | {d['bleu']} | {d['chrf']} |" for name, d in inspect.get("domains", {}).items()
    ]
    out += ["", "| source | kind | English | reference | the model |", "| --- | --- | --- | --- | --- |"]
    out += [
        f"| {e['source']} | {e['kind']} | {_cell(e['en'])} | {_cell(e['reference'])} | {_cell(e['model'])} |"
        for e in inspect.get("examples", [])
    ]
    return "\n".join([*out, "", f"*{HSK_CREDIT}*"])


def figures(reference: str | Path, href: str = "reference") -> str:
    """The reference run's figures under the notebook that drew them, each with its caption; `href` is the
    reference directory as the page links it."""
    from mtonnx.report.index import figure_groups

    out = []
    for group in figure_groups(Path(reference)):
        out += [f"### {group['notebook']}", ""]
        for figure in group["figures"]:
            out += [f"![{_cell(figure['caption'])}]({href}/{figure['src']})", f"*{_cell(figure['caption'])}*", ""]
    return "\n".join(out)


def _metrics(reference: str | Path) -> dict[str, Any]:
    return json.loads((Path(reference) / "metrics.json").read_text(encoding="utf-8"))


def _cell(text: str) -> str:
    """Text as it must be written inside a markdown table cell: no pipe, no HTML tag, on one line."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;") or "(empty)"


def render(markdown: str, reference: str | Path, href: str = "reference") -> str:
    """A page with each marker replaced by what it names, up to GENERATED_END (an unknown marker is a ValueError: a
    strict build fails); `href` is the reference directory as links from this page reach it."""
    makers = {
        "params": params_reference,
        "results": lambda: results(reference),
        "timings": lambda: timings(reference),
        "pitfalls": lambda: pitfalls(reference),
        "examples": lambda: examples(reference),
        "figures": lambda: figures(reference, href),
        "scale_timings": lambda: scale_timings(Path(reference).parent / SCALE_REFERENCE),
    }

    def replace(match: re.Match) -> str:
        if match.group(1) not in makers:
            raise ValueError(f"unknown generated block {match.group(1)!r}; known: {', '.join(makers)}")
        return f"{match.group(0)}\n\n{makers[match.group(1)]()}\n\n{GENERATED_END}\n"

    return MARKER.sub(replace, markdown)


def scale_timings(published: str | Path) -> str:
    """Each notebook's time at the real model's scale, from the opus-shape run published in `published`."""
    if not (Path(published) / "env.json").is_file():
        return "No run at the real model's scale is published: `make scale-refresh` runs and publishes one."
    return timings(published, "the opus-shape run")


def filled(text: str, reference: str | Path, href: str = "reference") -> str:
    """`text` with each generated block, filled or not, as `render` writes it now."""
    block = re.compile(MARKER.pattern + r"\n.*?" + re.escape(GENERATED_END) + r"\n?", re.DOTALL)
    return render(block.sub(lambda m: m.group(0)[: m.group(0).index("-->") + 3], text), reference, href)


def fill(path: str | Path, reference: str | Path) -> bool:
    """Write `path`'s generated blocks in place (a file read outside the site, such as the README, holds what
    `render` would put there); True when that changed the file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    new = filled(text, reference, Path(os.path.relpath(reference, path.parent)).as_posix())
    if new != text:
        write_atomic(path, new)
    return new != text


def lab_nav(nav: list[Any], page: str, reference: str | Path, href: str = "reference") -> list[Any]:
    """The site's navigation with the reference run's notebooks listed under `page` (the lab's page; `href` is the
    reference directory within the docs): the lab's section follows the notebooks the reference holds, never a
    list typed into mkdocs.yml."""
    notebooks = [f"{href}/notebooks/{p.name}" for p in sorted(Path(reference, "notebooks").glob(NOTEBOOK))]

    def section(entry: Any) -> Any:
        if isinstance(entry, dict) and list(entry.values()) == [page]:
            return {next(iter(entry)): [page, *notebooks]}
        return entry

    return [section(entry) for entry in nav]


def refresh(run_dir: str | Path, reference: str | Path, limit_mb: float = REFERENCE_LIMIT_MB) -> dict[str, Any]:
    """Replace `reference` with what the site needs from `run_dir` (a complete run): its executed notebooks, figures,
    metrics, env, report, screenshot and the deployed model's card; ValueError when that is over `limit_mb` or the
    run is incomplete."""
    run_dir = Path(run_dir)
    missing = [name for name in ("metrics.json", "env.json", "notebooks") if not (run_dir / name).exists()]
    if missing:
        raise ValueError(f"{run_dir} is not a complete run: it has no {', '.join(missing)} (run make report first)")
    with staged_dir(reference) as tmp:
        (tmp / "notebooks").mkdir()
        for notebook in sorted((run_dir / "notebooks").glob(NOTEBOOK)):
            shutil.copy2(notebook, tmp / "notebooks" / notebook.name)
        if (run_dir / "figures").is_dir():
            shutil.copytree(run_dir / "figures", tmp / "figures")
        for name in COPIED:
            if (run_dir / name).is_file():
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(run_dir / name, tmp / name)
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()) / 2**20
        if size > limit_mb:
            raise ValueError(f"the reference run would hold {size:.1f} MB, over the {limit_mb} MB it may take")
    return {"mb": round(size, 2), "notebooks": sorted(p.name for p in (Path(reference) / "notebooks").iterdir())}


def publish_timings(run_dir: str | Path, published: str | Path) -> dict[str, Any]:
    """Replace `published` with `run_dir`'s metrics.json and env.json, what `scale_timings` reads; ValueError when the
    run recorded no notebook times."""
    run_dir = Path(run_dir)
    if not (run_dir / "env.json").is_file() or not _published_seconds(run_dir):
        raise ValueError(f"{run_dir} recorded no notebook times (run `mtonnx run --params ...` to the end first)")
    with staged_dir(published) as tmp:
        for name in ("metrics.json", "env.json"):
            shutil.copy2(run_dir / name, tmp / name)
    return {"seconds": _published_seconds(published)}


def _published_seconds(reference: str | Path) -> dict[str, float]:
    """The notebook times a run recorded ({} when it has no metrics.json or recorded none)."""
    if not (Path(reference) / "metrics.json").is_file():
        return {}
    return _metrics(reference).get("run", {}).get("notebook_seconds") or {}


def stale(
    reference: str | Path, notebooks: str | Path, params_hash: str, params_file: str = "params/default.yaml"
) -> list[str]:
    """How a published run no longer matches the code: notebooks in one but not the other (its executed notebooks,
    or the notebooks it timed when only its metrics are published), another hash of `params_file`."""
    reference = Path(reference)
    if (reference / "notebooks").is_dir():
        have = {p.name for p in (reference / "notebooks").glob(NOTEBOOK)}
    else:
        have = {f"{name}.ipynb" for name in _published_seconds(reference)}
    want = {p.name for p in Path(notebooks).glob(NOTEBOOK)}
    env = json.loads((reference / "env.json").read_text(encoding="utf-8")) if (reference / "env.json").is_file() else {}
    problems = [f"{name} is in notebooks/ but not in the reference run" for name in sorted(want - have)]
    problems += [f"{name} is in the reference run but not in notebooks/" for name in sorted(have - want)]
    if env.get("params_hash") != params_hash:
        problems.append(
            f"the reference run's params hash {env.get('params_hash')} is not {params_file}'s {params_hash}"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    """`python -m mtonnx.report.docs refresh RUN_DIR REFERENCE_DIR`: what `make docs-refresh` calls;
    `... timings RUN_DIR DOCS_DIR [FILE ...]`: what `make scale-refresh` calls (publish a run's notebook times into
    DOCS_DIR/SCALE_REFERENCE, then fill the generated blocks of each FILE, such as README.md, from DOCS_DIR)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m mtonnx.report.docs")
    parser.add_argument("command", choices=("refresh", "timings"))
    parser.add_argument("run_dir")
    parser.add_argument("reference", help="refresh: the reference directory; timings: the docs directory")
    parser.add_argument("files", nargs="*", help="timings: files whose generated blocks to fill (e.g. README.md)")
    args = parser.parse_args(argv)
    try:
        if args.command == "refresh":
            done = refresh(args.run_dir, args.reference)
            print(
                f"reference run: {args.reference} ({done['mb']} MB, {len(done['notebooks'])} notebooks)",
                file=sys.stderr,
            )
            return 0
        seconds = publish_timings(args.run_dir, Path(args.reference) / SCALE_REFERENCE)["seconds"]
    except ValueError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    print(f"timings: {len(seconds)} notebooks, {sum(seconds.values()):.0f} s in all", file=sys.stderr)
    for name in args.files:
        changed = fill(name, Path(args.reference) / "reference")
        print(f"{name}: {'updated' if changed else 'unchanged'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
