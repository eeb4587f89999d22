"""The declared metrics schema: a key it does not declare is caught, and the fingerprint, `compare` and the report
judge each key by the kind and direction declared for it."""

from __future__ import annotations

import copy
import json
import re

import pytest

from mtonnx.report import compare, index, schema
from mtonnx.report.fingerprint import fingerprint
from mtonnx.report.record import flatten, record


def metrics() -> dict:
    """A run's metrics with a key of every kind, as the notebooks record them."""
    return {
        "inspect": {"bleu_beam": 9.1, "params_total": 6_000_000, "generate_seconds_beam": 30.2},
        "manual_export": {"size_mb": {"encoder_model.onnx": 13.8}, "max_abs_diff": {"encoder_model.onnx": 1e-6}},
        "runtime": {"cache_speedup": 3.1, "runtime_imports_torch": False, "parity": {"hand export, greedy": 1.0}},
        "quant": {
            "recommended": "int8",
            "int8": {
                "gate": "pass",
                "fidelity_gate": "pass",
                "fidelity": {"same_as_fp32": 0.9, "same_as_fp32_ci": [0.85, 0.95]},
                "tokens_sha": "0123abcd",
                "size_mb": 4.0,
                "rss_mb": 80.0,
                "workload_ms": 120.0,
                "times_ms_workload": [119.0, 120.0, 121.0],
            },
        },
        "bench": {"rss_mb": {"mtonnx-int8": 73.4}, "ratio": {"int8_vs_ct2_int8_b1": 1.4}},
        "pitfalls": {"reproduced": 13, "each": {"no cache": True, "static axes": True}},
        "doctor": {"int8": {"failures": 0, "warnings": 2}},
        "serve": {"c16": {"p99_ms": 80.0, "sentences_per_s": 150.0}, "errors": 0},
    }


def test_every_key_of_every_kind_is_declared_with_its_kind():
    flat = flatten(metrics())
    assert schema.undeclared(flat) == []
    kinds = {key: schema.declared(key).kind for key in flat}
    assert kinds["quant.int8.workload_ms"] == kinds["serve.c16.p99_ms"] == schema.TIMING
    assert kinds["quant.int8.rss_mb"] == kinds["bench.rss_mb.mtonnx-int8"] == schema.MEMORY
    assert kinds["manual_export.size_mb.encoder_model.onnx"] == schema.SIZE  # `**` spans the file name's dot
    assert kinds["quant.int8.fidelity.same_as_fp32"] == kinds["doctor.int8.failures"] == schema.QUALITY
    assert kinds["quant.recommended"] == kinds["inspect.params_total"] == schema.IDENTITY
    assert {m.kind for m in schema.METRICS} == set(schema.KINDS)


def test_an_undeclared_key_is_named_and_record_warns_but_saves_it(tmp_path):
    run = metrics()
    run["quant"]["int8"]["latency_new_ms"] = 3.0
    run["sevre"] = {"c1": {"p50_ms": 1.0}}  # a misspelt section
    assert schema.undeclared(flatten(run)) == ["quant.int8.latency_new_ms", "sevre.c1.p50_ms"]
    with pytest.warns(schema.UndeclaredMetricWarning, match=r"1 metric\(s\) not declared.*quant\.int8\.latency_new_ms"):
        record(tmp_path, "quant", run["quant"])
    assert json.loads((tmp_path / "metrics" / "quant.json").read_text())["int8"]["latency_new_ms"] == 3.0


def test_star_is_one_part_and_double_star_spans_dots():
    assert schema.declared("quant.int8.size_mb").pattern == "quant.*.size_mb"
    assert schema.declared("quant.groups.lm_head.size_mb") is None  # `*` never crosses a dot
    assert schema.declared("tuning.memory_ablation.+ weights in one mapped file").kind == schema.MEMORY


@pytest.mark.parametrize("metric", schema.METRICS, ids=lambda m: m.pattern)
def test_no_declaration_is_hidden_behind_an_earlier_one(metric):
    """A key made from each pattern resolves to that pattern: no earlier, more general one shadows it."""
    sample = re.sub(r"\*", "x", metric.pattern.replace("**", "x.y"))
    assert schema.declared(sample) is metric, (sample, schema.declared(sample))


def test_the_fingerprint_hashes_what_a_rerun_reproduces(tmp_path):
    base = fingerprint(tmp_path, metrics())
    slower = metrics()
    slower["quant"]["int8"].update(workload_ms=240.0, times_ms_workload=[238.0, 240.0, 242.0], rss_mb=95.0)
    slower["serve"]["c16"]["p99_ms"] = 160.0
    slower["pitfalls"]["each"]["no cache"] = False  # read off notebook 05's timing: not hashed
    assert fingerprint(tmp_path, slower)["fingerprint"] == base["fingerprint"]
    changed = metrics()
    changed["quant"]["int8"]["tokens_sha"] = "ffff0000"
    assert fingerprint(tmp_path, changed)["fingerprint"] != base["fingerprint"]
    undeclared = metrics()
    undeclared["inspect"]["new_count"] = 1  # not declared: hashed, so a reviewer sees it among the inputs
    assert "metric inspect.new_count" in fingerprint(tmp_path, undeclared)["fingerprint_inputs"]
    assert not any("_ms" in key or "rss" in key for key in base["fingerprint_inputs"])


def run(m: dict) -> dict:
    return {"dir": "run", "metrics": m, "env": {"params": {"model": {"name": "tiny"}}}, "translations": {}}


def test_compare_of_a_run_with_itself_changes_nothing_in_any_kind():
    result = compare.compare(run(metrics()), run(metrics()))
    assert {kind: len(items) for kind, items in result["changes"].items()} == dict.fromkeys(result["changes"], 0)
    assert all(row["changed"] == 0 for row in compare.summary_rows(result))


def test_compare_judges_each_key_by_its_declared_direction():
    b = copy.deepcopy(metrics())
    b["quant"]["int8"].update(gate="inconclusive", tokens_sha="ffff0000", size_mb=2.0, workload_ms=150.0)
    b["quant"]["int8"]["fidelity"]["same_as_fp32"] = 0.8
    b["quant"]["int8"]["fidelity"]["same_as_fp32_ci"] = [0.7, 0.9]  # an interval has no direction
    b["doctor"]["int8"]["warnings"] = 3
    b["runtime"]["runtime_imports_torch"] = True
    b["inspect"]["params_total"] = 7_000_000
    result = compare.compare(run(metrics()), run(b))
    verdicts = {c["key"]: (c["kind"], c["verdict"]) for kind in result["changes"] for c in result["changes"][kind]}
    assert verdicts == {
        "quant.int8.gate": ("quality", "regression"),
        "quant.int8.tokens_sha": ("quality", "regression"),
        "quant.int8.fidelity.same_as_fp32": ("quality", "regression"),
        "quant.int8.fidelity.same_as_fp32_ci": ("quality", "changed"),
        "doctor.int8.warnings": ("quality", "regression"),
        "runtime.runtime_imports_torch": ("quality", "regression"),
        "quant.int8.size_mb": ("size", "improvement"),
        "quant.int8.workload_ms": ("speed", "single measurement"),
        "inspect.params_total": ("other", "changed"),
    }


def test_the_report_lists_each_metric_with_its_unit_and_kind():
    rows = {r["key"]: r for r in index.metric_rows({**metrics(), "new": {"thing": 1}})}
    assert (rows["quant.int8.workload_ms"]["unit"], rows["quant.int8.workload_ms"]["kind"]) == ("ms", "timing")
    assert rows["quant.int8.workload_ms"]["better"] == "lower"
    assert rows["new.thing"]["kind"] == "undeclared"
