"""Figures: drawn without forcing a backend, saved for the report, and shown inline where a lesson draws them, in
a kernel and in JupyterLab itself."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from conftest import REPO, needs_browser
from mtonnx.foundation.ports import free_port

LESSON = "01_inspect_model.ipynb"
FIGURE_CALL = "save_figure("


def test_importing_the_plots_leaves_the_process_backend_alone():
    code = "import matplotlib; matplotlib.use('svg'); import mtonnx.report.plots; print(matplotlib.get_backend())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "svg"


def test_save_figure_writes_the_png_and_a_kernel_shows_that_same_png_not_a_path(tmp_path):
    from nbclient import NotebookClient

    from mtonnx.report.record import CAPTIONS, FIGURES_DIR

    run_dir = tmp_path / "run"
    cells = [
        "from mtonnx import report\nfrom mtonnx.report import plots",
        f"fig = plots.barh([{{'k': 'a', 'v': 1}}, {{'k': 'b', 'v': 2}}], 'k', 'v', 'two bars')\n"
        f"report.save_figure(fig, {str(run_dir)!r}, 'two_bars', 'Two bars')\n"
        f"report.save_figure(fig, {str(run_dir)!r}, 'again')",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    outputs = notebook.cells[1].outputs
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2, outputs
    assert [o["metadata"]["image/png"].get("alt") for o in images] == ["Two bars", "again"]

    saved = (run_dir / FIGURES_DIR / "two_bars.png").read_bytes()
    assert base64.b64decode(images[0]["data"]["image/png"]) == saved
    assert json.loads((run_dir / FIGURES_DIR / CAPTIONS).read_text()) == {"two_bars": "Two bars"}
    assert [o["data"]["text/plain"] for o in images] == ["Two bars", "again"]
    assert len(outputs) == 2, "nothing but the two figures: no path, no repr"


def _lesson_on_ci_params(tmp_path: Path, models_dir: Path) -> tuple[Path, list[int]]:
    """Lesson 01 with its parameters cell pointed at params/ci.yaml and a temp run: (its directory, the indices of
    its figure cells)."""
    notebook = nbformat.read(REPO / "notebooks" / LESSON, as_version=4)
    parameters = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source = (
        f"params_path = {str(REPO / 'params' / 'ci.yaml')!r}\n"
        f"run_dir = {str(tmp_path / 'run')!r}\nmodels_dir = {str(models_dir)!r}"
    )
    lab = tmp_path / "lab"
    lab.mkdir()
    nbformat.write(notebook, lab / LESSON)
    figures = [i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and FIGURE_CALL in c.source]
    return lab, figures


RUN_ALL = """async () => { const app = window.jupyterapp;
  const panel = app.shell.currentWidget; await panel.sessionContext.ready;
  await app.commands.execute('notebook:run-all-cells'); }"""
STATE = """() => { const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets;
  return {status: kernel ? kernel.status : null,
    pending: cells.filter(c => c.model.type === 'code' && c.model.executionCount === null).length,
    errors: cells.filter(c => c.model.type === 'code' && c.model.outputs.toJSON().some(o => o.output_type === 'error'))
      .length,
    images: cells.map(c => [...c.node.querySelectorAll('.jp-OutputArea-output img')]
      .filter(i => i.complete && i.naturalWidth > 0).length),
    paths: cells.map(c => (c.node.querySelector('.jp-OutputArea') || {innerText: ''}).innerText)
      .map(t => /PosixPath\\(|\\/figures\\/\\S+\\.png/.test(t)) }; }"""


def test_a_lesson_run_in_jupyterlab_shows_an_image_in_every_figure_cell(tmp_path, models_dir, tiny_dir):
    needs_browser()
    from playwright.sync_api import sync_playwright

    from mtonnx.report.graphview import CHROMIUM_ARGS, find_chromium, kill_session

    lab, figures = _lesson_on_ci_params(tmp_path, models_dir)
    assert figures, f"{LESSON} has no figure cell"
    port, token = free_port(), "mtonnx-test"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "MTONNX_PROJECT_ROOT": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={lab}", "--LabApp.expose_app_in_browser=True",
         "--allow-root"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "lab.log", "w"), env=env, start_new_session=True,
    )  # fmt: skip
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=find_chromium(), headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.route(
                "**/*",
                lambda route: route.continue_() if "//127.0.0.1:" in route.request.url else route.abort(),
            )
            deadline = time.monotonic() + 60
            while True:
                try:
                    page.goto(f"http://127.0.0.1:{port}/lab/tree/{LESSON}?token={token}", wait_until="load")
                    break
                except Exception:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(1)
            page.wait_for_function(
                "() => window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                "window.jupyterapp.shell.currentWidget.content", timeout=60_000
            )  # fmt: skip
            page.evaluate(RUN_ALL)
            deadline = time.monotonic() + 300
            while True:
                state = page.evaluate(STATE)
                if state["pending"] == 0 and state["status"] == "idle":
                    break
                assert time.monotonic() < deadline, f"the lesson did not finish in JupyterLab: {state}"
                time.sleep(1)
            page.screenshot(path=str(tmp_path / "lab.png"), full_page=False)
            browser.close()
    finally:
        kill_session(server)
    assert state["errors"] == 0, (tmp_path / "lab.log").read_text()[-2000:]
    assert [state["images"][i] for i in figures] == [1] * len(figures), state["images"]
    assert not [i for i in figures if state["paths"][i]]


def test_an_example_table_shows_right_next_to_wrong_with_the_reference_and_chrf():
    from mtonnx.report.baseline import example_table, showcase_rows
    from mtonnx.scores import showcase

    items = [
        {"en": f"s{i}", "zh": zh, "beam": beam}
        for i, (zh, beam) in enumerate(
            [("我爱你", "我爱你"), ("他很好", "猫在睡"), ("我们走吧", "我们走吧"), ("天气冷", "天气很冷"), ("书", "狗")]
        )
    ]
    # exact matches first (by position), then the farthest, alternating; ties by position
    assert showcase([i["beam"] for i in items], [i["zh"] for i in items], 4) == [0, 4, 2, 1]
    assert showcase(["a"], ["a"], 6) == [0]
    rows = showcase_rows(items, 4)
    table = example_table(items, {"ONNX": [f"out{i}" for i in range(5)]}, rows=None)
    assert list(table.columns) == ["English", "reference", "PyTorch beam", "chrF vs reference", "ONNX"]
    assert list(table["English"]) == [items[r]["en"] for r in showcase_rows(items)]
    assert list(table["chrF vs reference"])[0] == 100.0 and list(table["chrF vs reference"])[1] == 0.0
    assert list(table["ONNX"]) == [f"out{r}" for r in showcase_rows(items)]
    given = example_table(items, {"runtime": ["x", "y", "z", "w"]}, rows=rows)
    assert list(given["English"]) == ["s0", "s4", "s2", "s1"] and list(given["runtime"]) == ["x", "y", "z", "w"]
