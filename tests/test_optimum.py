"""optimum's export: generate() through ONNX Runtime is token-identical with PyTorch (greedy, beam 4,
split and merged decoders), and its files match PyTorch within the hand export's tolerance."""

from __future__ import annotations

import pytest

from mtonnx import data
from mtonnx.check import parity
from mtonnx.export import optimum as optimum_export
from mtonnx.runtime import layout
from mtonnx.sources.reference import translate_generate


def test_export_writes_all_four_files(optimum_dir):
    assert sorted(p.name for p in optimum_dir.glob("*.onnx")) == sorted(optimum_export.FILES)


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
@pytest.mark.parametrize("beams", [1, 4], ids=["greedy", "beam4"])
def test_ort_generate_is_token_identical_with_pytorch(optimum_dir, tiny, merged, beams):
    model, tokenizer = tiny
    sources = [p.en for p in data.eval_set({"hsk_size": 8, "techdocs_size": 4, "eval_split": "test"})]
    kwargs = dict(num_beams=beams, max_new_tokens=20, batch_size=4, progress=False)
    expected = translate_generate(model, tokenizer, sources, **kwargs)
    got = translate_generate(optimum_export.load_ort_model(optimum_dir, merged), tokenizer, sources, **kwargs)
    result = parity.token_match(got["token_ids"], expected["token_ids"])
    assert result["match"] == 1.0, result["mismatches"]


def test_optimum_files_match_pytorch_within_tolerance(optimum_dir, tiny):
    result = parity.file_parity(tiny[0], optimum_dir, tolerance=1e-4, files=list(layout.VARIANT_FILES))
    assert result["pass"], {f: v["max_abs_diff"] for f, v in result["files"].items()}


def test_side_by_side_compares_io_and_counts_duplicated_weights(optimum_dir, hand_export, tiny):
    config = tiny[0].config
    side = optimum_export.side_by_side(hand_export, optimum_dir, config.vocab_size, config.d_model)
    assert {r["export"] for r in side["files"]} == {"manual", "optimum"}
    io = {(r["file"], r["kind"], r["name"]): r for r in side["io"]}
    cross_key = layout.past_names(1, (layout.CROSS_KEY,))[0]
    assert io[(layout.DECODER_WITH_PAST, "input", cross_key)]["same dtype and rank"]
    embedding_mb = config.vocab_size * config.d_model * 4 / 2**20
    # every file carries the shared embedding: at least (files - 1) extra copies per export
    assert side["duplicated"]["optimum"]["duplicated_mb"] >= 3 * embedding_mb * 0.99
    assert side["duplicated"]["manual"]["duplicated_mb"] >= 3 * embedding_mb * 0.99
