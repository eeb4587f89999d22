"""The pipeline: execute the numbered notebooks with papermill into a run dir, then build the report.

A partial run (`--only`) first adds the notebooks the selected ones need that have not run in the run dir
(lab.prerequisites), and says so in one line. For each notebook, in order: inject the parameters (params file,
run dir, models dir), execute it headless, keep the executed notebook (also when it fails) and convert it to HTML.
A notebook runs in the run dir, and every path it is given or records is relative to it (lab.kernel names the
files of warnings likewise): an executed notebook holds no absolute path of the machine that ran it.
Around that:
env.json first, the model resolved once up front (so a missing model is one clear error, not a
failed cell), metrics merged into metrics.json with the run's fingerprint, and index.html written at the
end, even on failure. The kernels run with a fixed PYTHONHASHSEED (unless one is set): optimum's decoder merge
names the initializers it shares in set order, so without it the merged decoder's bytes change from run to run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import relative, write_atomic, write_json
from mtonnx.lab import environment, prerequisites
from mtonnx.lab.finish import finish
from mtonnx.lab.footprint import tidy
from mtonnx.lab.kernel import SETUP as KERNEL_SETUP
from mtonnx.report import schema
from mtonnx.report.record import FIGURES_DIR, METRICS_DIR, flatten, merge_metrics
from mtonnx.sources import models

KERNEL = "mtonnx"


def _logged_kernel(log: Path):
    """A kernel manager whose kernel writes its own stdout and stderr (library warnings, the kernel's tracebacks
    on Ctrl-C) to `log` beside the executed notebook instead of the run's terminal."""
    from jupyter_client import AsyncKernelManager

    class LoggedKernel(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as handle:  # the kernel keeps its own copy of the descriptor
                kw.setdefault("stdout", handle)
                kw.setdefault("stderr", handle)
                return await super()._async_launch_kernel(kernel_cmd, **kw)

    return LoggedKernel


def _kernel_config():
    """The kernel's ZMQ sockets encrypted with CurveZMQ where the kernelspec supports it (ipykernel warns on every
    start otherwise that "the kernel is running over TCP without encryption")."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport_encryption": "auto"}})


class RunFailed(RuntimeError):
    """A run that could not finish; str() names the notebook and cell, or what is missing."""


class RunInterrupted(RuntimeError):
    """A run stopped by Ctrl-C after its report was written."""


def select_only(text: str | None) -> list[str] | None:
    """`--only 01,3` as ["01", "03"]; ValueError when it names no notebook number at all."""
    if text is None:
        return None
    numbers = [n.strip() for n in text.split(",") if n.strip()]
    if not numbers or not all(n.isdigit() for n in numbers):
        raise ValueError(f"--only {text!r}: give notebook numbers separated by commas, e.g. --only 01,03")
    return [n.zfill(2) for n in numbers]


def project_notebooks(params: dict[str, Any]) -> Path:
    """The project's notebooks/ under the params' project root; one clear error when it is not there."""
    folder = Path(params["_root"]) / "notebooks"
    if not folder.is_dir():
        raise RunFailed(
            f"{folder} does not exist: the project root ({params['_root']}) must be the checkout that "
            "holds notebooks/ and models/; set `project_root` in the params file (relative to it) or "
            "$MTONNX_PROJECT_ROOT, or pass --notebooks"
        )
    return folder


def select_notebooks(notebooks_dir: Path, only: list[str] | None = None) -> list[Path]:
    """The numbered notebooks (NN_name.ipynb) in order, optionally only those whose number is in `only`."""
    found = sorted(p for p in notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise RunFailed(f"no numbered notebooks (NN_name.ipynb) in {notebooks_dir}")
    if only is None:
        return found
    numbers = {p.name[:2] for p in found}
    unknown = [n for n in only if n not in numbers]
    if unknown:
        raise RunFailed(f"--only {','.join(unknown)}: no such notebook (have {', '.join(sorted(numbers))})")
    return [p for p in found if p.name[:2] in only]


def check_kernel(name: str) -> None:
    """Fail early, with the fix, when the Jupyter kernel papermill needs is not registered."""
    from jupyter_client.kernelspec import KernelSpecManager

    if name not in KernelSpecManager().find_kernel_specs():
        raise RunFailed(
            f"Jupyter kernel '{name}' is not registered: run `make install` "
            f"(or `python -m ipykernel install --sys-prefix --name {name}`)"
        )


def run(
    params: dict[str, Any],
    out_dir: str | Path,
    only: list[str] | None = None,
    notebooks_dir: str | Path | None = None,
    models_dir: str | Path | None = None,
    kernel: str = KERNEL,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Execute the notebooks and write the report; raises RunFailed naming the failing notebook and cell."""
    out_dir = Path(out_dir).resolve()
    models_dir = Path(models_dir).resolve() if models_dir else models.default_models_dir()
    folder = Path(notebooks_dir) if notebooks_dir else project_notebooks(params)
    notebooks = select_notebooks(folder, only)
    check_kernel(kernel)
    if only is None:  # a full run starts clean; a partial one keeps the other notebooks' results
        for stale in ("notebooks", METRICS_DIR, FIGURES_DIR):
            shutil.rmtree(out_dir / stale, ignore_errors=True)
    try:
        notebooks, added = prerequisites.plan(notebooks, select_notebooks(folder), out_dir)
    except prerequisites.PrerequisiteError as err:
        raise RunFailed(str(err)) from None
    if added:
        log(f"not yet run in {out_dir}, needed first: {', '.join(p.name for p in added)}")
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    env = environment.collect(params)
    write_json(out_dir / "env.json", env)

    model = models.resolve(params["model"], models_dir, params["_root"])
    log(f"model {model['name']}: {model['dir']} ({'cached' if model['cached'] else 'built'}, {model['seconds']} s)")

    os.environ.setdefault("PYTHONHASHSEED", "0")  # inherited by the kernels: reproducible set and dict order
    parameters = {  # relative to the run dir, the notebooks' working directory
        "params_path": relative(params["_file"], out_dir),
        "run_dir": ".",
        "models_dir": relative(models_dir, out_dir),
        "interactive": False,
    }
    results: list[dict[str, Any]] = []
    interrupted = False
    for i, notebook in enumerate(notebooks, 1):
        log(f"[{i}/{len(notebooks)}] {notebook.name} ...")
        start = time.perf_counter()
        try:
            result = execute(notebook, out_dir, parameters, kernel)
        except KeyboardInterrupt:  # Ctrl-C: the report is still written, marked interrupted
            # The abandoned nbclient task ends with DeadKernelError (the kernel got the same SIGINT) and nobody
            # awaits it: asyncio would print "Task exception was never retrieved" and its traceback.
            logging.getLogger("asyncio").setLevel(logging.CRITICAL)
            result = {
                "name": notebook.stem,
                "status": "interrupted",
                "seconds": round(time.perf_counter() - start, 1),
                "error": "interrupted (Ctrl-C)",
                "path": f"notebooks/{notebook.name}",
                "html": None,
            }
            interrupted = True
        results.append(result)
        log(f"[{i}/{len(notebooks)}] {notebook.name} {result['status']} in {result['seconds']:.1f} s")
        if result["status"] != "ok":
            break

    status = "interrupted" if interrupted else "ok" if all(r["status"] == "ok" for r in results) else "failed"
    merged = merge_metrics(out_dir)
    undeclared = schema.undeclared(flatten(merged))
    if undeclared:
        log(schema.missing_line(undeclared))
    footprint = None
    if status == "ok":  # a failed or interrupted run keeps everything it built, for a look at what went wrong
        recommended = merged.get("quant", {}).get("recommended")
        footprint = tidy(out_dir, params["quant"]["keep"], recommended, log)
    seconds = {"notebook_seconds": {r["name"]: r["seconds"] for r in results}}  # what the report lists, for the docs
    _, index = finish(out_dir, env, results, status, {**seconds, **({"footprint": footprint} if footprint else {})})
    log(f"report: {index}")
    if interrupted:
        raise RunInterrupted(
            f"{results[-1]['name']}.ipynb was interrupted; the report is written, marked interrupted: {index}"
        )
    screenshot(index, log)
    if status != "ok":
        failed = results[-1]
        kept = out_dir / failed["path"]
        raise RunFailed(f"{failed['name']}.ipynb {failed['error']}; partly executed notebook kept at {kept}")
    return {"status": status, "out_dir": str(out_dir), "index": str(index), "notebooks": results, "model": model}


def execute(notebook: Path, out_dir: Path, parameters: dict[str, Any], kernel: str) -> dict[str, Any]:
    """Run one notebook with papermill into out_dir/notebooks, in out_dir, and convert it to HTML; the result names
    the executed notebook and its HTML relative to out_dir."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    executed = out_dir / "notebooks" / notebook.name
    source, target = relative(notebook, out_dir), relative(executed, out_dir)  # what papermill records
    declared = papermill.inspect_notebook(str(notebook))  # inject only what the parameters cell declares
    start = time.perf_counter()
    error = None
    try:
        with contextlib.chdir(out_dir):  # papermill reads and writes relative paths from the current directory
            papermill.execute_notebook(
                source,
                target,
                parameters={k: v for k, v in parameters.items() if k in declared},
                kernel_name=kernel,
                config=_kernel_config(),
                kernel_manager_class=_logged_kernel(executed.with_suffix(".kernel.log")),
                extra_arguments=[f"--IPKernelApp.exec_lines={KERNEL_SETUP}"],
                cwd=str(out_dir),
                progress_bar=sys.stderr.isatty(),
                log_output=False,
            )
    except PapermillExecutionError as err:
        first_line = _cell_source(executed, err.exec_count).strip().splitlines()
        where = f"cell In[{err.exec_count}]" + (f" (`{first_line[0][:80]}`)" if first_line else "")
        error = f"failed at {where}: {err.ename}: {err.evalue}"
    except Exception as err:  # kernel died, bad notebook JSON, ...: still reported, never a bare traceback
        error = f"could not be executed: {type(err).__name__}: {err}"
    seconds = time.perf_counter() - start
    html = _to_html(executed) if executed.is_file() else None
    return {
        "name": notebook.stem,
        "status": "ok" if error is None else "failed",
        "seconds": round(seconds, 1),
        "error": error,
        "path": target,
        "html": relative(html, out_dir) if html else None,
    }


def _cell_source(notebook: Path, exec_count: int | None) -> str:
    """The source of the executed cell shown as In[exec_count] (papermill adds cells, so not by index)."""
    import nbformat

    try:
        cells = nbformat.read(str(notebook), as_version=4).cells
    except (OSError, ValueError):
        return ""
    return next((c.source for c in cells if c.get("execution_count") == exec_count), "")


def _to_html(notebook: Path) -> Path:
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_filename(str(notebook))
    return write_atomic(notebook.with_suffix(".html"), body)


def screenshot(index: Path, log: Callable[[str], None]) -> None:
    """report.png beside index.html: its first screen in Chromium (skipped, with a line, without Chromium)."""
    from mtonnx.lab.browser import inspect_page
    from mtonnx.report.graphview import GraphViewError, find_chromium

    if find_chromium() is None:
        log("report.png not written: Chromium is not installed (Debian: apt-get install chromium)")
        return
    try:
        page = inspect_page(index, screenshot=index.with_name("report.png"))
    except GraphViewError as err:
        log(f"report.png not written: {err}")
        return
    problems = page["broken_images"] + page["broken_links"]
    log(f"report.png: {index.with_name('report.png')}" + (f" (broken: {', '.join(problems)})" if problems else ""))
