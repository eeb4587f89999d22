"""The torch-free runtime: token-identical with PyTorch generate, no torch import, thread-safe, a CLI that
keeps order and empty lines, and clear errors for directories it cannot use."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import REPO, mtonnx_cmd, run_cli
from mtonnx import data
from mtonnx.check.parity import runtime_parity
from mtonnx.runtime import MarianSpmTokenizer, ModelDirError, Translator, layout
from mtonnx.runtime.segments import split_sentences

SOURCES = [p.en for p in data.eval_set({"hsk_size": 16, "techdocs_size": 8, "eval_split": "test"})]


@pytest.fixture(scope="module")
def layouts(hand_export, optimum_dir):
    return {
        "hand": Translator(hand_export),
        "optimum-split": Translator(optimum_dir, decoder="split"),
        "optimum-merged": Translator(optimum_dir, decoder="merged"),
    }


@pytest.mark.parametrize("layout", ["hand", "optimum-split", "optimum-merged"])
@pytest.mark.parametrize("beams", [1, 4], ids=["greedy", "beam4"])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_token_identical_with_generate(layouts, tiny, layout, beams, batch_size):
    model, tokenizer = tiny
    result = runtime_parity(
        layouts[layout], model, tokenizer, SOURCES, num_beams=beams, batch_size=batch_size, max_new_tokens=30
    )
    assert result["match"] == 1.0, result["mismatches"]


def test_outputs_cover_early_eos_and_full_length(layouts):
    """The oracle is only strong if sentences end at different lengths (eos mid-way and at the limit)."""
    ids, mask = layouts["hand"].tokenizer.batch(SOURCES)
    for beams in (1, 4):
        lengths = {len(row) for row in layouts["hand"].generate(ids, mask, num_beams=beams, max_new_tokens=30)}
        assert len(lengths) >= 3 and 30 in lengths and min(lengths) < 30


def test_cached_loop_equals_no_cache_loop(hand_export, layouts):
    no_cache = Translator(hand_export, decoder="no-cache")
    ids, mask = no_cache.tokenizer.batch(SOURCES[:10])
    for beams in (1, 4):
        assert no_cache.generate(ids, mask, num_beams=beams, max_new_tokens=20) == layouts["hand"].generate(
            ids, mask, num_beams=beams, max_new_tokens=20
        )


def test_tokenizer_matches_marian_tokenizer(hand_export, tiny):
    _, reference = tiny
    mine = MarianSpmTokenizer(hand_export)
    texts = SOURCES + ["", "   spaced   out ", ">>cmn_Hans<< Run it.", "a </s> b <unk> c", "Ünïcödé — “quotes” 100%"]
    for text in texts:
        assert mine.encode(text) == reference(text).input_ids, text
    rng = np.random.default_rng(0)
    for _ in range(200):
        ids = rng.integers(0, reference.vocab_size, 15).tolist()
        assert mine.decode(ids) == reference.decode(ids, skip_special_tokens=True), ids
    batch_ids, batch_mask = mine.batch(SOURCES[:5], ">>cmn_Hans<<")
    expected = reference([f">>cmn_Hans<< {s}" for s in SOURCES[:5]], padding=True, return_tensors="np")
    assert (batch_ids == expected["input_ids"]).all() and (batch_mask == expected["attention_mask"]).all()


def test_runtime_never_imports_torch(hand_export):
    probe = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from mtonnx.runtime import Translator\n"
        f"t = Translator({str(hand_export)!r})\n"
        "out = t.translate(['Hello, teacher!', 'Run the command.'], num_beams=2, max_new_tokens=8)\n"
        "print(len(out))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


def test_concurrent_calls_equal_serial_calls(layouts):
    translator = layouts["hand"]
    serial = [translator.translate(SOURCES[i::4], num_beams=2, max_new_tokens=16) for i in range(4)]
    results: dict[int, list[str]] = {}

    def work(i: int) -> None:
        results[i] = translator.translate(SOURCES[i::4], num_beams=2, max_new_tokens=16)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(4)] == serial


def test_translate_keeps_order_with_length_bucketing(layouts):
    translator = layouts["hand"]
    together = translator.translate(SOURCES, batch_size=5, max_new_tokens=12)
    alone = [translator.translate([s], max_new_tokens=12)[0] for s in SOURCES]
    assert together == alone


def test_overlong_input_is_translated_in_pieces_with_a_warning(layouts):
    translator = layouts["hand"]
    long_text = ", ".join(["the teacher reads a book"] * 80)  # far more tokens than the model's 256 positions
    pieces = translator.fit(long_text)
    assert len(pieces) > 1 and " ".join(pieces) == long_text
    assert all(len(translator.tokenizer.encode(p)) <= translator.max_positions for p in pieces)
    warning = r"text 0, line 1: a sentence longer than the model's 256 positions was translated in \d+ pieces"
    with pytest.warns(UserWarning, match=warning):
        out = translator.translate([long_text, "Hello."], max_new_tokens=5)
    assert len(out) == 2 and out[0] == "".join(translator.translate_pieces(pieces, max_new_tokens=5))


def test_split_sentences():
    assert split_sentences("Run it. Then stop! Is it done? yes.") == ["Run it.", "Then stop!", "Is it done? yes."]
    assert split_sentences("Version 3.9 is required.") == ["Version 3.9 is required."]
    assert split_sentences('He said "Go." Then he left.') == ['He said "Go."', "Then he left."]
    assert split_sentences("   ") == []


def test_cli_round_trip_keeps_order_empty_lines_and_prints_progress_to_stderr(hand_export, tmp_path):
    lines = ["Hello, teacher!", "", "Run the command. Then restart the server.", "", "", "He wears a suit."]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run(
        mtonnx_cmd(
            "translate", "--model-dir", str(hand_export), "-i", str(source), "--beams", "2", "--max-new-tokens", "10"
        ),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    translator = Translator(hand_export)
    for line, translated in zip(lines, out):
        expected = "".join(translator.translate(split_sentences(line), num_beams=2, max_new_tokens=10)) if line else ""
        assert translated == expected, line
    assert "translating" in done.stderr and "translating" not in done.stdout
    written = tmp_path / "out.txt"
    again = subprocess.run(
        mtonnx_cmd(
            "translate",
            "--model-dir",
            str(hand_export),
            "-i",
            str(source),
            "-o",
            str(written),
            "--beams",
            "2",
            "--max-new-tokens",
            "10",
        ),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert again.returncode == 0 and again.stdout == "" and written.read_text(encoding="utf-8") == done.stdout


def test_bad_model_dirs_are_clear_errors(hand_export, tmp_path, models_dir):
    with pytest.raises(ModelDirError, match="is not a directory"):
        Translator(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelDirError, match="missing vocab.json, source.spm, target.spm"):
        Translator(empty)
    no_onnx = tmp_path / "no-onnx"
    shutil.copytree(hand_export, no_onnx, ignore=shutil.ignore_patterns("*.onnx", layout.SUMS))
    with pytest.raises(ModelDirError, match="has no encoder_model.onnx"):
        Translator(no_onnx)
    mismatched = tmp_path / "mismatched"
    shutil.copytree(hand_export, mismatched)
    (mismatched / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    vocab = json.loads((mismatched / "vocab.json").read_text())
    vocab["<extra>"] = len(vocab)
    (mismatched / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ModelDirError, match=r"vocab.json has \d+ entries but the model's logits have \d+"):
        Translator(mismatched)
    done = run_cli("translate", "--model-dir", str(mismatched), input="Hello.\n", timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("mtonnx: error: ") and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "rows",
    [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [0, 0, 2, 3, 4, 5, 7, 7],
        [1, 0, 3, 2, 5, 4, 7, 6],
        [3, 3, 3, 3, 4, 4, 4, 4],
        [1, 2, 2, 3, 4, 5, 6, 7],
    ],
)
def test_beam_reorder_in_place_equals_a_full_gather(rows):
    """The cache reorder copies only moved rows, in place; the result must equal gathering every row, for the
    exported caches and for the tuned step's time-major key buffer (rows on its second axis)."""
    from mtonnx.runtime.cache import KVCache, TimeMajorKeys
    from mtonnx.runtime.decoders import CachedRun

    rng = np.random.default_rng(0)
    keys, values = ([rng.standard_normal((8, 2, 5, 4)).astype(np.float32) for _ in range(2)] for _ in range(2))
    run = CachedRun(None, None, None)
    run.cache = KVCache([k.copy() for k in keys], [v.copy() for v in values], [], [])
    run.reorder(np.array(rows))
    for got, kv in zip(run.cache.self_keys + run.cache.self_values, keys + values):
        assert np.array_equal(got, kv[rows])
    run = CachedRun(None, None, None)
    run.keys = TimeMajorKeys(layers=2, rows=8, heads=2, head_dim=4, capacity=4)
    for _ in range(5):  # past the capacity: the buffer doubles
        run.keys.append([k[:, :, :1] for k in keys])
    before = [k.copy() for k in run.keys.buffers]
    run.cache = KVCache([k.copy() for k in keys], [v.copy() for v in values], [], [])
    run.reorder(np.array(rows))
    for got, kv in zip(run.cache.self_values, values):
        assert np.array_equal(got, kv[rows])
    for got, kv in zip(run.keys.buffers, before):
        assert np.array_equal(run.keys.pasts()[0], run.keys.buffers[0][:5]) and np.array_equal(got[:5], kv[:5, rows])
