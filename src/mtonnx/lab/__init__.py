"""The lab as an application: `context`, the one call that opens a notebook; the runner that executes the numbered
notebooks into a run (its prerequisites, kernel, footprint step and browser drivers); and the publishers of the
documentation site's reference run, quickstart and results page. report/ shows what a run measured; this package
runs it.

Importing this package is light (no torch, papermill or matplotlib): the heavy parts load when called.
"""

from pathlib import Path


def context(params_path: str | Path, run_dir: str | Path, models_dir: str | Path):
    """What every notebook starts from (`context.Context`): params, model directory, session settings, run dirs."""
    from mtonnx.lab.context import Context

    return Context.open(params_path, run_dir, models_dir)


__all__ = ["context"]
