"""The peer benchmark harness on the tiny model, one repetition: structure and forced lengths, not speed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import REPO
from mtonnx import artefacts, data, engines
from mtonnx.measure import benchmark, peers, probe, search_graph
from mtonnx.params import ENGINES, load
from mtonnx.report.fingerprint import fingerprint
from mtonnx.runtime import MarianSpmTokenizer


@pytest.fixture(scope="module")
def paths(tiny_dir, tmp_path_factory):
    return peers.prepare(tiny_dir, tmp_path_factory.mktemp("peers"), exporter="torchscript")


def test_every_engine_generates_exactly_the_forced_length(paths):
    tokenizer = MarianSpmTokenizer(paths.fp32_export)
    rows = [tokenizer.encode(p.en) for p in data.eval_set({"hsk_size": 3, "techdocs_size": 0, "eval_split": "test"})]
    configs = [peers.Config(1, 1, 1, 6), peers.Config(3, 2, 1, 5)]
    results = peers.measure_engines(list(ENGINES), paths, configs, rows, warmup=0, repeats=1)
    assert {(r["engine"], r["config"]) for r in results} == {(e, c.name) for e in ENGINES for c in configs}
    for r in results:
        assert r["generated_tokens"] == r["batch"] * r["tokens"], r  # eos suppressed until the forced length
        assert r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["repeats"] == 1 and len(r["times_ms"]) == 1
    assert all(r["speedup_vs_pytorch_fp32"] == 1.0 for r in results if r["engine"] == "pytorch-fp32")


def test_timing_another_variant_beside_the_peers_is_one_engine_entry(paths, monkeypatch):
    """An engine of kind mtonnx names a recipe of the variant registry: the harness loads, forces and times it with
    nothing else to change (the entry would also make `prepare` build it: peers.PEER_VARIANTS)."""
    entry = engines.Engine("mtonnx-int8-rows", "mtonnx int8-rows-tuned", "mtonnx", "int8", "int8-rows-tuned")
    monkeypatch.setitem(engines.BY_NAME, entry.name, entry)
    artefacts.build(paths.fp32_export, paths.variants, [entry.variant], required=True)
    tokenizer = MarianSpmTokenizer(paths.fp32_export)
    results = peers.run_configs(
        [entry.name, "ct2-int8"], paths, [peers.Config(2, 2, 1, 5)], [tokenizer.encode("Hello, teacher!")], 0, 1
    )
    assert {r["engine"]: r["generated_tokens"] for r in results} == {entry.name: 10, "ct2-int8": 10}
    assert peers.Engine(entry.name, paths, 1).model.dir.name == "int8-rows-tuned"
    assert {e.variant for e in engines.ENGINES if e.variant} - set(peers.PEER_VARIANTS) == {"int8-tuned-shortlist"}


def test_multi_thread_configs_run_in_separate_processes(paths):
    tokenizer = MarianSpmTokenizer(paths.fp32_export)
    rows = [tokenizer.encode("Hello, teacher!")]
    results = peers.measure_engines(
        ["mtonnx-int8", "ct2-int8"], paths, [peers.Config(1, 1, 2, 4)], rows, warmup=0, repeats=1
    )
    assert [r["engine"] for r in results] == ["mtonnx-int8", "ct2-int8"]
    assert all(r["threads"] == 2 and r["generated_tokens"] == 4 for r in results)


def test_ratios_and_the_bound(tiny_dir):
    results = [
        {"engine": e, "config": peers.Config(b, k, 1, 32).name, "median_ms": ms}
        for e, b, k, ms in (
            ("pytorch-fp32", 1, 1, 400.0),
            ("mtonnx-int8", 1, 1, 100.0),
            ("ct2-int8", 1, 1, 125.0),
            ("optimum-fp32", 1, 1, 300.0),
            ("mtonnx-fp32", 1, 1, 250.0),
            ("ct2-int8", 8, 4, 900.0),
            ("mtonnx-int8", 8, 4, 1000.0),
        )
    ]
    ratios = benchmark.ratios(results, 32)
    assert ratios["int8_vs_pt_fp32_b1"] == 4.0 and ratios["int8_vs_ct2_int8_b1"] == 1.25
    assert ratios["fp32_vs_optimum_fp32_b1"] == 1.2 and ratios["int8_vs_pt_fp32_b8"] is None
    assert ratios["int8_vs_ct2_int8_b8_beam4"] == 0.9 and ratios["int8_vs_ct2_int8_b1_beam4"] is None
    assert set(ratios) == set(benchmark.TARGET_OF)
    assert set(benchmark.paired_ratios(results, 32).values()) == {None}  # no per-repetition times: no paired ratio
    bound = benchmark.bytes_per_token(tiny_dir)
    assert bound["weights_per_token"] == bound["decoder_weights"] + bound["lm_head_weights"]
    config = json.loads((tiny_dir / "config.json").read_text())
    assert bound["lm_head_weights"] == config["vocab_size"] * config["d_model"]


def test_paired_ratios_divide_repetition_by_repetition():
    config = peers.Config(1, 1, 1, 32).name
    results = [
        {"engine": "ct2-int8", "config": config, "median_ms": 200.0, "times_ms": [100.0, 200.0, 400.0]},
        {"engine": "mtonnx-int8", "config": config, "median_ms": 200.0, "times_ms": [80.0, 200.0, 200.0]},
    ]
    assert benchmark.ratios(results, 32)["int8_vs_ct2_int8_b1"] == 1.0  # equal medians ...
    paired = benchmark.paired_ratios(results, 32)  # ... but faster in every repetition
    assert paired["int8_vs_ct2_int8_b1"] == {"median": 1.25, "min": 1.0, "max": 2.0}
    assert paired["int8_vs_ct2_int8_b8"] is None


def test_memory_probe_counts_what_the_loaded_object_holds_by_kind(tmp_path):
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"\1" * (64 << 20))
    read = (
        f"import mmap\nfile = open({str(weights)!r}, 'rb')\n"
        "mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "sum(mapped[i] for i in range(0, len(mapped), 4096))\nmapped"
    )
    codes = {
        "empty": "None",
        "held": "bytearray(300 * 2**20)",  # a final expression, never bound: kept alive until memory is read
        "read": read,
        "imported": "import onnxruntime",
    }
    probed = {name: probe.import_cost(code, repeats=1) for name, code in codes.items()}
    for p in probed.values():
        assert abs(sum(p["rss_kinds_mb"].values()) - p["rss_mb"]) < 1.0, p
    grew = {
        name: {kind: p["rss_kinds_mb"][kind] - probed["empty"]["rss_kinds_mb"][kind] for kind in p["rss_kinds_mb"]}
        for name, p in probed.items()
    }
    assert probed["held"]["rss_mb"] - probed["empty"]["rss_mb"] >= 290
    assert grew["held"]["anonymous"] >= 290 and abs(grew["held"]["libraries"]) < 1, grew
    assert grew["read"]["files"] >= 63 and grew["read"]["anonymous"] < 8, grew
    assert grew["imported"]["libraries"] > 5, grew  # onnxruntime's shared library, read at import


def test_corpus_runs_translate_every_sentence_at_its_own_length(paths):
    tokenizer = MarianSpmTokenizer(paths.fp32_export)
    rows = [tokenizer.encode(p.en) for p in data.eval_set({"hsk_size": 5, "techdocs_size": 2, "eval_split": "test"})]
    config = peers.Config(3, 2, 1, 6, corpus=True)
    results = peers.measure_engines(["mtonnx-int8", "ct2-int8"], paths, [config], rows, warmup=0, repeats=2)
    assert [r["config"] for r in results] == ["corpus_b3_beam2_t1_n6"] * 2
    for r in results:
        assert 0 < r["generated_tokens"] <= len(rows) * 6, r  # at most max_new_tokens each, eos not counted
        assert r["sentences_per_s"] == round(len(rows) / (r["median_ms"] / 1000), 2)
    summary = benchmark.corpus_summary(results, 1.2)
    assert set(summary["engines"]) == {"mtonnx-int8", "ct2-int8"} and list(summary["ratio"]) == [
        "corpus_vs_ct2_int8_t1"
    ]
    ours, ct2 = results
    assert summary["ratio"]["corpus_vs_ct2_int8_t1"] == round(ct2["median_ms"] / ours["median_ms"], 2)
    assert summary["targets"]["corpus_vs_ct2_int8_t1"] in ("met", "missed", "within noise")


def test_the_search_graph_is_compared_for_tokens_and_timed_beside_the_runtime(paths):
    tokenizer = MarianSpmTokenizer(paths.fp32_export)
    rows = [tokenizer.encode(p.en) for p in data.eval_set({"hsk_size": 4, "techdocs_size": 1, "eval_split": "test"})]
    generation = {"max_new_tokens": 6, "num_beams": 2, "batch_size": 2}
    result = search_graph.compare_search(
        paths, rows, [(1, 1), (2, 2)], 5, generation, ["mtonnx-int8", "ct2-int8"], warmup=0, repeats=2
    )
    assert set(result["same_tokens"]) == {1, 2} and all(s["of"] == len(rows) for s in result["same_tokens"].values())
    assert [(s["batch"], s["beams"]) for s in result["speed"]] == [(1, 1), (2, 2)]
    for s in result["speed"]:
        assert {k for k in s if k.endswith(" ms")} == {f"{e} ms" for e in search_graph.ENGINES}
        assert s["speedup vs ct2-int8"]["min"] <= s["speedup vs ct2-int8"]["median"] <= s["speedup vs ct2-int8"]["max"]
    engine = peers.Engine("mtonnx-search-int8", paths, 1)
    assert engine.run(rows[:2], 2, 5) == 2 * 5  # the forced length, as every engine


def test_the_shortlist_is_timed_beside_the_runtime_and_ct2_with_the_same_list(paths, tmp_path):
    params = load(REPO / "params" / "ci.yaml")
    result = benchmark.shortlist(paths, tmp_path, params, ["mtonnx-int8", "ct2-int8"])
    assert (tmp_path / "ct2" / "int8-vmap" / "vmap.txt").is_file()
    assert [t["beams"] for t in result["tokens"]] == sorted(params["bench"]["beams"])
    assert set(result["mean_columns"]) == {f"b{b}" for b in params["bench"]["batches"]}
    assert result["step_mb"]["b1"] < result["full_step_mb"] and result["gate"] in ("pass", "fail")
    wanted = {f"{e} ms" for e in ("mtonnx-int8", "mtonnx-shortlist-int8", "ct2-int8", "ct2-vmap-int8")}
    for row in result["speed"]:
        assert wanted <= set(row), row
        for key in benchmark.SHORTLIST_PAIRS:
            spread = row[f"speedup {key}"]
            assert spread["min"] <= spread["median"] <= spread["max"]
    slower = json.loads(json.dumps(result))  # the same run with every timing doubled: the same fingerprint
    for row in slower["speed"]:
        row.update({k: v * 2 for k, v in row.items() if k.endswith(" ms")})
    prints = [fingerprint(tmp_path / "none", {"bytes": {"shortlist": r}})["fingerprint"] for r in (result, slower)]
    assert prints[0] == prints[1]
    speedups = benchmark.shortlist_speedups(result["speed"])
    assert set(speedups) == {"vs_mtonnx_int8", "vs_ct2_vmap_int8", "vs_ct2_int8", "ct2_vmap_vs_ct2"}
    rows = [MarianSpmTokenizer(paths.fp32_export).encode("Hello, teacher!")]
    vmapped = dataclasses.replace(paths, ct2_vmap_int8=str(tmp_path / "ct2" / "int8-vmap"))
    assert peers.Engine("ct2-vmap-int8", vmapped, 1).run(rows, 1, 4) == 4  # the forced length, as every engine


def test_targets_come_from_the_params():
    config = peers.Config(1, 1, 1, 32).name
    results = [
        {"engine": e, "config": config, "median_ms": ms, "times_ms": [ms] * 3}
        for e, ms in (("pytorch-fp32", 400.0), ("mtonnx-int8", 100.0), ("ct2-int8", 125.0))
    ]
    wanted = load(REPO / "params" / "ci.yaml")["targets"]
    verdicts = {t["ratio"]: (t["target"], t["verdict"]) for t in benchmark.targets(results, 32, wanted)}
    assert verdicts["int8_vs_pt_fp32_b1"] == (wanted["int8_vs_pytorch_fp32"], "met")  # 4.0 exactly
    assert verdicts["int8_vs_ct2_int8_b1"] == (wanted["int8_vs_ct2_int8"], "met")  # 1.25 >= 1.15
    stricter = {**wanted, "int8_vs_ct2_int8": 1.5}
    assert (
        dict((t["ratio"], t["verdict"]) for t in benchmark.targets(results, 32, stricter))["int8_vs_ct2_int8_b1"]
        == "missed"
    )


def test_the_bound_is_measured_at_the_working_set_and_names_the_caches():
    caches = benchmark.cache_sizes()
    assert all(level[0] == "L" and size for level, size in caches.items())
    assert benchmark.memory_bandwidth_gbs(4 * 2**20) > 0


def test_bench_lists_its_studies_and_runs_one_alone(tmp_path, models_dir):
    from conftest import cli_env, run_cli
    from mtonnx.measure import studies

    listed = run_cli("bench", "--list")
    assert listed.returncode == 0 and [line.split()[0] for line in listed.stdout.splitlines()] == [
        s.name for s in studies.STUDIES
    ]
    bad = run_cli("bench", "--params", "params/ci.yaml", "--only", "corpus,nope")
    assert bad.returncode == 2 and "unknown study nope" in bad.stderr
    out = tmp_path / "run"
    done = run_cli(
        "bench",
        "--params",
        "params/ci.yaml",
        "--only",
        "corpus",
        "--out",
        str(out),
        env=cli_env(models_dir),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(json.loads((out / studies.RESULTS).read_text())) == ["corpus"]  # that study alone
    recorded = json.loads((out / "metrics" / "bench.json").read_text())
    assert set(recorded) == {"corpus", "corpus_ratio", "corpus_ratio_per_repetition", "corpus_targets"}


def test_the_real_length_studies_time_an_evenly_spaced_subset_of_the_eval_set(tmp_path):
    from mtonnx.measure import studies

    bench = studies.Bench.open({"bench": {"corpus_sentences": 4}}, tmp_path, tmp_path)
    bench.rows = [[i] * (i + 1) for i in range(10)]  # row i has i + 1 tokens: the set's lengths, short to long
    assert bench.corpus_rows == [bench.rows[0], bench.rows[2], bench.rows[5], bench.rows[7]]
    for everything in (0, 10, 11):
        bench.params["bench"]["corpus_sentences"] = everything
        assert bench.corpus_rows == bench.rows


def test_a_probe_mark_reads_the_memory_at_that_point_of_the_code():
    code = "x = bytes(range(256)) * 200_000\nmark('holding')\ndel x"  # 51 MB written, read, then freed
    probed = probe.import_cost(code, repeats=1)
    assert set(probed["marks"]) == {"holding"}
    assert probed["marks"]["holding"]["rss_mb"] - probed["rss_mb"] > 40, probed
