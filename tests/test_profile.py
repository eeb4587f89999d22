"""The profile study: where a generation's time goes, split without changing what it generates."""

from __future__ import annotations

import pytest

from conftest import tuned_variants
from mtonnx.measure.profile import PARTS, PEER, profile
from mtonnx.report.index import profile_rows
from mtonnx.runtime import Translator

SOURCES = [
    "The server restarts every night.",
    "Where is the train station?",
    "Please send the report before Friday, and copy the whole team on the message.",
    "Hi.",
    "The configuration file lists every port the service listens on.",
]


@pytest.fixture(scope="module")
def rows_variant(hand_export, tmp_path_factory):
    variant = tuned_variants(hand_export, tmp_path_factory.mktemp("profile"), ("int8-rows-tuned",))["int8-rows-tuned"]
    tokenizer = Translator(variant).tokenizer
    return variant, [tokenizer.encode(s) for s in SOURCES * 3]


def test_the_parts_add_up_to_the_pass_and_the_counts_hold(rows_variant):
    variant, rows = rows_variant
    split = profile(variant, rows, 4, 2, 12, repeats=2)
    assert set(split["parts_s"]) == set(PARTS) and all(v >= 0 for v in split["parts_s"].values())
    assert min(split["parts_s"][p] for p in ("encoder", "decoder", "reorder", "search")) > 0
    assert sum(split["shares"].values()) == pytest.approx(1.0, abs=0.15)  # medians of parts: near the median total
    assert split["output_row_steps"] <= split["row_steps"] and 0 <= split["beyond_output_share"] < 1
    assert split["encoder_positions"] >= split["source_tokens"] == sum(len(r) for r in rows)
    ops = split["operators"]
    assert sum(ops["shares"].values()) == pytest.approx(1.0, abs=0.01)
    assert 0 < ops["quantization_share"] < 1  # the per-row quantization's operators ran, and were not all the time


def test_profiling_does_not_change_the_tokens(rows_variant, monkeypatch):
    variant, rows = rows_variant
    plain = Translator(variant).generate_sorted(rows, 4, num_beams=2, max_new_tokens=12)
    outputs, original = [], Translator.generate_sorted

    def kept(self, *args, **kwargs):
        outputs.append(original(self, *args, **kwargs))
        return outputs[-1]

    monkeypatch.setattr(Translator, "generate_sorted", kept)
    profile(variant, rows, 4, 2, 12, repeats=1)
    assert len(outputs) == 3 and all(out == plain for out in outputs)  # warm-up, the pass, the profiler's pass


def test_bench_runs_the_profile_study_alone_and_records_declared_keys(tmp_path, models_dir):
    import json

    from conftest import cli_env, run_cli
    from mtonnx.measure import studies
    from mtonnx.report import schema
    from mtonnx.report.record import flatten

    out = tmp_path / "run"
    done = run_cli(
        "bench", "--params", "params/ci.yaml", "--only", "profile", "--out", str(out), env=cli_env(models_dir)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / studies.RESULTS).read_text())["profile"]
    assert set(result) == {f"batch{b}" for b in studies.PROFILE_BATCHES}
    assert all(set(per) == {*studies.PROFILED, PEER} for per in result.values())  # ci.yaml times ct2-int8
    recorded = json.loads((out / "metrics" / "bench.json").read_text())
    keys = [f"bench.{k}" for k in flatten(recorded)]
    assert keys and schema.undeclared(keys) == []
    table = profile_rows(recorded["profile"])
    assert [(r["batch"], r["variant"]) for r in table] == [
        (b, v) for b in studies.PROFILE_BATCHES for v in studies.PROFILED
    ]
    named = [(f"batch{b}", v) for b in studies.PROFILE_BATCHES for v in studies.PROFILED]
    for row, (key, name) in zip(table, named):
        full, peer = result[key][name], result[key][PEER]["seconds"]
        assert row["vs ct2-int8"] == pytest.approx(peer / full["seconds"], abs=1e-3)
        ort = full["parts_s"]["encoder"] + full["parts_s"]["decoder"]
        assert row["ORT alone vs ct2-int8"] == pytest.approx(peer / ort, abs=1e-3)
        assert row["ORT alone vs ct2-int8"] > row["vs ct2-int8"]  # the host parts took some of the time
