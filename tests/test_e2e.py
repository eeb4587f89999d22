"""End to end: the whole pipeline on params/ci.yaml, every notebook executed, the report complete."""

from __future__ import annotations

import json
import shutil
import subprocess

import nbformat
import pytest

from conftest import REPO, cli_env, mtonnx_cmd, needs_browser, run_cli
from mtonnx.report import schema
from mtonnx.report.record import flatten
from mtonnx.runtime import layout
from test_published_paths import machine_paths

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
    "quant.fp32.times_ms_workload",
    "quant.int8-naive.gate",
    "quant.int8.bleu_delta_ci",
    "quant.int8.chrf_delta_ci",
    "quant.int8.p_value",
    "quant.recommended_reason",
    "quant.bleu_signature",
    "inspect.eval_pairs",
    "run.fingerprint",
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
# The notebooks that write model files: the two exports, the variants and deploy/, the web export.
RERUN = ("02", "03", "06", "13")
ENV_KEYS = ("python", "packages", "onnxruntime_providers", "cpu", "git", "params", "params_hash")


def run_ci(out, models_dir, *extra: str) -> subprocess.CompletedProcess:
    done = run_cli("run", "--params", "params/ci.yaml", *extra, "--out", str(out), env=cli_env(models_dir), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory, models_dir):
    out = tmp_path_factory.mktemp("ci-run")
    return out, run_ci(out, models_dir)


@pytest.fixture(scope="module")
def ci_run_again(tmp_path_factory, models_dir, ci_run):
    """The same commit and params run again, into a copy of the first run without its model files: the notebooks
    that write them (RERUN) build them anew, from scratch (the build cache went with them), and time the
    quantization again; the other notebooks only read those files. After the first, as a developer reruns, so
    that `compare` sees timings made under the same load (side by side, the second's timings came out twice the
    first's and compare rightly called it a regression)."""
    first, out = ci_run[0], tmp_path_factory.mktemp("ci-run-again") / "run"
    built = {p.relative_to(first).parts[0] for p in first.rglob("*.onnx")}
    shutil.copytree(first, out, ignore=lambda folder, names: built & set(names) if folder == str(first) else ())
    return out, run_ci(out, models_dir, "--only", ",".join(RERUN))


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


def test_every_saved_figure_is_shown_by_the_cell_that_drew_it_and_no_figure_cell_prints_a_path(ci_run):
    from mtonnx.report.record import FIGURES_DIR, captions

    out, _ = ci_run
    titles = captions(out)
    shown: dict[str, str] = {}
    for path in sorted((out / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code" or "save_figure(" not in cell.source:
                continue
            for output in cell.outputs:
                if "image/png" in output.get("data", {}):
                    shown[output["metadata"]["image/png"]["alt"]] = path.name
                text = output.get("text", "") + output.get("data", {}).get("text/plain", "")
                assert "PosixPath" not in text and ".png" not in text, (path.name, text)
    saved = {titles.get(p.stem, p.stem) for p in (out / FIGURES_DIR).glob("*.png")}
    assert saved and saved == set(shown), saved ^ set(shown)


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


def test_every_recorded_metric_is_declared(ci_run):
    """Each key the notebooks recorded has a kind, unit and direction in report.schema; the runner says so too."""
    out, done = ci_run
    metrics = flatten(json.loads((out / "metrics.json").read_text()))
    assert schema.undeclared(metrics) == []
    assert "not declared in mtonnx/report/schema.py" not in done.stderr


def test_what_a_run_publishes_holds_no_absolute_path_of_this_machine(ci_run, models_dir):
    """Notebooks, report, metrics, env.json and model card name paths relative to the run dir or the project root
    (this run, outside the project, reaches it with `..`): never the run dir's, the checkout's, the temp dir's or
    the libraries' absolute path."""
    out, _ = ci_run
    assert (out / layout.DEPLOY / layout.MODEL_CARD).is_file()
    assert machine_paths(out, models_dir) == []


def test_the_eight_graphs_are_rendered(ci_run):
    needs_browser()
    out, _ = ci_run
    metrics = flatten(json.loads((out / "metrics.json").read_text()))
    assert len(metrics["graphview.rendered"]) == 8 and all(
        (out / p).stat().st_size > 10_000 for p in metrics["graphview.rendered"]
    )


def test_baseline_holds_pytorch_tokens_per_sentence(ci_run, tiny):
    out, _ = ci_run
    pad = tiny[1].pad_token_id
    baseline = json.loads((out / "baseline.json").read_text())
    assert len(baseline["items"]) == 6 + 4
    for item in baseline["items"]:
        assert item["greedy_ids"] and item["beam_ids"] and isinstance(item["greedy"], str)
        assert len(item["greedy_ids"]) <= 16 and pad not in item["greedy_ids"]  # bad_words_ids: pad never generated


def test_two_runs_give_the_same_fingerprint_and_recommendation(ci_run, ci_run_again):
    first, second = (json.loads((out / "metrics.json").read_text()) for out, _ in (ci_run, ci_run_again))
    assert sorted(name[:2] for name in second["run"]["notebook_seconds"]) == list(RERUN)
    inputs = [run["run"]["fingerprint_inputs"] for run in (first, second)]
    differ = {
        k: (inputs[0].get(k), inputs[1].get(k))
        for k in set(inputs[0]) | set(inputs[1])
        if inputs[0].get(k) != inputs[1].get(k)
    }
    assert differ == {} and first["run"]["fingerprint"] == second["run"]["fingerprint"]
    assert first["quant"]["recommended"] == second["quant"]["recommended"]
    assert any(k.startswith("file export_manual/") for k in inputs[0]) and "baseline token ids" in inputs[0]
    assert not any("_ms" in k or "rss" in k for k in inputs[0])
    assert {first["quant"][v]["gate"] for v in ("fp32", "int8", "fp16")} <= {"pass", "fail", "inconclusive"}


def compare_cmd(a, b, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        mtonnx_cmd("compare", str(a), str(b), *extra), capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_compare_of_two_runs_of_the_same_commit_finds_no_regression(ci_run, ci_run_again, tmp_path):
    done = compare_cmd(ci_run[0], ci_run_again[0], "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["regressions"] == [] and result["fingerprints"]["equal"]
    assert [c for c in result["changes"]["quality"]] == []
    speed = [c for c in result["changes"]["speed"] if "spread_a" in c]
    # a peer engine (PyTorch, optimum, CTranslate2) that ran faster or slower is reported, never a regression; the
    # bench's timings in CI have fewer repetitions than a judgement needs (the quantization timings have enough)
    judged = {"within noise", "improvement", "peer faster", "peer slower"}
    assert speed and {c["verdict"] for c in speed} <= judged | {"too few repetitions"}
    assert any(c["key"].startswith("quant ") and c["verdict"] in judged for c in speed)
    markdown = compare_cmd(ci_run[0], ci_run_again[0], "--out", str(tmp_path))
    assert markdown.returncode == 0 and (tmp_path / "compare.md").read_text().startswith("## mtonnx compare: **no")


def test_compare_names_a_lost_bleu_and_a_changed_token(ci_run, ci_run_again, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(ci_run_again[0], copy, ignore=shutil.ignore_patterns("*.onnx", "*.bin", "ct2"))
    metrics = json.loads((copy / "metrics.json").read_text())
    metrics["quant"]["int8"]["bleu"] -= 2
    (copy / "metrics.json").write_text(json.dumps(metrics))
    translations = json.loads((copy / "variants" / layout.TRANSLATIONS).read_text())
    translations["variants"]["fp16"][0] += "的"
    (copy / "variants" / layout.TRANSLATIONS).write_text(json.dumps(translations, ensure_ascii=False))
    done = compare_cmd(ci_run[0], copy)
    assert done.returncode == 1
    regressions = [line for line in done.stderr.splitlines() if line.startswith("mtonnx: regression:")]
    assert any("quant.int8.bleu" in line for line in regressions), done.stderr
    assert any("translations: fp16: 1 of" in line for line in regressions), done.stderr


def test_compare_names_a_timing_three_times_slower_in_every_repetition(ci_run, ci_run_again, tmp_path):
    copy = tmp_path / "b"
    shutil.copytree(ci_run_again[0], copy, ignore=shutil.ignore_patterns("*.onnx", "*.bin", "ct2"))
    metrics = json.loads((copy / "metrics.json").read_text())
    timed = metrics["quant"][metrics["quant"]["recommended"]]  # gated variants are timed; the recommended one is
    key = next(k for k in timed if k.startswith("times_ms_b1"))
    timed[key] = [t * 3 for t in timed[key]]
    (copy / "metrics.json").write_text(json.dumps(metrics))
    done = compare_cmd(ci_run[0], copy)
    line = f"mtonnx: regression: speed: quant {metrics['quant']['recommended']} {key}"
    assert done.returncode == 1 and line in done.stderr, done.stderr


def test_compare_refuses_a_missing_directory_in_one_line(ci_run, tmp_path):
    done = compare_cmd(ci_run[0], tmp_path / "nope")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"mtonnx: error: {tmp_path / 'nope'} is not a directory"
    ]


def test_the_report_and_a_compare_page_in_a_real_browser(ci_run, ci_run_again, tmp_path):
    from mtonnx.lab.browser import inspect_page

    needs_browser()
    out, _ = ci_run
    assert (out / "report.png").stat().st_size > 20_000  # the runner saved the first screen
    page = inspect_page(out / "index.html")
    assert page["broken_images"] == [] and page["broken_links"] == []
    assert page["first_screen"] == {"verdict": True, "variants": True}, page["boxes"]
    assert compare_cmd(ci_run[0], ci_run_again[0], "--format", "html", "--out", str(tmp_path)).returncode == 0
    page = inspect_page(tmp_path / "compare.html", ids=("verdict", "summary"))
    assert page["broken_images"] == [] and page["first_screen"] == {"verdict": True, "summary": True}


def test_migrate_and_the_lab_give_the_same_variants_and_recommendation(ci_run, models_dir, tmp_path):
    """`mtonnx migrate` and `mtonnx run` on the same model and params run one pipeline (pipeline.stages): the same
    variants with the same sizes, gates, fidelity and invariance, the same candidates timed with the same session
    settings on the same objective, and the same recommendation."""
    out = tmp_path / "migrated"
    done = run_cli(
        "migrate",
        "--model",
        "tiny",
        "--out",
        str(out),
        "--params",
        "params/ci.yaml",
        env=cli_env(models_dir),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lab, migrated = (json.loads((run / "metrics.json").read_text())["quant"] for run in (ci_run[0], out))
    same = ("size_mb", "deployable", "lossy", "bleu", "bleu_delta", "gate", "fidelity", "fidelity_gate")
    same += ("batch_invariance", "invariance_gate", "tokens_sha", "finite_outputs")
    variants = [name for name, row in lab.items() if isinstance(row, dict) and "gate" in row]
    assert variants == [name for name, row in migrated.items() if isinstance(row, dict) and "gate" in row]
    assert "int8-mixed" in variants and len(variants) > 5
    differ = {
        (v, k): (lab[v].get(k), migrated[v].get(k))
        for v in variants
        for k in same
        if lab[v].get(k) != migrated[v].get(k)
    }
    assert differ == {}
    for key in ("candidates", "session", "objective", "groups", "sentences", "recommended"):
        assert lab[key] == migrated[key], key
    assert sorted(lab["peers"]) == sorted(migrated["peers"]) and set(lab["candidates"]) < set(variants)
    assert all("times_ms_workload" in lab[v] and "times_ms_workload" in migrated[v] for v in lab["candidates"])
