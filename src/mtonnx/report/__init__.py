"""Presentation of a run: the metrics a notebook records, plots, graph views, the report and `compare`. Writing
files and environment info are the foundation's (mtonnx.foundation); running the notebooks is the lab's
(mtonnx.lab); this package only shows what the layers below it measured.

Importing this package is light (no torch, papermill or matplotlib): the heavy parts load when called.
"""

from pathlib import Path
from typing import Any

from mtonnx.foundation.files import relative, staged_dir, write_atomic, write_json
from mtonnx.report.record import record, recorded, save_figure


def run_path(run_dir: str | Path, params: dict[str, Any]) -> str:
    """A run directory as a user types it at the project root: relative to it (outputs/default; ../runs/x for one
    outside it), never the machine's absolute path."""
    return relative(Path(run_dir).resolve(), Path(params["_root"]).resolve())


__all__ = ["run_path", "record", "recorded", "save_figure", "staged_dir", "write_atomic", "write_json"]
