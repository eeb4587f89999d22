"""The documentation site: its generated blocks, the reference run it publishes (refreshed, checked for staleness),
the prose without typed-in measurements, the strict build that fails on a broken link or a missing page, and the
built pages as Chromium draws them (Chinese in a CJK font, no broken image or link)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, needs_browser
from mtonnx import params as params_module
from mtonnx.lab import docs
from mtonnx.report import prose

DOCS = REPO / "docs"
REFERENCE = DOCS / "reference"
SCALE = DOCS / docs.SCALE_REFERENCE
NOTEBOOKS = REPO / "notebooks"
DATA = Path(__file__).parent / "data" / "reference"
PAGES = (
    "index",
    "getting-started",
    "lab",
    "deploying",
    "reviewing",
    "results",
    "params",
    "models",
    "troubleshooting",
)
ABSENT = "docs/reference/ is absent: the lead commits the reference run (make docs-refresh)"


def fake_run(run_dir: Path) -> Path:
    """A run directory with what `refresh` copies: metrics and env from tests/data/reference, the project's notebooks
    (unexecuted), a figure with its caption, the report and its screenshot, the model card, and an ONNX file."""
    from PIL import Image

    (run_dir / "notebooks").mkdir(parents=True)
    (run_dir / "figures").mkdir()
    (run_dir / "deploy").mkdir()
    for name in ("metrics.json", "env.json"):
        shutil.copy2(DATA / name, run_dir / name)
    for notebook in NOTEBOOKS.glob(docs.NOTEBOOK):
        shutil.copy2(notebook, run_dir / "notebooks" / notebook.name)
    Image.new("RGB", (320, 200), "white").save(run_dir / "figures" / "quant_fidelity.png")
    (run_dir / "figures" / "captions.json").write_text(json.dumps({"quant_fidelity": "Identical to fp32, per variant"}))
    Image.new("RGB", (1400, 900), "white").save(run_dir / "report.png")
    (run_dir / "index.html").write_text("<!doctype html><title>report</title><img src='report.png'>")
    (run_dir / "deploy" / "model_card.md").write_text("# tiny: fp32-tuned\n\nThe recommended variant.\n")
    (run_dir / "deploy" / "encoder_model.onnx").write_bytes(b"\0" * 1024)
    return run_dir


def site_source(where: Path) -> Path:
    """mkdocs.yml and docs/ copied into `where`, with the committed reference run or, while there is none, one
    refreshed from `fake_run`: what `make docs` builds."""
    shutil.copy2(REPO / "mkdocs.yml", where / "mkdocs.yml")
    shutil.copytree(DOCS, where / "docs", ignore=shutil.ignore_patterns("reference"))
    if REFERENCE.is_dir():
        shutil.copytree(REFERENCE, where / "docs" / "reference")
    else:
        docs.refresh(fake_run(where / "run"), where / "docs" / "reference")
    return where


def build(source: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of `source` into `site`, as `make docs` runs it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
        "NO_MKDOCS_2_WARNING": "1",
    }
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(source / "mkdocs.yml"), "-d", str(site)]
    return subprocess.run(command, capture_output=True, text=True, cwd=source, env=env, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    source = site_source(tmp_path_factory.mktemp("docs"))
    site = source / "site"
    done = build(source, site)
    assert done.returncode == 0, done.stderr[-3000:]
    return site


# The generated blocks


def test_the_params_reference_is_the_schema(monkeypatch):
    page = docs.params_reference()
    for section, spec in params_module.SCHEMA.items():
        keys = [f"{section}.{key}" for key in spec] if isinstance(spec, dict) else [section]
        assert [key for key in keys if f"| `{key}` |" not in page] == []
    gate = params_module.SCHEMA["quant"]["gate_bleu"]
    monkeypatch.setitem(params_module.SCHEMA["quant"], "gate_bleu", dataclasses.replace(gate, default=0.75))
    assert "| `quant.gate_bleu` | float | `0.75` |" in docs.params_reference()


def test_render_fills_each_block_up_to_its_end_and_refuses_an_unknown_one():
    page = docs.render("# R\n\n<!-- generated: results -->\n\nprose\n", DATA)
    start, end = page.index("<!-- generated: results -->"), page.index(docs.GENERATED_END)
    assert "Recommended: **fp32-tuned**" in page[start:end] and page[end:].strip().endswith("prose")
    with pytest.raises(ValueError, match="unknown generated block 'resutls'"):
        docs.render("<!-- generated: resutls -->", DATA)


def test_results_are_stamped_with_the_run_that_measured_them():
    env = json.loads((DATA / "env.json").read_text())
    page = docs.results(DATA)
    stamp = page.splitlines()[0]
    assert env["git"]["sha"][:12] in stamp and env["cpu"]["model"] in stamp and env["params_hash"] in stamp
    assert "1 ONNX Runtime thread(s)" in stamp
    rows = [line for line in page.splitlines() if re.match(r"\| (fp|int)", line)]
    assert [row.split(" | ")[0] for row in rows] == ["| fp32", "| int8", "| fp16", "| fp32-tuned ★"]


def test_timings_list_each_notebook_of_the_reference_run_and_the_total(tmp_path):
    for name in ("env.json", "metrics.json"):
        (tmp_path / name).write_text((DATA / name).read_text())
    assert "recorded no notebook times" in docs.timings(tmp_path)
    metrics = json.loads((DATA / "metrics.json").read_text())
    metrics.setdefault("run", {})["notebook_seconds"] = {"01_inspect_model": 20.4, "02_export_manual": 99.8}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    page = docs.timings(tmp_path).splitlines()
    assert "Measured by the reference run" in page[0]
    assert page[-3:] == [
        "| 01_inspect_model | 20 |",
        "| 02_export_manual | 100 |",
        "| **all 2** | **120** (2.0 minutes) |",
    ]


def test_examples_keep_the_table_whole_and_credit_the_data(tmp_path):
    from mtonnx.data import HSK_CREDIT

    metrics = json.loads((DATA / "metrics.json").read_text())
    metrics["inspect"]["examples"][0]["model"] = "他 | <unk> 好"
    (tmp_path / "metrics.json").write_text(json.dumps(metrics, ensure_ascii=False))
    page = docs.examples(tmp_path)
    assert "| 他 \\| &lt;unk> 好 |" in page
    assert page.splitlines()[-1] == f"*{HSK_CREDIT}*"


def test_figures_link_from_the_page_to_the_reference(tmp_path):
    docs.refresh(fake_run(tmp_path / "run"), tmp_path / "reference")
    page = docs.figures(tmp_path / "reference", href="../reference")
    assert "![Identical to fp32, per variant](../reference/figures/quant_fidelity.png)" in page


def test_figures_are_grouped_by_the_notebook_that_draws_them_in_its_order(tmp_path):
    from mtonnx.report.index import figure_groups

    (tmp_path / "figures").mkdir()
    for name in ("serve_p99", "bench_ablation", "bench_latency", "unknown_plot"):
        (tmp_path / "figures" / f"{name}.png").write_bytes(b"")
    groups = [(g["notebook"][:2], [f["src"] for f in g["figures"]]) for g in figure_groups(tmp_path)]
    assert groups == [
        ("07", ["figures/bench_latency.png"]),
        ("09", ["figures/bench_ablation.png"]),
        ("11", ["figures/serve_p99.png"]),
        ("ot", ["figures/unknown_plot.png"]),
    ]


def test_the_lab_section_lists_the_reference_notebooks(tmp_path):
    (tmp_path / "notebooks").mkdir()
    for name in ("02_b.ipynb", "01_a.ipynb", "notes.ipynb"):
        (tmp_path / "notebooks" / name).write_text("{}")
    nav = [{"Home": "index.md"}, {"The lab": "lab.md"}, "other.md"]
    assert docs.lab_nav(nav, "lab.md", tmp_path, "ref") == [
        {"Home": "index.md"},
        {"The lab": ["lab.md", "ref/notebooks/01_a.ipynb", "ref/notebooks/02_b.ipynb"]},
        "other.md",
    ]


def test_a_notebook_is_listed_under_its_whole_first_heading(tmp_path):
    (tmp_path / "notebooks").mkdir()
    heading = {"cell_type": "markdown", "source": ["# 02 · Export by hand with `torch.onnx.export`\n", "\n", "Text."]}
    cells = [{"cell_type": "code", "source": ["# a comment\n"]}, heading]
    (tmp_path / "notebooks" / "02_b.ipynb").write_text(json.dumps({"cells": cells}))
    assert docs.lab_nav([{"The lab": "lab.md"}], "lab.md", tmp_path, "ref") == [
        {"The lab": ["lab.md", {"02 · Export by hand with torch.onnx.export": "ref/notebooks/02_b.ipynb"}]}
    ]


# The reference run


def test_refresh_keeps_the_report_s_links_to_what_it_publishes_only(tmp_path):
    run = fake_run(tmp_path / "run")
    (run / "index.html").write_text(
        '<a href="notebooks/01_inspect_model.html">01</a>, <a href="graphs/manual/encoder_model.png">a graph</a>, '
        '<a href="https://onnxruntime.ai">ORT</a>, <a href="#verdict">verdict</a>, <a href="metrics.json">metrics</a>'
    )
    docs.refresh(run, tmp_path / "reference")
    assert (tmp_path / "reference" / "index.html").read_text() == (
        '<a href="notebooks/01_inspect_model.html">01</a>, a graph, <a href="https://onnxruntime.ai">ORT</a>, '
        '<a href="#verdict">verdict</a>, <a href="metrics.json">metrics</a>'
    )


def test_refresh_copies_what_the_site_shows_and_no_model(tmp_path):
    done = docs.refresh(fake_run(tmp_path / "run"), tmp_path / "reference")
    assert done["notebooks"] == sorted(p.name for p in NOTEBOOKS.glob(docs.NOTEBOOK))
    reference = tmp_path / "reference"
    held = {p.relative_to(reference).as_posix() for p in reference.rglob("*") if p.is_file()}
    assert {"metrics.json", "env.json", "report.png", "index.html", "deploy/model_card.md"} <= held
    assert "figures/quant_fidelity.png" in held and not [p for p in held if p.endswith(".onnx")]


def test_refresh_refuses_an_incomplete_run_or_too_many_bytes_and_keeps_the_old_reference(tmp_path):
    run = fake_run(tmp_path / "run")
    docs.refresh(run, tmp_path / "reference")
    before = sorted(p.name for p in (tmp_path / "reference").rglob("*"))
    with pytest.raises(ValueError, match="over the 0.001 MB"):
        docs.refresh(run, tmp_path / "reference", limit_mb=0.001)
    (run / "env.json").unlink()
    with pytest.raises(ValueError, match="has no env.json"):
        docs.refresh(run, tmp_path / "reference")
    assert sorted(p.name for p in (tmp_path / "reference").rglob("*")) == before


def test_stale_names_each_mismatch(tmp_path):
    reference, notebooks = tmp_path / "reference", tmp_path / "notebooks"
    (reference / "notebooks").mkdir(parents=True)
    notebooks.mkdir()
    (reference / "env.json").write_text(json.dumps({"params_hash": "aaa"}))
    for name in ("01_a.ipynb", "02_b.ipynb"):
        (reference / "notebooks" / name).write_text("{}")
        (notebooks / name).write_text("{}")
    assert docs.stale(reference, notebooks, "aaa") == []
    (notebooks / "03_c.ipynb").write_text("{}")
    (notebooks / "01_a.ipynb").unlink()
    assert docs.stale(reference, notebooks, "bbb") == [
        "03_c.ipynb is in notebooks/ but not in the reference run",
        "01_a.ipynb is in the reference run but not in notebooks/",
        "the reference run's params hash aaa is not params/default.yaml's bbb",
    ]


def test_the_reference_run_matches_the_code():
    if not REFERENCE.is_dir():
        pytest.skip(ABSENT)
    default = params_module.load(REPO / "params" / "default.yaml")["_hash"]
    assert docs.stale(REFERENCE, NOTEBOOKS, default) == [], "make docs-refresh publishes a run of this code"


def test_stale_reads_the_timed_notebooks_of_a_run_published_without_them(tmp_path):
    published, notebooks = tmp_path / "published", tmp_path / "notebooks"
    published.mkdir()
    notebooks.mkdir()
    for name in ("01_a.ipynb", "02_b.ipynb"):
        (notebooks / name).write_text("{}")
    (published / "env.json").write_text(json.dumps({"params_hash": "aaa"}))
    (published / "metrics.json").write_text(json.dumps({"run": {"notebook_seconds": {"01_a": 60.0}}}))
    assert docs.stale(published, notebooks, "bbb", "params/opus-shape.yaml") == [
        "02_b.ipynb is in notebooks/ but not in the reference run",
        "the reference run's params hash aaa is not params/opus-shape.yaml's bbb",
    ]


def test_timings_are_published_alone_and_filled_into_a_file_in_place(tmp_path):
    run, docs_dir = tmp_path / "run", tmp_path / "docs"
    run.mkdir()
    shutil.copytree(DATA, docs_dir / "reference")
    shutil.copy2(DATA / "env.json", run / "env.json")
    metrics = json.loads((DATA / "metrics.json").read_text())
    metrics.setdefault("run", {}).pop("notebook_seconds", None)
    (run / "metrics.json").write_text(json.dumps(metrics))
    published = docs_dir / docs.SCALE_REFERENCE
    with pytest.raises(ValueError, match="recorded no notebook times"):
        docs.publish_timings(run, published)
    assert not published.exists()

    readme = tmp_path / "README.md"
    readme.write_text("# R\n\nIt took:\n\n<!-- generated: scale_timings -->\n<!-- /generated -->\n\nThe end.\n")
    assert docs.fill(readme, docs_dir / "reference")
    assert "No run at the real model's scale is published" in readme.read_text()

    metrics["run"]["notebook_seconds"] = {"01_inspect_model": 61.2, "05_cached_decoder": 300.4}
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert docs.publish_timings(run, published)["seconds"] == metrics["run"]["notebook_seconds"]
    assert sorted(p.name for p in published.iterdir()) == ["env.json", "metrics.json"]
    assert docs.fill(readme, docs_dir / "reference")
    text = readme.read_text()
    assert "Measured by the opus-shape run of commit" in text and "No run at" not in text
    assert "| 05_cached_decoder | 300 |" in text and "| **all 2** | **362** (6.0 minutes) |" in text
    assert text.startswith("# R\n\nIt took:\n") and text.endswith("<!-- /generated -->\n\nThe end.\n")
    assert prose.findings(text) == []
    assert not docs.fill(readme, docs_dir / "reference")  # filled once, a second fill changes nothing


def test_the_scale_run_in_the_readme_matches_the_code():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "<!-- generated: scale_timings -->" in readme
    assert docs.filled(readme, REFERENCE, "docs/reference") == readme, "make scale-refresh writes the README's times"
    if not SCALE.is_dir():
        pytest.skip(f"{SCALE} is absent: make scale-refresh publishes the opus-shape run")
    opus = params_module.load(REPO / "params" / "opus-shape.yaml")["_hash"]
    assert docs.stale(SCALE, NOTEBOOKS, opus, "params/opus-shape.yaml") == [], "make scale-refresh publishes a new run"


# The prose


def test_typed_measurements_are_found_outside_code_and_generated_blocks():
    text = (
        "It took 12 ms, then 1.5x faster and 40 % smaller,\n"
        "at 300 sentences/s (95 % CI), in `--seconds 10 s` and\n"
        "```\n3 s\n```\n"
        "<!-- generated: results -->\n| 7 MB |\n<!-- /generated -->\n"
        "Python 3.11 on 2 cores, 4 GB."
    )
    assert [f"{f.where}: {f.phrase}" for f in prose.findings(text)] == [
        "line 1: 12 ms",
        "line 1: 1.5x",
        "line 1: 40 %",
        "line 2: 300 sentences/s",
        "line 9: 4 GB",
    ]


def test_a_rendered_page_holds_measurements_only_in_its_generated_blocks():
    page = docs.render((DOCS / "results.md").read_text(encoding="utf-8"), DATA)
    assert prose.findings(page) == []
    assert prose.findings(page.replace(prose.GENERATED_END, "")) != []  # a block not ended hides nothing


@pytest.mark.parametrize("path", ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in DOCS.glob("*.md"))])
def test_no_measurement_is_typed_into_the_readme_or_a_page(path):
    assert prose.findings((REPO / path).read_text(encoding="utf-8")) == [], "write it into a generated block"


def test_the_readme_is_a_landing_page_whose_links_resolve():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.split()) <= 1200
    assert "make report" in text and "make test" in text
    links = [link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in link]
    missing = [link for link in links if link and not (REPO / link).exists()]
    if not REFERENCE.is_dir():
        missing = [link for link in missing if not link.startswith("docs/reference/")]
    assert missing == []


def test_every_notebook_has_its_line_on_the_lab_page():
    lab = (DOCS / "lab.md").read_text(encoding="utf-8")
    assert [n.name for n in sorted(NOTEBOOKS.glob(docs.NOTEBOOK)) if f"(reference/notebooks/{n.name})" not in lab] == []


# The built site


def test_the_site_builds_strictly_with_every_page(built):
    for page in PAGES:
        assert (built / f"{page}.html").is_file(), page
    for notebook in NOTEBOOKS.glob(docs.NOTEBOOK):
        assert (built / "reference" / "notebooks" / notebook.with_suffix(".html").name).is_file(), notebook.name
    results = (built / "results.html").read_text(encoding="utf-8")
    assert re.search(r"<!-- generated: results -->\s*<p>Measured by the reference run of commit", results)
    assert "quant.gate_bleu" in (built / "params.html").read_text(encoding="utf-8")


def test_every_link_inside_the_published_report_resolves_in_the_built_site(built):
    report = built / "reference" / "index.html"
    links = re.findall(r"""(?:href|src)=["']([^"'#?]+)""", report.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link)]
    assert local and [link for link in local if not (report.parent / link).is_file()] == []


def test_the_lab_s_navigation_labels_read_whole(built):
    import html

    page = (built / "lab.html").read_text(encoding="utf-8")
    titles = [
        docs.notebook_title(p) for p in sorted((built.parent / "docs" / "reference" / "notebooks").glob("*.ipynb"))
    ]
    assert titles and [t for t in titles if html.escape(t, quote=False) not in page] == []


def test_a_broken_link_or_a_missing_notebook_fails_the_strict_build(tmp_path):
    source = site_source(tmp_path)
    with (source / "docs" / "getting-started.md").open("a", encoding="utf-8") as page:
        page.write("\nSee [the old page](no-such-page.md).\n")
    next((source / "docs" / "reference" / "notebooks").glob("05_*.ipynb")).unlink()
    done = build(source, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr and "05_cached_decoder.ipynb" in done.stderr, done.stderr[-3000:]


def test_without_a_reference_run_the_build_says_how_to_publish_one(tmp_path):
    source = site_source(tmp_path)
    shutil.rmtree(source / "docs" / "reference")
    done = build(source, tmp_path / "site")
    assert done.returncode != 0 and "make docs-refresh" in done.stderr, done.stderr[-2000:]


# The built site in a browser


@pytest.mark.parametrize("page", ["index.html", "reference/notebooks/08_pitfalls.html", "results.html"])
def test_a_page_draws_its_chinese_in_a_cjk_font_with_no_broken_image_or_link(built, page):
    from mtonnx.lab.browser import inspect_page

    needs_browser()
    seen = inspect_page(built / page, ids=())
    assert seen["broken_images"] == [] and seen["broken_links"] == []
    assert seen["cjk_characters"] > 0
    assert any("CJK" in family for family in seen["cjk_fonts"]), seen["cjk_fonts"]


def test_the_browser_check_finds_a_broken_image_and_a_missing_page(built, tmp_path):
    from mtonnx.lab.browser import inspect_page

    needs_browser()
    site = tmp_path / "site"
    shutil.copytree(built, site)
    (site / "reference" / "report.png").unlink()
    (site / "getting-started.html").unlink()
    seen = inspect_page(site / "index.html", ids=())
    assert seen["broken_images"] == ["reference/report.png"]
    assert "getting-started.html" in seen["broken_links"]


def test_the_font_check_sees_chinese_drawn_without_a_cjk_font(built, tmp_path, monkeypatch):
    from mtonnx.lab.browser import inspect_page

    needs_browser()
    if shutil.which("fc-list") is None:
        pytest.skip("fontconfig's fc-list is not installed (apt-get install fontconfig; .ci/run installs it)")
    files = subprocess.run(["fc-list", ":", "file"], capture_output=True, text=True, check=True).stdout.split()
    folders = {Path(f.rstrip(":")).parent for f in files}
    cjk = {Path(f.rstrip(":")).parent for f in files if "cjk" in f.lower()}
    config = tmp_path / "fonts.conf"  # fontconfig without the folders holding a CJK font: Chromium draws boxes
    config.write_text(
        "<?xml version='1.0'?><fontconfig>"
        + "".join(f"<dir>{folder}</dir>" for folder in sorted(folders - cjk))
        + f"<cachedir>{tmp_path / 'cache'}</cachedir></fontconfig>"
    )
    monkeypatch.setenv("FONTCONFIG_FILE", str(config))
    seen = inspect_page(built / "results.html", ids=())
    assert seen["cjk_characters"] > 0 and seen["cjk_fonts"]
    assert not any("CJK" in family for family in seen["cjk_fonts"]), seen["cjk_fonts"]
