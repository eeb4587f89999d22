"""Shared fixtures: models built once per test session into a temp cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtonnx.sources import models

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end tests first: under pytest-xdist (`make test`: --dist loadscope, a module or class per
    worker, so that a worker builds a module's fixtures once) the longest work starts first and the short
    modules fill in around it."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable: a module keeps its order


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny_dir(models_dir) -> Path:
    return models.build("tiny", models_dir)[0]


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    return models.load_pretrained(tiny_dir)


def cli_env(models_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for running `python -m mtonnx` in a subprocess with the session's model cache."""
    return {**os.environ, "MTONNX_MODELS_DIR": str(models_dir), "PYTHONUNBUFFERED": "1", **extra}


def mtonnx_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "mtonnx", *args]


def run_cli(
    *args: str, cwd: Path = REPO, timeout: float = 300, text: bool = True, **options
) -> subprocess.CompletedProcess:
    """`python -m mtonnx *args` with its output captured, as text unless `text` is False (options: env, input)."""
    return subprocess.run(mtonnx_cmd(*args), capture_output=True, text=text, cwd=cwd, timeout=timeout, **options)


@pytest.fixture(scope="session")
def hand_export(tiny_dir, tmp_path_factory) -> Path:
    """The tiny model exported by hand (TorchScript exporter: seconds, where torch.export takes ~30 s)."""
    from mtonnx.export.manual import export_manual

    out = tmp_path_factory.mktemp("hand") / "export_manual"
    export_manual(tiny_dir, out, exporter="torchscript")
    return out


@pytest.fixture(scope="session")
def dynamo_export(tiny_dir, tmp_path_factory) -> Path:
    """The tiny model exported with torch.export (the project default; ~30 s), shared by every test that needs it."""
    from mtonnx.export.manual import export_manual

    out = tmp_path_factory.mktemp("dynamo") / "export_manual"
    export_manual(tiny_dir, out, exporter="dynamo", opset=18)
    return out


@pytest.fixture(scope="session")
def hsk_export(tmp_path_factory) -> Path:
    """The trained default model (models/hsk-enzh) exported with torch.export, shared by the tests on real text."""
    from mtonnx.export.manual import export_manual

    out = tmp_path_factory.mktemp("hsk") / "export_manual"
    export_manual(REPO / "models" / "hsk-enzh", out, exporter="dynamo")
    return out


def tuned_variants(export: Path, work: Path, names: tuple[str, ...] = ("fp32-tuned", "int8-tuned")) -> dict[str, str]:
    """The registry's tuned variants (and any other `names`) of an export, built into work/variants: name -> dir."""
    from mtonnx.variants import registry

    built = registry.build(export, Path(work) / "variants", registry.Inputs(), names=names, log=None)
    assert not built.failed, built.failed
    return {name: str(Path(work) / "variants" / name) for name in built.manifests}


@pytest.fixture(scope="session")
def family_model(models_dir):
    """name -> the directory of a built model of another family (tiny-m2m100, tiny-nllb, tiny-t5), built once."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = models.build(name, models_dir)[0]
        return built[name]

    return get


@pytest.fixture(scope="session")
def family_export(family_model, tmp_path_factory):
    """name -> that model exported by hand (TorchScript exporter: seconds), exported once."""
    from mtonnx.export.manual import export_manual

    exported: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in exported:
            exported[name] = tmp_path_factory.mktemp(name) / "export_manual"
            export_manual(family_model(name), exported[name], exporter="torchscript")
        return exported[name]

    return get


@pytest.fixture(scope="session")
def optimum_dir(tiny_dir, tmp_path_factory) -> Path:
    from mtonnx.export.optimum import export_optimum

    out = tmp_path_factory.mktemp("optimum") / "export_optimum"
    export_optimum(tiny_dir, out)
    return out


@pytest.fixture(scope="session")
def hsk_optimum(tmp_path_factory) -> Path:
    """The trained default model (models/hsk-enzh) through optimum's exporter (the merged decoder the web export
    ships), shared by the tests on real text."""
    from mtonnx.export.optimum import export_optimum

    out = tmp_path_factory.mktemp("hsk-optimum") / "export_optimum"
    export_optimum(REPO / "models" / "hsk-enzh", out)
    return out


def needs_node() -> None:
    """Skip, naming the fix, when the JavaScript runtime cannot run here, unless MTONNX_REQUIRE_NODE=1 (.ci/run sets
    it): then it is a failure, so CI always runs the JavaScript checks."""
    from mtonnx.web.node import unavailable

    problem = unavailable()
    if problem is None:
        return
    if os.environ.get("MTONNX_REQUIRE_NODE") == "1":
        pytest.fail(f"MTONNX_REQUIRE_NODE=1 but {problem}", pytrace=False)
    pytest.skip(problem)


def needs_browser(module_level: bool = False) -> None:
    """Skip, naming the fix, when Debian's Chromium is missing, unless MTONNX_REQUIRE_BROWSER=1 (.ci/run sets it):
    then a missing browser is a failure, so CI always renders for real."""
    from mtonnx.report.graphview import find_chromium

    if find_chromium() is not None:
        return
    if os.environ.get("MTONNX_REQUIRE_BROWSER") == "1":
        pytest.fail("MTONNX_REQUIRE_BROWSER=1 but Chromium is not installed: apt-get install chromium", pytrace=False)
    pytest.skip(
        "Chromium is not installed (apt-get install chromium); MTONNX_REQUIRE_BROWSER=1 makes this a failure",
        allow_module_level=module_level,
    )
