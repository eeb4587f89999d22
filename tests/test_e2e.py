"""End to end: the whole pipeline on params/ci.yaml, every notebook executed, the report complete."""

from __future__ import annotations

import json
import subprocess

import nbformat
import pytest

from conftest import REPO, cli_env, mtonnx_cmd
from mtonnx.report.record import flatten
from mtonnx.runtime import layout

pytestmark = pytest.mark.e2e
EXPECTED_METRICS = (
    "inspect.params_total",
    "inspect.bleu_greedy",
    "inspect.bleu_beam",
    "manual_export.greedy_token_match",
    "manual_export.parity_pass",
    "optimum_export.greedy_token_match",
    "optimum_export.beam_token_match",
    "optimum_export.duplicated_mb",
    "graphview.rendered",
    "runtime.greedy_token_match",
    "runtime.beam_token_match",
    "runtime.cache_speedup",
    "runtime.vs_generate_b1",
    "quant.recommended",
    "quant.fp32.size_mb",
    "quant.int8.p50_ms_b1",
    "quant.int8-naive.gated",
    "quant.fp16.bleu",
    "pitfalls.reproduced",
    "doctor.manual.failures",
    "doctor.optimum.failures",
    "bench.ratio.int8_vs_pt_fp32_b1",
    "bench.ratio_per_repetition.int8_vs_ct2_int8_b1.median",
    "bench.rss_mb.mtonnx-int8",
    "bench.rss_mb.ct2-int8",
    "bench.bound_fraction_b1",
)
EXPORTED = layout.HAND_EXPORT
ENV_KEYS = ("python", "packages", "onnxruntime_providers", "cpu", "git", "params", "params_hash")


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory, models_dir):
    out = tmp_path_factory.mktemp("ci-run")
    done = subprocess.run(
        mtonnx_cmd("run", "--params", "params/ci.yaml", "--out", str(out)),
        capture_output=True,
        text=True,
        env=cli_env(models_dir),
        cwd=REPO,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_every_notebook_executed_without_error(ci_run):
    out, done = ci_run
    expected = sorted(p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in (out / "notebooks").glob("*.ipynb")) == expected
    for name in expected:
        notebook = nbformat.read(out / "notebooks" / name, as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        assert all(c.execution_count is not None for c in code), name
        assert not [o for c in code for o in c.outputs if o.output_type == "error"], name
        assert (out / "notebooks" / name).with_suffix(".html").is_file()
        assert f"[{expected.index(name) + 1}/{len(expected)}] {name} ok" in done.stderr


def test_metrics_env_and_index(ci_run):
    out, _ = ci_run
    metrics = flatten(json.loads((out / "metrics.json").read_text()))
    for key in EXPECTED_METRICS:
        assert key in metrics, key
    assert metrics["inspect.params_total"] > 0 and 0 <= metrics["inspect.bleu_beam"] <= 100
    assert metrics["manual_export.greedy_token_match"] == 1.0 and metrics["manual_export.parity_pass"] is True
    for file in EXPORTED:
        assert metrics[f"manual_export.max_abs_diff.{file}"] <= 1e-4
        assert metrics[f"manual_export.dynamo.{file}"] == "ok"
        assert metrics[f"manual_export.size_mb.{file}"] > 0
        assert (out / "export_manual" / file).is_file()
    assert metrics["manual_export.static_axes_error_caught"] is True
    for key in (
        "optimum_export.greedy_token_match",
        "optimum_export.beam_token_match",
        "optimum_export.merged_beam_token_match",
        "runtime.greedy_token_match",
        "runtime.beam_token_match",
        "runtime.cached_equals_no_cache",
    ):
        assert metrics[key] == 1.0, key
    assert metrics["runtime.runtime_imports_torch"] is False
    assert metrics["quant.naive_dequantizes_embedding"] is True
    assert metrics["quant.int8-with-embeddings.size_mb"] < 0.6 * metrics["quant.fp32.size_mb"]
    assert metrics["doctor.manual.failures"] == 0 and metrics["doctor.optimum.failures"] == 0
    assert metrics["doctor.int8.failures"] == 0 and metrics["doctor.int8-naive.failures"] == 1
    assert metrics["pitfalls.reproduced"] >= 12
    assert metrics["quant.recommended"] in {k.split(".")[1] for k in metrics if k.startswith("quant.")}
    assert len(metrics["graphview.rendered"]) == 8 and all(
        (out / p).stat().st_size > 10_000 for p in metrics["graphview.rendered"]
    )
    env = json.loads((out / "env.json").read_text())
    for key in ENV_KEYS:
        assert key in env, key
    assert env["params"]["name"] == "ci" and env["packages"]["torch"].startswith("2.13.0")
    assert "CPUExecutionProvider" in env["onnxruntime_providers"]
    index = (out / "index.html").read_text()
    assert "notebooks/01_inspect_model.html" in index and "inspect.bleu_beam" in index
    assert (
        "figures/inspect_parameters.png" in index and (out / "figures" / "inspect_parameters.png").stat().st_size > 5000
    )
    assert "CC-BY-SA-4.0" in index


def test_baseline_holds_pytorch_tokens_per_sentence(ci_run, tiny):
    out, _ = ci_run
    pad = tiny[1].pad_token_id
    baseline = json.loads((out / "baseline.json").read_text())
    assert len(baseline["items"]) == 6 + 4
    for item in baseline["items"]:
        assert item["greedy_ids"] and item["beam_ids"] and isinstance(item["greedy"], str)
        assert len(item["greedy_ids"]) <= 16 and pad not in item["greedy_ids"]  # bad_words_ids: pad never generated
