"""The import contracts ([tool.importlinter] in pyproject.toml) are real: each one fails on a deliberate violation.

Each case copies the package, adds one module that breaks one contract, and runs lint-imports on the copy with the
project's own configuration: that contract must be reported broken, naming the probe's import.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

CONTRACTS = re.findall(
    r'^\[\[tool\.importlinter\.contracts\]\]\nname = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M
)
# contract name -> (the probe module's path in the package, its one import)
VIOLATIONS = {
    "Layers follow the flow": ("serve/_probe.py", "import mtonnx.scale"),  # independent siblings
    "report/ is presentation: it shows what a run measured and builds or measures nothing": (
        "report/_probe.py",
        "import mtonnx.measure",
    ),
    "Only the CLI, the lab and migrate show a run": ("scale/_probe.py", "import mtonnx.report"),
    "foundation/ imports only the standard library": ("foundation/_probe.py", "import numpy"),
    "No import cycles among the modules of a package": ("runtime/_probe.py", "import mtonnx.sources"),
    "The deployable runtime imports no lab library": ("runtime/_probe.py", "import yaml"),
    "The service and batch translation import no training library": ("serve/_probe.py", "import torch"),
}


def lint_imports(root: Path) -> str:
    """lint-imports on the package under root/src, with the project's configuration; its output."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "src"), "COLUMNS": "300"},
        timeout=300,
    )
    return done.stdout + done.stderr


def test_every_contract_has_a_violation_to_prove_it():
    assert sorted(VIOLATIONS) == sorted(CONTRACTS)


@pytest.mark.parametrize("contract", CONTRACTS)
def test_a_contract_fails_on_a_deliberate_violation(contract, tmp_path):
    shutil.copytree(REPO / "src" / "mtonnx", tmp_path / "src" / "mtonnx", ignore=shutil.ignore_patterns("__pycache__"))
    clean = lint_imports(tmp_path)
    assert f"{contract} KEPT" in clean, clean[-3000:]
    module, statement = VIOLATIONS[contract]
    (tmp_path / "src" / "mtonnx" / module).write_text(statement + "\n", encoding="utf-8")
    broken = lint_imports(tmp_path)
    probe = "mtonnx." + module.removesuffix(".py").replace("/", ".")
    assert f"{contract} BROKEN" in broken and probe in broken, broken[-3000:]
