"""End to end on the other families: notebooks 01, 02, 03, 05, 06 and 08 on params/tiny-m2m100.yaml and
params/tiny-t5.yaml, every one executed without error, the runtime token-identical with generate for every export
layout (greedy and beam, batch 1 and batched), doctor passing the exports, the family's own pitfalls reproduced and
caught, and the peer benchmark (`mtonnx bench --only peers`) timing CTranslate2 on the family beside the runtime."""

from __future__ import annotations

import json

import nbformat
import pytest

from conftest import cli_env, run_cli
from mtonnx.report.record import flatten
from mtonnx.runtime import families

pytestmark = pytest.mark.e2e
NOTEBOOKS = ("01", "02", "03", "05", "06", "08")


def lab_runs_on(name: str, tmp_path, models_dir) -> None:
    out = tmp_path / "run"
    params = f"params/{name}.yaml"
    done = run_cli(
        "run",
        "--params",
        params,
        "--only",
        ",".join(NOTEBOOKS),
        "--out",
        str(out),
        env=cli_env(models_dir),
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for notebook in sorted((out / "notebooks").glob("*.ipynb")):
        cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
        assert not [o for c in cells for o in c.outputs if o.output_type == "error"], notebook.name
    assert sorted(p.name[:2] for p in (out / "notebooks").glob("*.ipynb")) == list(NOTEBOOKS)
    metrics = flatten(json.loads((out / "metrics.json").read_text()))
    parity = {k: v for k, v in metrics.items() if k.startswith("runtime.parity.")}
    assert len(parity) == 3 * 2 * 2 and set(parity.values()) == {1.0}, parity  # 3 layouts, greedy/beam, b1/batched
    assert metrics["manual_export.parity_pass"] is True and metrics["manual_export.greedy_token_match"] == 1.0
    assert metrics["optimum_export.greedy_token_match"] == metrics["optimum_export.beam_token_match"] == 1.0
    assert metrics["runtime.cached_equals_no_cache"] == 1.0
    assert metrics["doctor.manual.failures"] == 0 and metrics["doctor.optimum.failures"] == 0
    family = families.of_type(json.loads((out / "export_manual" / "config.json").read_text())["model_type"])
    assert family.pitfalls and all(metrics[f"pitfalls.each.{pitfall}"] is True for pitfall in family.pitfalls)
    bench = run_cli(
        "bench", "--params", params, "--only", "peers", "--out", str(out), env=cli_env(models_dir), timeout=900
    )
    assert bench.returncode == 0, bench.stderr[-3000:]
    results = json.loads((out / "bench.json").read_text())["peers"]["results"]
    engines = {r["engine"] for r in results}
    assert {"pytorch-fp32", "mtonnx-fp32", "mtonnx-int8", "ct2-fp32", "ct2-int8"} <= engines, engines
    assert all(r["generated_tokens"] > 0 and r["median_ms"] > 0 for r in results)


class TestM2M100:  # a class each: `make test` (pytest-xdist, --dist loadscope) runs the two families side by side
    def test_the_lab_runs_on_another_family(self, tmp_path, models_dir):
        lab_runs_on("tiny-m2m100", tmp_path, models_dir)


class TestT5:
    def test_the_lab_runs_on_another_family(self, tmp_path, models_dir):
        lab_runs_on("tiny-t5", tmp_path, models_dir)
