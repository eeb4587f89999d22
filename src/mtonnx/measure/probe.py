"""Seconds and resident memory of running some code (imports, loading a model) in a fresh interpreter."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

_PROBE = """
import ast, json, time, psutil
tree = ast.parse({code!r})
if tree.body and isinstance(tree.body[-1], ast.Expr):  # keep the final expression's value alive
    tree.body[-1] = ast.Assign(targets=[ast.Name("_kept", ast.Store())], value=tree.body[-1].value)
    ast.fix_missing_locations(tree)
start = time.perf_counter()
exec(compile(tree, "<probe>", "exec"))
seconds = time.perf_counter() - start
import sys
print(json.dumps({{"seconds": seconds, "rss_mb": psutil.Process().memory_info().rss / 2**20,
                  "torch_imported": "torch" in sys.modules, "transformers_imported": "transformers" in sys.modules}}))
"""


def import_cost(code: str, repeats: int = 3) -> dict[str, Any]:
    """Seconds and resident memory to run `code` (imports + loading) in a fresh interpreter; median of repeats.

    The value of a final expression (`Translator(...)`) stays alive until the memory is read: freed first, it
    would undercount what the loaded object holds.
    """
    runs = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", _PROBE.format(code=code)], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {
        "seconds": round(statistics.median(r["seconds"] for r in runs), 3),
        "rss_mb": round(statistics.median(r["rss_mb"] for r in runs), 1),
        "torch_imported": runs[0]["torch_imported"],
        "transformers_imported": runs[0]["transformers_imported"],
    }
