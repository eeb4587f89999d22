"""`mtonnx migrate` on the tiny model: the whole verified path into deploy/, report.html and metrics.json that
`compare` reads; a rerun says what it reuses; Ctrl-C during the variants then a rerun never rebuilds the export; a
gate failed on purpose is one line naming the gate, the number and the threshold; bad input is exit 2."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, cli_env, mtonnx_cmd, run_cli
from mtonnx.runtime import Translator, layout

PARAMS = """
model:
  name: tiny
data:
  hsk_size: 6
  techdocs_size: 2
  calibration_size: 8
export:
  exporter: torchscript
  opset: 17
runtime:
  parity_sentences: 4
generation:
  max_new_tokens: 8
  num_beams: 2
  batch_size: 4
quant:
  recipes: [int8, fp16, fp32-tuned]
  timing_sentences: 4
  speed_repeats: 3
{extra}
"""


def params(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(PARAMS.format(extra=extra))
    return path


def migrate(model: Path, out: Path, params_file: Path, models_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli(
        "migrate",
        "--model",
        str(model),
        "--out",
        str(out),
        "--params",
        str(params_file),
        *extra,
        env=cli_env(models_dir),
        timeout=900,
    )


@pytest.fixture(scope="module")
def migrated(tiny_dir, models_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("migrate")
    done = migrate(tiny_dir, work / "a", params(work, "p"), models_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return work, done


def test_migrate_writes_deploy_its_card_a_report_and_metrics(migrated, tmp_path):
    work, done = migrated
    out = work / "a"
    for path in (layout.DEPLOY, f"{layout.DEPLOY}/{layout.MODEL_CARD}", "report.html", "metrics.json", "env.json"):
        assert (out / path).exists(), path
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["deploy"]["variant"] == metrics["quant"]["recommended"] and metrics["run"]["fingerprint"]
    assert all(v == 1.0 for v in metrics["runtime"]["parity"].values())
    assert (
        "(marian, 0.4M parameters)" in done.stderr and "steps: export, parity, tokens, pipeline, report" in done.stderr
    )
    card = (out / layout.DEPLOY / layout.MODEL_CARD).read_text(encoding="utf-8")
    assert f"fingerprint `{metrics['run']['fingerprint']}`" in card
    source = tmp_path / "in.txt"
    source.write_text("Hello, teacher!\n", encoding="utf-8")
    translated = run_cli("translate", "--model-dir", str(out / layout.DEPLOY), "-i", str(source))
    assert (
        translated.returncode == 0
        and translated.stdout == Translator(out / layout.DEPLOY).translate("Hello, teacher!") + "\n"
    )


def test_a_rerun_reuses_every_finished_step_and_says_so(migrated, tiny_dir, models_dir):
    work, _ = migrated
    again = migrate(tiny_dir, work / "a", params(work, "p"), models_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    for step in ("export", "parity", "tokens", "pipeline", "report"):
        assert f"reused step {step} (finished earlier" in again.stderr, step


def test_ctrl_c_during_the_pipeline_then_a_rerun_does_not_rebuild_the_export(migrated, tiny_dir, models_dir):
    work, _ = migrated
    out = work / "interrupted"
    process = subprocess.Popen(
        mtonnx_cmd("migrate", "--model", str(tiny_dir), "--out", str(out), "--params", str(params(work, "p"))),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env=cli_env(models_dir),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    deadline = time.monotonic() + 600
    for line in process.stderr:  # the pipeline step starts once the tokens step is done
        seen.append(line)
        if "step tokens done" in line or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGINT)  # at once: the tiny model's variants take about a second
    rest = process.communicate(timeout=300)[1]
    assert process.returncode == 130, "".join(seen) + rest
    assert "Traceback" not in rest and "mtonnx: interrupted" in rest
    resumed = migrate(tiny_dir, out, params(work, "p"), models_dir)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for step in ("export", "parity", "tokens"):
        assert f"reused step {step} (finished earlier" in resumed.stderr, step
    assert "step export done" not in resumed.stderr and "step pipeline done" in resumed.stderr, resumed.stderr
    compared = run_cli("compare", str(work / "a"), str(out), "--format", "json")  # two outputs of one commit
    assert compared.returncode == 0, compared.stderr


def test_a_gate_failed_on_purpose_names_the_gate_the_number_and_the_threshold(migrated, tiny_dir, models_dir):
    work, _ = migrated
    out = work / "strict"
    shutil.copytree(work / "a" / "export_manual", out / "export_manual")  # what was built is reused by its key
    strict = params(work, "strict", "  fidelity_min: 1.0").read_text().replace("[int8, fp16, fp32-tuned]", "[int8]")
    (work / "strict.yaml").write_text(strict)
    done = migrate(tiny_dir, out, work / "strict.yaml", models_dir, "--overwrite")  # export_manual is not migrate's
    lines = [line for line in done.stderr.splitlines() if line.startswith("mtonnx: error:")]
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-2000:]
    # fail or inconclusive: which, the tiny random model's int8 tokens on this CPU's kernels decide (8 sentences)
    assert re.search(
        r"gates: no variant besides fp32 passes every gate; the nearest, int8(-mixed)?, is (fail|inconclusive) on the "
        r"fidelity gate: [\d.]+% of sentences identical to fp32, 95 % CI \[",
        lines[0],
    ), lines[0]
    assert "against quant.fidelity_min 100%" in lines[0]
    assert (out / "variants" / "int8").is_dir() and not (out / layout.DEPLOY).exists()  # kept what was built
    assert "reused " in done.stderr and "export_manual (build key" in done.stderr


def test_bad_input_is_one_line_and_exit_2(tiny_dir, models_dir, tmp_path):
    other = tmp_path / "bert"
    shutil.copytree(tiny_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    done = migrate(other, tmp_path / "o", params(tmp_path, "p"), models_dir)
    assert (
        done.returncode == 2 and "model_type 'bert' is not a family mtonnx migrates (marian, m2m_100, t5" in done.stderr
    )
    bad = tmp_path / "eval.tsv"
    bad.write_text("Hello.\t你好。\nno tab here\n", encoding="utf-8")
    done = migrate(tiny_dir, tmp_path / "o", params(tmp_path, "p"), models_dir, "--eval", str(bad))
    assert done.returncode == 2 and "line 2 is not source<TAB>reference" in done.stderr
    unknown = params(tmp_path, "u").read_text().replace("[int8, fp16, fp32-tuned]", "[int9]")
    (tmp_path / "u.yaml").write_text(unknown)
    done = migrate(tiny_dir, tmp_path / "o", tmp_path / "u.yaml", models_dir)
    assert done.returncode == 2 and "quant.recipes: unknown recipe int9" in done.stderr
    assert not (tmp_path / "o").exists(), "a refused migration leaves no --out behind"
    missing = migrate(tmp_path / "no-such-model", tmp_path / "o", params(tmp_path, "p"), models_dir)
    assert missing.returncode == 2 and "does not exist" in missing.stderr and not (tmp_path / "o").exists()


def test_an_out_it_cannot_use_is_one_line_and_a_foreign_directory_needs_overwrite(tiny_dir, models_dir, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cases = {
        str(a_file): "is a file, not a directory",
        "/dev/null": "is a file, not a directory",
        "/proc/mtonnx-out": "cannot create it",
        "/sys/mtonnx-out": "cannot create it",
        str(foreign): "holds files mtonnx migrate did not write",
    }
    for out, message in cases.items():
        done = run_cli("migrate", "--model", str(tiny_dir), "--out", out, env=cli_env(models_dir), timeout=300)
        lines = [line for line in done.stderr.splitlines() if line.startswith("mtonnx: ")]
        assert done.returncode == 2 and "Traceback" not in done.stderr, (out, done.stderr[-2000:])
        assert len(lines) == 1 and message in lines[0], (out, done.stderr[-2000:])
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"] and a_file.read_text() == "x"


def test_a_t5_checkpoint_migrates_and_a_frozen_trace_is_named(models_dir, tmp_path):
    t5 = PARAMS.format(extra="").replace(
        "name: tiny\n", "name: tiny-t5\n  source_prefix: 'translate English to Chinese:'\n"
    )
    traced = params(tmp_path, "traced")
    traced.write_text(t5)
    done = migrate(Path("tiny-t5"), tmp_path / "traced", traced, models_dir)
    lines = [line for line in done.stderr.splitlines() if line.startswith("mtonnx: error:")]
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-2000:]
    assert "parity: max |ONNX - PyTorch|" in lines[0] and "above export.tolerance 0.0001" in lines[0]
    assert "T5's relative position bias was traced at the export sample's lengths" in lines[0]
    exported = params(tmp_path, "exported")  # the prefix given as --source-prefix this time: deploy/ keeps it too
    exported.write_text(
        t5.replace("exporter: torchscript", "exporter: dynamo")
        .replace("opset: 17", "opset: 18")
        .replace("  source_prefix: 'translate English to Chinese:'\n", "")
    )
    done = migrate(
        Path("tiny-t5"), tmp_path / "t5", exported, models_dir, "--source-prefix", "translate English to Chinese:"
    )
    assert done.returncode == 0 and "(t5, 0.4M parameters)" in done.stderr, done.stderr[-3000:]
    deploy = tmp_path / "t5" / layout.DEPLOY
    facts = json.loads((deploy / "deploy.json").read_text())
    assert facts["family"] == "t5" and facts["source_prefix"] == "translate English to Chinese:"
    source = tmp_path / "in.txt"
    source.write_text("Hello, teacher!\n", encoding="utf-8")
    translated = run_cli("translate", "--model-dir", str(deploy), "-i", str(source))
    api = Translator(deploy)  # the Python API reads the deployed prefix as the CLI does
    assert api.source_prefix == "translate English to Chinese:"
    assert translated.returncode == 0 and translated.stdout == api.translate("Hello, teacher!") + "\n"
