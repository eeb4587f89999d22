"""The results page's speed section: every engine per named workload with its absolute time, tokens/s and ratios,
the workloads defined once, the targets with their values, the engines' versions on the stamp, and the page built
from the committed runs leading with the opus-shape run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO
from mtonnx.foundation import envinfo
from mtonnx.lab import docs, results_page
from mtonnx.measure import studies

PARAMS = {
    "name": "opus-shape",
    "runtime": {"threads": 1},
    "bench": {
        "warmup": 1,
        "repeats": 5,
        "batches": [1, 8],
        "beams": [1, 4],
        "threads": [1],
        "tokens": [32],
        "corpus_sentences": 0,
    },
    "generation": {"max_new_tokens": 32, "num_beams": 4, "batch_size": 8},
    "quant": {
        "workload_batches": [1, 8],
        "workload_beams": None,
        "workload_weights": None,
        "timing_sentences": 8,
        "speed_repeats": 5,
    },
    "targets": {"int8_vs_ct2_int8": 1.15, "corpus_vs_ct2_int8": 1.2},
}
ENV = {
    "started": "2026-01-02T03:04:05+00:00",
    "cpu": {"model": "Test CPU", "usable_cores": 2},
    "git": {"sha": "0123456789abcdef"},
    "packages": {
        "torch": "2.13.0+cpu",
        "transformers": "4.57.6",
        "optimum": None,
        "optimum-onnx": "0.1.0",
        "onnxruntime": "1.32.0",
    },
    "params_hash": "136cbd792c0e",
    "params": PARAMS,
}
B8 = {"batch": 8, "beams": 4, "threads": 1, "tokens": 32, "config": "b8_beam4_t1_n32"}


def timed(engine: str, times: list[float]) -> dict:
    ordered = sorted(times)
    return {
        "engine": engine,
        **B8,
        "median_ms": ordered[1],
        "min_ms": ordered[0],
        "max_ms": ordered[-1],
        "times_ms": times,
    }


METRICS = {
    "bench": {
        "headline_tokens": 32,
        "results": [
            timed("pytorch-fp32", [400.0, 800.0, 600.0]),
            timed("mtonnx-int8", [100.0, 100.0, 150.0]),
            timed("ct2-int8", [200.0, 200.0, 300.0]),
        ],
        "targets": {"int8_vs_ct2_int8_b8_beam4": "within noise", "fp32_vs_optimum_fp32_b1": "not measured"},
        "ratio_per_repetition": {"int8_vs_ct2_int8_b8_beam4": {"median": 1.14, "min": 1.07, "max": 1.18}},
        "corpus": {"mtonnx-int8": {"tokens_per_s": 369.4}, "ct2-int8": {"tokens_per_s": 362.0}},
        "corpus_ratio_per_repetition": {"corpus_vs_ct2_int8_t1": {"median": 1.09, "min": 1.05, "max": 1.1}},
        "corpus_targets": {"corpus_vs_ct2_int8_t1": "missed"},
    },
    "bytes": {
        "shortlist": {
            "speed": [
                {
                    "batch": 8,
                    "beams": 4,
                    "mtonnx-int8 ms": 90.0,
                    "mtonnx-shortlist-int8 ms": 50.0,
                    "ct2-int8 ms": 180.0,
                    "ct2-vmap-int8 ms": 80.0,
                    "speedup vs ct2-int8": {"median": 3.6, "min": 3.5, "max": 3.7},
                    "speedup ct2 vmap vs ct2": {"median": 2.25, "min": 2.2, "max": 2.3},
                }
            ]
        },
        "search_graph": {"speedup_vs_ct2_int8": {"b8_beam4": 1.1}},
    },
    "quant": {
        "recommended": "int8-tuned",
        "fp32": {"workload_ms": 600.0, "times_ms_workload": [590.0, 600.0, 640.5], "vs_pytorch-fp32": 2.41},
        "int8-tuned": {
            "workload_ms": 250.0,
            "times_ms_workload": [240.0, 250.0, 275.5],
            "vs_ct2-int8": 1.52,
            "vs_pytorch-fp32": 6.01,
        },
        "int8-tuned-shortlist": {"size_mb": 211.0},  # failed a gate: never timed
        "peers": {
            "pytorch-fp32": {"workload_ms": 1500.0, "times_ms_workload": [1400.0, 1500.0, 1650.0]},
            "ct2-int8": {"workload_ms": 380.0, "times_ms_workload": [370.0, 380.0, 385.0]},
        },
    },
}
FORCED = "| forced: batch 8, beam 4, 32 tokens, 1 thread |"


def published(where: Path, metrics: dict = METRICS, env: dict = ENV) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    (where / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    (where / "env.json").write_text(json.dumps(env), encoding="utf-8")
    return where


def test_each_engine_at_forced_lengths_has_its_time_tokens_per_second_and_both_ratios(tmp_path):
    page = docs.scale_results(published(tmp_path / docs.SCALE_REFERENCE))
    assert [line for line in page.splitlines() if line.startswith(FORCED)] == [
        f"{FORCED} PyTorch fp32 | `peers` | 600.0 (400.0–800.0) | 426.7 | 0.50 | itself |",
        f"{FORCED} mtonnx int8-tuned | `peers` | 100.0 (100.0–150.0) | 2560.0 | 2.00 | 4.00 |",
        f"{FORCED} CTranslate2 int8 | `peers` | 200.0 (200.0–300.0) | 1280.0 | itself | 2.00 |",
        f"{FORCED} mtonnx int8-tuned | `shortlist` | 90.0 | 2844.4 | not recorded | not timed together |",
        f"{FORCED} mtonnx int8-tuned-shortlist (lossy) | `shortlist` | 50.0 | 5120.0 | 3.60 | not timed together |",
        f"{FORCED} CTranslate2 int8 | `shortlist` | 180.0 | 1422.2 | itself | not timed together |",
        f"{FORCED} CTranslate2 int8 with the shortlist as its vocabulary map (lossy) | `shortlist` | 80.0 | 3200.0 | "
        "2.25 | not timed together |",
        f"{FORCED} mtonnx int8-search-graph | `search-graph` | not recorded | not recorded | 1.10 | "
        "not timed together |",
    ]


def test_the_objective_and_the_corpus_keep_their_own_workloads_and_say_what_they_do_not_record(tmp_path):
    lines = docs.scale_results(published(tmp_path / docs.SCALE_REFERENCE)).splitlines()
    assert [line for line in lines if " | `objective` | " in line or " | `corpus` | " in line] == [
        "| objective | mtonnx fp32 | `objective` | 600.0 (590.0–640.5) | not counted | not timed together | 2.41 |",
        "| objective | mtonnx int8-tuned ★ | `objective` | 250.0 (240.0–275.5) | not counted | 1.52 | 6.01 |",
        "| objective | PyTorch fp32 | `objective` | 1500.0 (1400.0–1650.0) | not counted | 0.25 | itself |",
        "| objective | CTranslate2 int8 | `objective` | 380.0 (370.0–385.0) | not counted | itself | 3.95 |",
        "| corpus: 1 thread | mtonnx int8-tuned | `corpus` | not recorded | 369.4 | 1.09 | not timed together |",
        "| corpus: 1 thread | CTranslate2 int8 | `corpus` | not recorded | 362.0 | itself | not timed together |",
    ]


def test_targets_are_named_in_words_with_their_values():
    rows = results_page.target_table(METRICS, ENV).splitlines()
    assert rows[2:] == [
        "| mtonnx int8-tuned vs CTranslate2 int8, forced: batch 8, beam 4, 32 tokens, 1 thread | 1.14 (1.07–1.18) | "
        "≥ 1.15 (`targets.int8_vs_ct2_int8`) | within noise |",
        "| mtonnx fp32-tuned vs optimum fp32, forced: batch 1, beam 1, 32 tokens, 1 thread | not measured | "
        "not recorded (`targets.fp32_vs_optimum_fp32`) | not measured |",
        "| mtonnx int8-tuned vs CTranslate2 int8, corpus: 1 thread | 1.09 (1.05–1.10) | "
        "≥ 1.2 (`targets.corpus_vs_ct2_int8`) | missed |",
    ]
    assert results_page.target_table({}, ENV) == "This run held no ratio to a target."


def test_each_workload_is_defined_once_from_the_run_s_params():
    rows = results_page.workload_table(ENV).splitlines()
    assert rows[0] == (
        "| workload | batch | beams | output length | sentences | tokenization | threads | repetitions | timed by |"
    )
    assert rows[2:] == [
        "| forced | 1, 8 | 1, 4 | exactly 32 new tokens, the end of sentence suppressed | the first *batch* of the "
        "eval set | not timed: token ids in | 1 | 5, interleaved across the session's engines | notebook 07's "
        "`peers`; notebook 10's `shortlist` and `search-graph` |",
        "| objective | 1 + 8 | 4 | each sentence to its end, at most 32 new tokens | the first 8 of the eval set, in "
        "batches of each size | timed: text in | 1 | 5, interleaved across the variants and peers | notebook 06's "
        "recommendation |",
        f"| corpus | up to {studies.CORPUS_BATCH}, sorted by length | 4 | each sentence to its end, at most 32 new "
        f"tokens | the eval set | not timed: token ids in | {', '.join(map(str, studies.CORPUS_THREADS))} (above 1: "
        f"one engine per process) | {min(5, studies.CORPUS_REPEATS)}, interleaved across the engines | notebook "
        "07's `corpus` |",
    ]
    weighted = {**PARAMS, "quant": {**PARAMS["quant"], "workload_weights": [2.0, 1.0], "workload_beams": 2}}
    objective = results_page.workloads(weighted)[1]
    assert (objective.batch, objective.beams) == ("2 × 1 + 1 × 8", "2")
    corpus = {**PARAMS, "quant": {**PARAMS["quant"], "workload_batches": [32], "workload_corpus": 120}}
    objective = results_page.workloads(corpus)[1]
    assert objective.batch == "32, sorted by length"
    assert objective.sentences == "120 of the eval set, evenly spaced, at their real lengths"
    assert "workloads are unnamed" in results_page.workload_table({"params": {"name": "old"}})


def test_the_stamp_shows_every_engine_s_version_and_says_which_the_run_did_not_record(tmp_path):
    stamp = docs.scale_results(published(tmp_path / docs.SCALE_REFERENCE)).splitlines()[0]
    assert stamp == (
        "Measured by the opus-shape run of commit `0123456789ab` on 2026-01-02T03:04:05+00:00: Test CPU (2 cores), "
        "1 ONNX Runtime thread(s), torch 2.13.0+cpu, transformers 4.57.6, optimum not installed, optimum-onnx 0.1.0, "
        "onnxruntime 1.32.0, ctranslate2 not recorded by this run, params `opus-shape` (136cbd792c0e)."
    )
    recorded = {**ENV, "packages": {**ENV["packages"], "ctranslate2": "4.8.5"}}
    stamp = docs.scale_results(published(tmp_path / "recorded", env=recorded)).splitlines()[0]
    assert "onnxruntime 1.32.0, ctranslate2 4.8.5, params" in stamp
    assert set(results_page.ENGINE_PACKAGES) <= set(envinfo.PACKAGES), "a run records every engine's version"


def test_a_run_without_speed_tables_says_so_and_no_run_says_how_to_publish_one(tmp_path):
    page = docs.scale_results(published(tmp_path / docs.SCALE_REFERENCE, metrics={}, env={"params": PARAMS}))
    for absent in (
        "This run recorded no timing at forced lengths.",
        "This run timed no variant on the objective.",
        "This run recorded no corpus throughput.",
        "This run held no ratio to a target.",
    ):
        assert absent in page
    assert "ctranslate2 not recorded by this run" in page.splitlines()[0]
    assert docs.scale_results(tmp_path / "absent") == docs.NO_SCALE_RUN


def test_the_page_built_from_the_committed_runs_leads_with_the_opus_shape_tables():
    scale = REPO / "docs" / docs.SCALE_REFERENCE
    if not (scale / "env.json").is_file():
        pytest.skip(f"{scale} is absent: make scale-refresh publishes the opus-shape run")
    page = docs.render((REPO / "docs" / "results.md").read_text(encoding="utf-8"), REPO / "docs" / "reference")
    start = page.index("<!-- generated: scale_results -->")
    block = page[start : page.index(docs.GENERATED_END, start)]
    first_table = next(i for i, line in enumerate(page.splitlines()) if line.startswith("|"))
    assert len(page[:start].splitlines()) < first_table < len(page[: start + len(block)].splitlines())
    assert page.index("Measured by") > start and "Measured by the opus-shape run" in block
    assert results_page.SPEED_HEADER in block and start < page.index("<!-- generated: results -->")
    engines = {line.split(" | ")[1] for line in block.splitlines() if line.startswith("| forced:")}
    assert {"PyTorch fp32", "optimum fp32", "mtonnx int8-tuned", "CTranslate2 int8"} <= engines
    assert all(f"{name} " in block.splitlines()[2] for name in results_page.ENGINE_PACKAGES)


def test_the_profile_table_shows_each_pass_beside_ctranslate2_and_says_when_there_is_none():
    shares = {"encoder": 0.1, "decoder": 0.6, "feeds": 0.05, "reorder": 0.1, "search": 0.15}
    entry = {
        "batch": 8,
        "sentences": 40,
        "seconds": 0.5,
        "shares": shares,
        "beyond_output_share": 0.061,
        "padded_encoder_share": 0.072,
        "quantization_share": 0.098,
        "top_operators": "MatMulIntegerToFloat 42%, Add 9%, TopK 7%",
        "vs_ct2_int8": 0.8,
        "ort_only_vs_ct2_int8": 1.14,
    }
    metrics = {"bench": {"profile": {"batch8": {"int8-rows-tuned": entry, "ct2-int8": {"seconds": 0.4}}}}}
    rows = results_page.profile_table(metrics).splitlines()
    assert rows[0].startswith("| batch | variant | s a pass | encoder | decoder | feeds | reorder | search |")
    assert rows[2] == (
        "| 8 | `int8-rows-tuned` | 0.500 | 10% | 60% | 5% | 10% | 15% | 0.400 | 0.80 | 1.14 | 6.1% | 7.2% | 9.8% | "
        "MatMulIntegerToFloat 42%, Add 9%, TopK 7% |"
    )
    alone = {"bench": {"profile": {"batch8": {"int8-rows-tuned": {**entry, "vs_ct2_int8": None}}}}}
    assert "| not measured | not measured |" in results_page.profile_table(alone)
    assert results_page.profile_table({}) == "This run recorded no profile."
