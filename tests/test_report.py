"""The report's first screen says the right thing: the verdict line, the variant rows, marked differences."""

from __future__ import annotations

from mtonnx.report import index


def metrics(**runtime_parity: float) -> dict:
    return {
        "manual_export": {"greedy_token_match": 1.0},
        "optimum_export": {"greedy_token_match": 1.0, "beam_token_match": 1.0},
        "runtime": {"cached_equals_no_cache": 1.0, "parity": runtime_parity},
        "quant": {
            "recommended": "int8",
            "recommended_reason": "int8: passes the quality gate",
            "fp32": {"gate": "pass", "size_mb": 4},
            "int8": {"gate": "pass", "size_mb": 1},
            "failed": {},
        },
    }


def test_verdict_says_token_identical_only_when_every_parity_check_is():
    good = index.verdict(metrics(**{"hand export, greedy, batch 1": 1.0}))
    assert good["identical"] and good["parity"].startswith("every export token-identical to PyTorch (5 checks")
    bad = index.verdict(metrics(**{"hand export, greedy, batch 1": 1.0, "optimum merged, beam, batched": 0.0}))
    assert not bad["identical"]
    assert bad["parity"] == "not token-identical to PyTorch: runtime: optimum merged, beam, batched 0%"
    assert bad["recommended"] == "int8" and bad["reason"].startswith("int8: passes")
    assert not index.verdict({})["identical"]


def test_variant_rows_keep_the_order_and_mark_the_recommended_one():
    rows = index.variant_rows(metrics())
    assert [(r["name"], r["recommended"]) for r in rows] == [("fp32", False), ("int8", True)]


def test_highlight_marks_only_the_characters_that_differ():
    assert str(index.highlight("我喜欢喝茶。", "我喜欢喝咖啡。")) == "我喜欢喝<mark>咖啡</mark>。"
    assert str(index.highlight("a<b", "a<b")) == "a&lt;b"
