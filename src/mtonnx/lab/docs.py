"""The documentation site's generated parts, and the reference run it publishes.

Pages hold markers (`<!-- generated: params -->`) that `render` replaces when the site is built (mkdocs' hook,
docs/hooks.py), so nothing generated is ever typed into a page and nothing can drift:
- `params`: the params reference, from the schema (mtonnx.params.SCHEMA): every key, its type, default, range, doc;
- `results`: the reference run's workloads, variant table with every gate, targets against the peers and memory,
  stamped with the commit, date, CPU, thread count and engine versions of the run that measured them;
- `pitfalls`: what the reference run reproduced and what doctor found on its exports;
- `examples`: what the reference model knows, in and out of domain, with its best and worst translations;
- `figures`: the reference run's figures with their captions, grouped by the notebook that drew them;
- `scale_timings`: how long each notebook took at the real model's scale (params/opus-shape.yaml), from that run's
  metrics and env, published beside the reference run (SCALE_REFERENCE) since the site shows none of its notebooks;
- `scale_results`: that run's engines, variants and targets per named workload (lab.results_page), stamped with
  every engine's version;
- `quickstart`: the Deploy quickstart, `mtonnx migrate` on the default model and what it deploys translating, from
  the migrate run lab.quickstart publishes beside the reference run (QUICKSTART_REFERENCE); `quickstart_api`:
  the same sentences through the Python API and `mtonnx serve`, with their answers;
A rendered block ends with GENERATED_END, so whatever reads the built page can tell generated text from prose.
`lab_nav` lists the reference run's notebooks in the site's navigation, under the lab's page, each under its whole
first heading (`notebook_title`).

`refresh` copies what the site needs from a run directory into docs/reference/ (executed notebooks with their
outputs, figures, metrics.json, env.json, the report, its screenshot and the deployed model's card; never an ONNX
file), refusing more than REFERENCE_LIMIT_MB; the report keeps only its links to what is published
(`unlink_unpublished`). `publish_timings` copies only a run's metrics and env, for
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
SCALE_REFERENCE = "reference-opus-shape"  # beside the reference run: the opus-shape run's notebook times and speed
NO_SCALE_RUN = "No run at the real model's scale is published: `make scale-refresh` runs and publishes one."
QUICKSTART_REFERENCE = "reference-quickstart"  # beside it too: the Deploy quickstart's migrate run (lab.quickstart)
QUICKSTART_FILE = "quickstart.json"
NO_QUICKSTART = "No quickstart run is published: `make docs-refresh` runs and publishes one."
QUICKSTART_MODEL, QUICKSTART_OUT = "models/hsk-enzh", "outputs/quickstart"  # what the quickstart migrates, and where
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


def _stamp(env: dict[str, Any], run: str = "the reference run", packages: tuple[str, ...] = ("onnxruntime",)) -> str:
    """The run, commit, date, machine, threads and params that measured a table, with the versions of `packages` as
    env.json recorded them (`not installed`: the run found none; `not recorded by this run`: env.json has no entry)."""
    cpu, git, recorded = env.get("cpu", {}), env.get("git", {}), env.get("packages", {})
    threads = env.get("params", {}).get("runtime", {}).get("threads")
    versions = ", ".join(
        f"{name} {recorded[name] or 'not installed'}" if name in recorded else f"{name} not recorded by this run"
        for name in packages
    )
    return (
        f"Measured by {run} of commit `{(git.get('sha') or 'unknown')[:12]}` on {env.get('started')}: "
        f"{cpu.get('model')} ({cpu.get('usable_cores')} cores), {threads} ONNX Runtime thread(s), {versions}, "
        f"params `{env.get('params', {}).get('name')}` ({env.get('params_hash')})."
    )


def results(reference: str | Path) -> str:
    """The reference run's workloads, its variants with every gate, the runtime's targets against its peers at forced
    lengths (lab.results_page), and memory."""
    from mtonnx.lab import results_page

    metrics = _metrics(reference)
    env = json.loads((Path(reference) / "env.json").read_text(encoding="utf-8"))
    quant, bench = metrics.get("quant", {}), metrics.get("bench", {})
    out = [_stamp(env, packages=results_page.ENGINE_PACKAGES), "", results_page.workload_table(env), ""]
    out += [f"Objective: `{quant.get('objective')}`. Recommended: **{quant.get('recommended')}**.", ""]
    out += [
        "| variant | MB | objective ms | vs PyTorch fp32 | vs CT2 int8 | BLEU Δ (95 % CI) | quality | identical to "
        "fp32 (95 % CI) | fidelity | same in any batch | invariance |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
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
            f"{row['fidelity_gate']} | {_share((row.get('batch_invariance') or {}).get('share'))} | "
            f"{row.get('invariance_gate', '-')} |"
        )
    out += ["", "The runtime against its peers at forced lengths, held to the targets of the run's params:", ""]
    out.append(results_page.target_table(metrics, env))
    out += ["", "Where a pass over the corpus goes (notebook 07's `profile`), beside CTranslate2 int8:", ""]
    out.append(results_page.profile_table(metrics))
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
        "scale_results": lambda: scale_results(Path(reference).parent / SCALE_REFERENCE),
        "quickstart": lambda: quickstart(Path(reference).parent / QUICKSTART_REFERENCE, reference),
        "quickstart_api": lambda: quickstart_api(Path(reference).parent / QUICKSTART_REFERENCE),
    }

    def replace(match: re.Match) -> str:
        if match.group(1) not in makers:
            raise ValueError(f"unknown generated block {match.group(1)!r}; known: {', '.join(makers)}")
        return f"{match.group(0)}\n\n{makers[match.group(1)]()}\n\n{GENERATED_END}\n"

    return MARKER.sub(replace, markdown)


def scale_timings(published: str | Path) -> str:
    """Each notebook's time at the real model's scale, from the opus-shape run published in `published`."""
    if not (Path(published) / "env.json").is_file():
        return NO_SCALE_RUN
    return timings(published, "the opus-shape run")


def scale_results(published: str | Path) -> str:
    """The engines, variants and targets at the real model's scale (lab.results_page), from the opus-shape run
    published in `published`, stamped with every engine's version."""
    from mtonnx.lab import results_page

    if not (Path(published) / "env.json").is_file():
        return NO_SCALE_RUN
    env = json.loads((Path(published) / "env.json").read_text(encoding="utf-8"))
    stamp = _stamp(env, "the opus-shape run", results_page.ENGINE_PACKAGES)
    return f"{stamp}\n\n{results_page.scale_tables(_metrics(published), env)}"


def quickstart(published: str | Path, reference: str | Path) -> str:
    """The Deploy quickstart from the migrate run published in `published` (lab.quickstart): its commands, how
    long migrate's steps took and what it deployed, what `mtonnx translate` prints beside the references, and the
    model's limits with its parameter count from the reference run in `reference`."""
    import shlex

    run = _quickstart_run(published)
    if run is None:
        return NO_QUICKSTART
    examples, total = run["examples"], sum(run["seconds"].values())
    inspect = _metrics(reference).get("inspect", {}) if (Path(reference) / "metrics.json").is_file() else {}
    count = inspect.get("params_total")
    size = f" ({count / 1e6:.1f} million parameters, counted by the reference run)" if count else ""
    return "\n".join(
        [
            _stamp(run["env"], "the quickstart's migrate run"),
            "",
            "```bash",
            f"mtonnx migrate --model {QUICKSTART_MODEL} --out {QUICKSTART_OUT}",
            f"printf '%s\\n' {' '.join(shlex.quote(e['en']) for e in examples)} | "
            f"mtonnx translate --run {QUICKSTART_OUT}",
            "```",
            "",
            f"Here migrate's steps took {total:.0f} s ({total / 60:.1f} minutes); it ended with "
            f"`deploy: {QUICKSTART_OUT}/deploy` and deployed **{run['recommended']}**. `mtonnx translate` prints, with "
            "any variant that passed every gate:",
            "",
            "| English | printed | the reference |",
            "| --- | --- | --- |",
            *(f"| {_cell(e['en'])} | {_cell(e['output'])} | {_cell(e['reference'])} |" for e in examples),
            "",
            f"`{Path(QUICKSTART_MODEL).name}` is small{size} and trained here on short HSK sentences: it gets some "
            "short everyday sentences right and fails on most other text.",
        ]
    )


def _quickstart_run(published: str | Path) -> dict[str, Any] | None:
    path = Path(published) / QUICKSTART_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def quickstart_api(published: str | Path) -> str:
    """The quickstart's sentences through the Python API and `mtonnx serve`, with what each answers: the same
    translations as the CLI's (one call for all, as the quickstart types them)."""
    run = _quickstart_run(published)
    if run is None:
        return NO_QUICKSTART
    examples = run["examples"]
    english, printed = [e["en"] for e in examples], [e["output"] for e in examples]
    request = json.dumps({"q": english, "source": "en", "target": "zh"}, ensure_ascii=False)
    answer = json.dumps({"translatedText": printed}, ensure_ascii=False)
    return "\n".join(
        [
            "```python",
            "from mtonnx.runtime import Translator",
            "",
            f'translator = Translator("{QUICKSTART_OUT}/deploy")',
            "# a list in, a list out (a str in, a str out)",
            f"translator.translate({json.dumps(english, ensure_ascii=False)})",
            f"# {json.dumps(printed, ensure_ascii=False)}",
            "```",
            "",
            "```bash",
            f"mtonnx serve --run {QUICKSTART_OUT} --port 8000 &",
            f"curl -s localhost:8000/translate -H 'content-type: application/json' -d '{request}'",
            f"# {answer}",
            "```",
        ]
    )


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
    list typed into mkdocs.yml, each labelled with its `notebook_title` (mkdocs.yml's ignore_h1_titles keeps it)."""
    notebooks = [
        {title: f"{href}/notebooks/{p.name}"} if (title := notebook_title(p)) else f"{href}/notebooks/{p.name}"
        for p in sorted(Path(reference, "notebooks").glob(NOTEBOOK))
    ]

    def section(entry: Any) -> Any:
        if isinstance(entry, dict) and list(entry.values()) == [page]:
            return {next(iter(entry)): [page, *notebooks]}
        return entry

    return [section(entry) for entry in nav]


def notebook_title(notebook: str | Path) -> str | None:
    """A notebook's first markdown heading as plain text, its code spans kept as text (mkdocs-jupyter's own title
    drops them: "02 · Export by hand with"); None when it has none."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8")).get("cells", [])
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", [])).splitlines():
                if line.startswith("# "):
                    return re.sub(r"`+([^`]+)`+", r"\1", line[2:]).strip()
    return None


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
        if (tmp / "index.html").is_file():
            write_atomic(tmp / "index.html", unlink_unpublished((tmp / "index.html").read_text(encoding="utf-8"), tmp))
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()) / 2**20
        if size > limit_mb:
            raise ValueError(f"the reference run would hold {size:.1f} MB, over the {limit_mb} MB it may take")
    return {"mb": round(size, 2), "notebooks": sorted(p.name for p in (Path(reference) / "notebooks").iterdir())}


def unlink_unpublished(html: str, published: str | Path) -> str:
    """A report's HTML whose links to files not published beside it (a run's graphs/, its ONNX files) keep their
    text and lose their link, so the site holds no dead link; a notebook counts as published as the page the site
    makes of it (notebooks/NAME.html from notebooks/NAME.ipynb)."""

    def published_file(target: str) -> bool:
        path = Path(published, target.split("#")[0].split("?")[0])
        return path.is_file() or (path.suffix == ".html" and path.with_suffix(".ipynb").is_file())

    def keep(match: re.Match) -> str:
        target = match.group(1)
        external = re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target)
        return match.group(0) if external or published_file(target) else match.group(2)

    return re.sub(r'<a href="([^"]*)"[^>]*>(.*?)</a>', keep, html, flags=re.DOTALL)


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
    """`python -m mtonnx.lab.docs refresh RUN_DIR REFERENCE_DIR`: what `make docs-refresh` calls;
    `... timings RUN_DIR DOCS_DIR [FILE ...]`: what `make scale-refresh` calls (publish a run's notebook times into
    DOCS_DIR/SCALE_REFERENCE, then fill the generated blocks of each FILE, such as README.md, from DOCS_DIR)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m mtonnx.lab.docs")
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


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
