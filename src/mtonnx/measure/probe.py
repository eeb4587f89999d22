"""Seconds and resident memory of running some code (imports, loading a model) in a fresh interpreter.

The resident memory is also split by kind (psutil's memory maps, Linux only), so a gap between two engines reads as
what it is: `libraries` (the pages of shared libraries and the interpreter that were read: code, mostly), `anonymous`
(the heap and mmapped allocations: packed weights, tensors, Python objects) and `files` (other mapped files that
were read: a variant's weights.bin).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

_PROBE = """
import ast, json, os, sys, time, psutil
def _memory():
    rss = psutil.Process().memory_info().rss  # before the memory maps' own objects
    kinds = {{"libraries": 0, "anonymous": 0, "files": 0}}
    try:
        for m in psutil.Process().memory_maps(grouped=True):
            library = ".so" in m.path.rsplit("/", 1)[-1] or m.path == os.path.realpath(sys.executable)
            kinds["anonymous"] += m.anonymous
            kinds["libraries" if library else "files"] += (m.rss - m.anonymous) if m.path.startswith("/") else 0
    except (AttributeError, NotImplementedError, psutil.Error):  # no /proc/self/smaps (not Linux)
        kinds = None
    return {{"rss_mb": rss / 2**20, "kinds_mb": kinds and {{k: v / 2**20 for k, v in kinds.items()}}}}
_marks = {{}}
def mark(name):  # the code may call it to read the memory at a point before its end
    _marks[name] = _memory()
tree = ast.parse({code!r})
if tree.body and isinstance(tree.body[-1], ast.Expr):  # keep the final expression's value alive
    tree.body[-1] = ast.Assign(targets=[ast.Name("_kept", ast.Store())], value=tree.body[-1].value)
    ast.fix_missing_locations(tree)
start = time.perf_counter()
exec(compile(tree, "<probe>", "exec"))
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, **_memory(), "marks": _marks,
                  "torch_imported": "torch" in sys.modules, "transformers_imported": "transformers" in sys.modules}}))
"""


def import_cost(code: str, repeats: int = 3) -> dict[str, Any]:
    """Seconds and resident memory to run `code` (imports + loading) in a fresh interpreter; median of repeats.

    The value of a final expression (`Translator(...)`) stays alive until the memory is read: freed first, it
    would undercount what the loaded object holds. `code` may call `mark(name)` to read the memory at that point
    too: `marks` holds each such reading, so one process measures a load and what a run adds after it.
    """
    runs = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", _PROBE.format(code=code)], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        "seconds": round(statistics.median(r["seconds"] for r in runs), 3),
        **_median_memory(runs),
        "marks": {name: _median_memory([r["marks"][name] for r in runs]) for name in runs[0]["marks"]},
        "torch_imported": runs[0]["torch_imported"],
        "transformers_imported": runs[0]["transformers_imported"],
    }


def _median_memory(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The median resident memory of `readings` (the probe's), in all and by kind (None where the platform has none)."""
    kinds = readings[0]["kinds_mb"]
    return {
        "rss_mb": round(statistics.median(r["rss_mb"] for r in readings), 1),
        "rss_kinds_mb": kinds
        and {kind: round(statistics.median(r["kinds_mb"][kind] for r in readings), 1) for kind in kinds},
    }
