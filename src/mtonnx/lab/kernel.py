"""What the runner's headless kernels run before a notebook's first cell (lab.runner).

A library's warning names the file it comes from. Python writes that file's absolute path: where this machine
installed the library (`/home/me/.venv/lib/python3.11/site-packages/torch/...`), which an executed notebook would then
publish. In the runner's kernels a warning names the file by its import path instead (`torch/...`).
"""

from __future__ import annotations

import linecache
import sys
import warnings
from pathlib import Path

SETUP = f"from {__name__} import name_files_by_import_path; name_files_by_import_path()"  # the kernel's exec line


def name_files_by_import_path() -> None:
    """Make every warning of this process name its file by `import_path` (the source line still shown)."""
    shown = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        line = linecache.getline(filename, lineno) if line is None else line
        return shown(message, category, import_path(filename), lineno, line)

    warnings.formatwarning = formatwarning


def import_path(filename: str) -> str:
    """`filename` relative to the deepest directory of sys.path that holds it (torch/nn/modules/sparse.py), or its
    name alone when none does."""
    path = Path(filename)
    roots = [Path(entry) for entry in sys.path if entry and path.is_relative_to(entry)]
    return path.relative_to(max(roots, key=lambda root: len(root.parts))).as_posix() if roots else path.name
