"""mtonnx batch (mtonnx.scale): rows read the same way from every format, one bad row never fails a job, shards are
complete or absent, reruns skip finished inputs, and Ray Data gives the local engine's output exactly."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from mtonnx import data
from mtonnx.runtime import Translator
from mtonnx.runtime.segments import split_sentences
from mtonnx.scale import ScaleError, add_arguments, inputs, main, shards, translate_files, work

OPTIONS = {"num_beams": 2, "max_new_tokens": 8}  # the tiny model never stops by itself: bound its output
BATCH = 4
SENTENCES = [p.en for p in data.hsk_split("train")[:80] if split_sentences(p.en) == [p.en]][:40]  # one sentence each


def _write_corpus(root: Path) -> Path:
    """Three text files (CRLF, empty lines, control characters, a paragraph, an undecodable line), a JSONL and two
    Parquet files with bad rows."""
    root.mkdir(parents=True)
    for k in range(3):
        lines = SENTENCES[k * 12 : (k + 1) * 12]
        (root / f"doc{k}.txt").write_bytes(("\r\n".join(lines[:5]) + "\n\n" + "\n".join(lines[5:]) + "\n").encode())
    with open(root / "doc0.txt", "ab") as f:
        f.write(b"Tab\there\x0bthere\x0cand\xc2\x85there.\n\xff\xfe not UTF-8\nI like tea. She likes coffee.\n")
    records = [
        {"id": 101, "text": SENTENCES[0]},
        {"id": "s-2", "text": ""},
        {"id": 103, "text": None},
        {"id": 104},
        {"id": 105, "text": 42},
        {"id": 106, "text": "two\nlines"},
        {"text": SENTENCES[1]},
    ]
    body = "".join(json.dumps(r) + "\n" for r in records).encode() + b"not json\n\n" + b'{"id": 9, "text": "\xff"}\n'
    (root / "records.jsonl").write_bytes(body)
    texts = [SENTENCES[2].encode(), b"\xff\xfe", None, b"", SENTENCES[3].encode()]
    pq.write_table(
        pa.table({"id": pa.array([1, 2, 3, 4, 5]), "text": pa.array(texts, pa.binary())}), root / "bin.parquet"
    )
    pq.write_table(pa.table({"id": ["a", "b"], "text": [SENTENCES[4], SENTENCES[5]]}), root / "str.parquet")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return _write_corpus(tmp_path_factory.mktemp("scale") / "in")


@pytest.fixture(scope="module")
def local_out(hand_export, corpus, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("scale") / "local"
    result = translate_files(hand_export, str(corpus / "*"), out, batch_size=BATCH, options=OPTIONS, progress=False)
    return out, result


def _rows(out: Path) -> list[dict]:
    return shards.read_output(out).to_pylist()


def _by_id(out: Path) -> dict[str, dict]:
    return {row["id"]: row for row in _rows(out)}


def _untranslated(chunks: list[dict]) -> list[tuple[list[str], list[str], list[list[str]]]]:
    """work.translated's results for chunks left as they are: each text its own translation, no warnings."""
    return [(c["text"], c["error"], [[] for _ in c["id"]]) for c in chunks]


# --- reading: the same rows from every format -------------------------------------------------------------------


def test_text_lines_split_on_newline_only():
    data_ = b"\xef\xbb\xbfone\r\ntwo\x0bstill two\xe2\x80\xa8and\xc2\x85two\n\n\tfour\x00\n\xffbad\nlast"
    rows = inputs.read_rows(data_, "f", "text")
    assert rows["id"] == ["f:1", "f:2", "f:3", "f:4", "f:5", "f:6"]
    assert rows["text"][:4] == ["one", "two still two and two", "", " four "]
    assert rows["error"][:4] == [""] * 4 and "not UTF-8" in rows["error"][4] and rows["error"][5] == ""
    assert rows["text"][5] == "last" and rows["position"] == [1, 2, 3, 4, 5, 6]
    assert inputs.read_rows(b"", "f", "text")["id"] == [] and inputs.read_rows(b"a\n", "f", "text")["id"] == ["f:1"]
    assert not any(c in t for t in rows["text"] for c in "\n\r\x0b\x0c\x85\u2028")


def test_jsonl_bad_rows_get_an_error(corpus):
    rows = inputs.read_rows((corpus / "records.jsonl").read_bytes(), "records", "jsonl")
    got = dict(zip(rows["id"], rows["error"]))
    assert got["101"] == "" and got["records:7"] == "" and got["106"] == ""
    assert got["s-2"] == "empty text" and got["103"] == "text is null" and got["104"] == "no 'text' field"
    assert got["105"].startswith("text is int") and got["records:8"].startswith("not JSON")
    assert "not UTF-8" in got["records:10"]  # undecodable bytes; the blank line 9 is no record
    assert rows["text"][rows["id"].index("106")] == "two lines"


def test_parquet_bad_rows_and_bad_files(corpus, tmp_path):
    rows = inputs.read_rows((corpus / "bin.parquet").read_bytes(), "bin", "parquet")
    assert rows["id"] == ["1", "2", "3", "4", "5"]
    assert [bool(e) for e in rows["error"]] == [False, True, True, True, False]
    pq.write_table(pa.table({"id": [1], "text": [7]}), tmp_path / "ints.parquet")
    assert inputs.read_rows((tmp_path / "ints.parquet").read_bytes(), "i", "parquet")["error"][0].startswith("text is")
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "nocol.parquet")
    for blob in ((tmp_path / "nocol.parquet").read_bytes(), b"PAR1 not parquet"):
        rows = inputs.read_rows(blob, "n", "parquet")
        assert rows["position"] == [0] and rows["error"][0]


def test_find_inputs(corpus, tmp_path):
    found = inputs.find_inputs([str(corpus / "*.txt"), str(corpus / "records.jsonl")])
    assert [i.stem for i in found] == ["doc0", "doc1", "doc2", "records"]
    assert [i.format for i in inputs.find_inputs([str(corpus)])].count("parquet") == 2
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "doc0.txt").write_text("x\n")
    with pytest.raises(ScaleError, match="both write the shard 'doc0'"):
        inputs.find_inputs([str(corpus / "doc0.txt"), str(tmp_path / "a" / "doc0.txt")])
    for spec in (str(tmp_path / "*.none"), str(tmp_path / "missing.txt")):
        with pytest.raises(ScaleError):
            inputs.find_inputs([spec])


# --- the local engine -------------------------------------------------------------------------------------------


def test_local_equals_translator(hand_export, corpus, local_out):
    out, result = local_out
    assert (result["files"], result["skipped"], result["workers"]) == (6, 0, 1)
    translator = Translator(hand_export)

    def translate(sentences):
        return translator.translate(sentences, batch_size=BATCH, **OPTIONS)

    for name in ("doc0.txt", "doc1.txt", "records.jsonl"):  # a file's rows without an error: one translate call
        rows = [r for r in _rows(out) if r["source"].endswith(name) and not r["error"]]
        assert [r["translation"] for r in rows] == translate([r["text"] for r in rows])
    rows = [r for r in _rows(out) if r["source"].endswith("doc1.txt")]
    singles = [r for r in rows if r["text"]]  # one sentence a line: exactly the model's translations of the lines
    pieces = translator.translate_pieces([r["text"] for r in singles], batch_size=BATCH, **OPTIONS)
    assert [r["translation"] for r in singles] == pieces
    empty = [r for r in rows if not r["text"]]
    assert len(empty) == 1 and empty[0]["translation"] == "" and empty[0]["error"] == ""


def test_local_ids_errors_and_counts(local_out):
    out, result = local_out
    rows = _by_id(out)
    assert {"doc0:1", "doc2:13", "101", "s-2", "records:7", "1", "5", "a", "b"} <= set(rows)
    errors = {i for i, r in rows.items() if r["error"]}
    assert errors == {"doc0:15", "s-2", "103", "104", "105", "records:8", "records:10", "2", "3", "4"}
    assert all(rows[i]["translation"] == "" for i in errors)
    assert rows["doc0:14"]["text"] == "Tab here there and there."
    assert result["errors"] == len(errors) and result["rows"] == len(rows)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            shards.LOCK,
            *(f"{s}.parquet{e}" for s in ("doc0", "doc1", "doc2", "records", "bin", "str") for e in ("", ".done")),
        ]
    )


def test_rerun_skips_and_redoes_only_incomplete(hand_export, corpus, tmp_path):
    out = tmp_path / "out"
    run = dict(batch_size=BATCH, options=OPTIONS, progress=False, log=None)
    inputs_ = [str(corpus / "doc1.txt"), str(corpus / "doc2.txt"), str(corpus / "str.parquet")]
    first = translate_files(hand_export, inputs_, out, **run)
    assert translate_files(hand_export, inputs_, out, **run)["skipped"] == 3
    before = _rows(out)
    doc1 = inputs.find_inputs([str(corpus / "doc1.txt")])[0]
    shards.prepare(shards.Job(str(out)), doc1)  # killed after claiming doc1: its sidecar is a claim, not complete
    with open(out / "doc2.parquet", "ab") as f:  # a shard that is not the one its sidecar describes
        f.write(b"junk")
    (out / ".str.parquet-x1y2").write_bytes(b"half a file")  # a killed write's temp file
    again = translate_files(hand_export, inputs_, out, **run)
    assert (again["skipped"], again["rows"]) == (1, first["rows"] - 2)
    assert _rows(out) == before and [p.name for p in out.glob(".*")] == [shards.LOCK]
    other = translate_files(hand_export, inputs_, out, **{**run, "options": {"num_beams": 1, "max_new_tokens": 4}})
    assert (other["skipped"], other["redone"]) == (0, 3)  # other settings: redone, never mixed in


def test_interrupted_write_leaves_nothing_complete(corpus, tmp_path, monkeypatch):
    job, item = shards.Job(str(tmp_path)), inputs.find_inputs([str(corpus / "doc1.txt")])[0]
    chunk_rows = work.file_chunks(Path(item.path).read_bytes(), item)
    table = work.translated(chunk_rows, _untranslated(chunk_rows))

    def dies_midway(rows, path):
        Path(path).write_bytes(b"PAR1 partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(shards.pq, "write_table", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        shards.write_shard(table, job, item)
    assert list(tmp_path.iterdir()) == [] and shards.state(job, item) == "missing"


def test_parts_assemble_into_one_shard(corpus, tmp_path):
    item = inputs.find_inputs([str(corpus / "doc2.txt")])[0]
    chunk_rows = work.file_chunks(Path(item.path).read_bytes(), item, chunk_rows=5)
    table = work.translated(chunk_rows, _untranslated(chunk_rows))
    whole, split = shards.Job(str(tmp_path / "whole")), shards.Job(str(tmp_path / "split"))
    Path(whole.out_dir).mkdir()
    Path(split.out_dir).mkdir()
    shards.commit(table, whole, {item.stem: item})
    last = pc.equal(table["chunk"], 0)
    assert shards.commit(table.filter(pc.invert(last)), split, {item.stem: item}) == [{"shard": "doc2"}]
    assert shards.state(split, item) == "missing"
    assert shards.commit(table.filter(last), split, {item.stem: item})[0]["rows"] == 13
    assert shards.read_output(split.out_dir) == shards.read_output(whole.out_dir)
    assert not (Path(split.out_dir) / shards.PARTS / "doc2").exists()


def test_a_failing_translation_fails_only_its_row(hand_export, monkeypatch):
    chunks = work.Chunks((str(hand_export),), options=OPTIONS)
    real = chunks.translator.translate

    def fragile(sentences, **kwargs):
        if any("boom" in s for s in sentences):
            raise RuntimeError("the model\nbroke")
        return real(sentences, **kwargs)

    monkeypatch.setattr(chunks.translator, "translate", fragile)
    places = [f"f line {k}" for k in range(1, 5)]
    translations, errors, warnings = chunks.translate(["Hello.", "boom", "", "Thank you."], [""] * 4, places)
    assert errors == ["", "translation failed: RuntimeError: the model broke", "", ""]
    assert translations[1:3] == ["", ""] and translations[0] == real(["Hello."], **OPTIONS)[0]
    assert warnings == [[]] * 4


# --- the command line -------------------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_missing_model_dir_fails_first_with_one_line(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(_args("--model-dir", str(tmp_path / "nope"), "--input", str(corpus), "--output", str(out)))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("mtonnx: error: ") and err.count("\n") == 1 and "nope" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--max-new-tokens", "256"), "max_new_tokens must be an integer from 1 to 255 (the model has 256 positions)"),
        (("--batch-size", "500"), "batch_size must be an integer from 1 to 256"),
    ],
)
def test_a_setting_the_model_cannot_run_fails_before_any_work(hand_export, corpus, tmp_path, capsys, flags, message):
    """Not a job whose every row failed, with exit 0 and shards that a rerun would skip as complete."""
    out = tmp_path / "out"
    code = main(_args("--model-dir", str(hand_export), "--input", str(corpus), "--output", str(out), *flags))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("mtonnx: error: ") and err.count("\n") == 1 and message in err, err
    assert not out.exists()


@pytest.mark.parametrize("module", ["ray.data", "pyarrow", "filelock"])
def test_missing_extra_names_the_install(hand_export, corpus, tmp_path, capsys, monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    argv = ["--model-dir", str(hand_export), "--input", str(corpus), "--output", str(tmp_path / "o"), "--engine", "ray"]
    assert main(_args(*argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'mtonnx[scale]'" in err and module in err


def test_cli_local_jsonl_and_summary(hand_export, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--model-dir", str(hand_export), "--input", str(corpus / "doc1.txt"), str(corpus / "records.jsonl")]
    argv += ["--output", str(out), "--format", "jsonl", "--beams", "1", "--max-new-tokens", "4", "--batch-size", "3"]
    assert main(_args(*argv)) == 1  # bad rows: written with their error, and the job says so
    err = capsys.readouterr().err.splitlines()
    assert "22 rows from 2 files (6 with an error)" in err[-2] and "[local]" in err[-2]
    assert err[-1].startswith("mtonnx: error: rows with an error: 6 ")
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["id"] == "101" and set(json.loads(lines[0])) == set(shards.OUTPUT.names)
    assert main(_args(*argv)) == 1  # skipped, and its shards still hold the 6 bad rows
    err = capsys.readouterr().err
    assert "skipping 2 of 2 inputs" in err and "(complete, 6 rows with an error)" in err


# --- issue 36: the tester's repros ---------------------------------------------------------------------------------


def _doc1_argv(hand_export, corpus, out: Path, *flags: str) -> list[str]:
    """`mtonnx batch` over doc1.txt (every row translates) into `out`, the tiny model bounded as in OPTIONS."""
    argv = ["--model-dir", str(hand_export), "--input", str(corpus / "doc1.txt"), "--output", str(out)]
    return [*argv, "--beams", "2", "--max-new-tokens", "8", "--batch-size", str(BATCH), *flags]


def test_a_second_job_on_a_held_directory_refuses_with_one_line(hand_export, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with shards.holding(out):  # the first job, still running
        code = main(_args(*_doc1_argv(hand_export, corpus, out)))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == (
        f"mtonnx: error: {out}: another mtonnx batch job holds this output directory; wait for it to end or give "
        "another --output\n"
    )
    assert [p.name for p in out.iterdir()] == [shards.LOCK]  # nothing planned, claimed or written


def test_a_crashed_job_leaves_no_lock_behind(hand_export, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    code = (
        "import os, signal; from mtonnx.scale import shards; "
        f"shards.holding({str(out)!r}).__enter__(); os.kill(os.getpid(), signal.SIGKILL)"
    )
    crashed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -9 and (out / shards.LOCK).exists(), crashed.stderr[-2000:]
    assert main(_args(*_doc1_argv(hand_export, corpus, out))) == 0, capsys.readouterr().err
    assert shards.state(shards.Job(str(out)), inputs.find_inputs([str(corpus / "doc1.txt")])[0]) != "missing"


def test_an_input_edited_in_place_with_the_same_size_and_mtime_is_redone(hand_export, corpus, tmp_path):
    source = tmp_path / "corpus.txt"
    shutil.copy(corpus / "doc1.txt", source)
    run = dict(batch_size=BATCH, options=OPTIONS, progress=False, log=None)
    translate_files(hand_export, str(source), tmp_path / "out", **run)
    before = os.stat(source)
    data = source.read_bytes()
    first = data.split(b"\r\n", 1)[0]
    source.write_bytes(first.swapcase() + data[len(first) :])  # same size, other text
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(source)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again = translate_files(hand_export, str(source), tmp_path / "out", **run)
    assert (again["skipped"], again["redone"]) == (0, 1)
    assert _by_id(tmp_path / "out")["corpus:1"]["text"] == first.swapcase().decode()


def test_an_input_changed_after_planning_fails_instead_of_passing_as_the_planned_version(corpus):
    item = inputs.find_inputs([str(corpus / "doc2.txt")])[0]
    data = Path(item.path).read_bytes()
    assert len(work.file_chunks(data, item)[0]["id"]) == 13
    with pytest.raises(ScaleError, match="changed while the job ran"):
        work.file_chunks(data.swapcase(), item)


def test_a_file_it_did_not_write_is_refused_unless_overwrite(hand_export, corpus, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    shutil.copy(corpus / "doc1.txt", tmp_path / "in" / "part0.txt")
    out = tmp_path / "out"
    out.mkdir()
    theirs = out / "part0.parquet"
    pq.write_table(pa.table({"user_id": [1, 2, 3]}), theirs)  # another tool's output, no sidecar of ours
    kept = theirs.read_bytes()
    argv = _doc1_argv(hand_export, corpus, out)
    argv[argv.index("--input") + 1] = str(tmp_path / "in" / "part0.txt")
    assert main(_args(*argv)) == 2
    err = capsys.readouterr().err
    assert err == (
        f"mtonnx: error: {theirs}: not written by mtonnx batch (no sidecar of its own); move it away, or pass "
        "--overwrite to replace it\n"
    )
    assert theirs.read_bytes() == kept and sorted(p.name for p in out.iterdir()) == [shards.LOCK, "part0.parquet"]
    assert main(_args(*argv, "--overwrite")) == 0, capsys.readouterr().err
    assert [r["id"] for r in _rows(out)] == [f"part0:{k}" for k in range(1, 14)]


@pytest.mark.parametrize("why", ["the model fails", "no row has text"])
def test_a_job_whose_rows_all_fail_exits_1(hand_export, corpus, tmp_path, capsys, monkeypatch, why):
    source = corpus / "doc1.txt"
    if why == "the model fails":

        def broken(self, texts, **options):
            raise RuntimeError("the model is broken")

        monkeypatch.setattr(Translator, "translate", broken)
    else:
        source = tmp_path / "bad.jsonl"
        source.write_text('{"id": 1}\n{"id": 2, "text": null}\n{"id": 3, "text": ""}\n', encoding="utf-8")
    argv = _doc1_argv(hand_export, corpus, tmp_path / "out")
    argv[argv.index("--input") + 1] = str(source)
    assert main(_args(*argv)) == 1
    rows = _rows(tmp_path / "out")  # still written, each with its reason
    assert rows and all(r["error"] and r["translation"] == "" for r in rows)
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"mtonnx: error: rows with an error: {len(rows)} (their shards in {tmp_path / 'out'} hold them, the reason in "
        "the error column)"
    )
    assert f"{len(rows)} rows from 1 files ({len(rows)} with an error)" in err[-2]


def test_a_sentence_too_long_warns_naming_the_file_and_line(hand_export, tmp_path, capsys, recwarn):
    translator = Translator(hand_export)
    long = ", ".join(["the teacher reads a book"] * 80)  # far more tokens than the model's positions
    pieces = len(translator.fit(long))
    assert pieces > 1
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "corpus.txt").write_text(f"Hello.\n\n{long}\nThank you.\n", encoding="utf-8")
    (tmp_path / "in" / "asks.jsonl").write_text(json.dumps({"id": "q7", "text": long}) + "\n", encoding="utf-8")
    argv = ["--model-dir", str(hand_export), "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    assert main(_args(*argv, "--beams", "1", "--max-new-tokens", "4")) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"mtonnx: warning: asks.jsonl line 1 (id q7): a sentence too long for the model was translated in {pieces} "
        "pieces",
        f"mtonnx: warning: corpus.txt line 3: a sentence too long for the model was translated in {pieces} pieces",
    ]
    assert not [w for w in recwarn if "pieces" in str(w.message)]  # the job's log, not Python's warnings


def test_an_output_that_is_a_file_is_one_line(hand_export, corpus, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"someone's file")
    assert main(_args(*_doc1_argv(hand_export, corpus, out))) == 2
    err = capsys.readouterr().err
    assert err == f"mtonnx: error: --output {out} is a file: give a directory for the shards (one per input file)\n"
    assert out.read_bytes() == b"someone's file"


def test_unreachable_address_fails_fast_with_one_line(hand_export, corpus, tmp_path, capsys):
    pytest.importorskip("ray")
    argv = ["--model-dir", str(hand_export), "--input", str(corpus / "doc1.txt"), "--output", str(tmp_path / "o")]
    assert main(_args(*argv, "--address", "127.0.0.1:1", "--workers", "1")) == 2
    err = capsys.readouterr().err
    assert err.startswith("mtonnx: error: cannot join the Ray cluster at 127.0.0.1:1") and err.count("\n") == 1


def test_no_torch_no_ray_on_the_local_engine(hand_export, corpus, tmp_path):
    code = (
        "import sys; from mtonnx.scale import translate_files; "
        f"r = translate_files({str(hand_export)!r}, {str(corpus / 'doc2.txt')!r}, {str(tmp_path)!r}, "
        "options={'num_beams': 1, 'max_new_tokens': 4}, progress=False, log=None); "
        "print(r['rows'], sorted(m for m in ('torch', 'transformers', 'ray') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["13", "[]"], result.stderr[-2000:]


def test_alternated_rounds_pair_each_round_and_keep_every_output(tmp_path):
    """Notebook 10's protocol: rounds alternate worker counts in an order reversed every other round (a machine that
    speeds up or slows down favours neither count), each run gets its own empty directory, and the speedup pairs round
    k of one count with round k of the other (a slow round for both must not become a fast ratio)."""
    from mtonnx.scale import measure

    order, seconds = [], {1: [10.0, 20.0, 12.0], 2: [5.0, 12.0, 8.0]}  # round 2 is slow for both

    def run(n: int, out: Path) -> dict:
        assert not out.exists()
        out.mkdir(parents=True)
        order.append(n)
        took = seconds[n][sum(1 for m in order if m == n) - 1]
        return {"seconds": took, "sentences_per_s": 100 / took}

    rounds = measure.alternate(run, workers=(1, 2), repeats=3, out_dir=tmp_path)
    assert order == [1, 2, 2, 1, 1, 2]
    assert [r["out"].name for r in rounds[2]] == ["w2-1", "w2-2", "w2-3"] and all(r["out"].is_dir() for r in rounds[2])
    assert measure.speedup(rounds[1], rounds[2]) == {"median": 1.67, "min": 1.5, "max": 2.0}
    typical = measure.typical(rounds[1])
    assert typical["seconds"] == 12.0 and typical["sentences_per_s"] == round(100 / 12, 2) and typical["repeats"] == 3
    assert typical["sentences_per_s_range"] == [5.0, 10.0]


# --- Ray Data on a local cluster ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from mtonnx.scale import measure

    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # no token written to ~/.ray
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths have a length limit
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", _temp_dir=temp)
    yield ray
    left = measure.stop_ray()
    shutil.rmtree(temp, ignore_errors=True)
    if saved is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved
    assert left == 0, "Ray processes outlived ray.shutdown()"


@pytest.fixture(scope="module")
def ray_out(ray_cluster, hand_export, corpus, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("scale") / "ray"
    result = translate_files(
        hand_export,
        str(corpus / "*"),
        out,
        engine="ray",
        workers=2,
        batch_size=BATCH,
        options=OPTIONS,
        chunk_rows=2048,
        progress=False,
    )
    return out, result


@pytest.mark.ray
def test_ray_equals_local_and_keeps_ids_and_errors(ray_out, local_out):
    (out, result), (local, local_result) = ray_out, local_out
    assert _rows(out) == _rows(local)  # every column: ids, sources, positions, texts, translations, errors
    assert (result["workers"], result["rows"], result["errors"]) == (2, local_result["rows"], local_result["errors"])
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in local.iterdir())


@pytest.mark.ray
def test_ray_small_chunks_equal_local_small_chunks(ray_cluster, hand_export, corpus, tmp_path):
    run = dict(batch_size=BATCH, options=OPTIONS, chunk_rows=5, progress=False, log=None)
    (tmp_path / "empty.txt").write_bytes(b"")  # no rows: no chunk reaches a writer, the shard is still written
    files = [str(corpus / "doc0.txt"), str(corpus / "records.jsonl"), str(tmp_path / "empty.txt")]
    translate_files(hand_export, files, tmp_path / "local", **run)
    result = translate_files(hand_export, files, tmp_path / "ray", engine="ray", workers=2, **run)
    assert result["rows"] == 25 and _rows(tmp_path / "ray") == _rows(tmp_path / "local")
    assert pq.read_table(tmp_path / "ray" / "empty.parquet").num_rows == 0
    assert json.loads((tmp_path / "ray" / "empty.parquet.done").read_text())["rows"] == 0


@pytest.mark.ray
def test_ray_rerun_skips_finished_shards(ray_out, hand_export, corpus, capsys):
    out, first = ray_out
    argv = ["--model-dir", str(hand_export), "--input", str(corpus / "*"), "--output", str(out), "--engine", "ray"]
    argv += ["--beams", "2", "--max-new-tokens", "8", "--batch-size", str(BATCH), "--workers", "2"]
    before = _rows(out)
    assert main(_args(*argv)) == 1  # the corpus has bad rows: every run over it says so
    err = capsys.readouterr().err
    assert "skipping 6 of 6 inputs" in err and "0 rows from 0 files" in err
    (out / "bin.parquet").unlink()  # killed after claiming bin, before its shard
    assert main(_args(*argv)) == 1
    assert "skipping 5 of 6 inputs" in capsys.readouterr().err and _rows(out) == before


@pytest.mark.ray
def test_ray_refuses_a_pool_the_cluster_cannot_hold(ray_cluster, hand_export, corpus, tmp_path):
    with pytest.raises(ScaleError, match="the Ray cluster has 2 CPUs"):
        translate_files(hand_export, str(corpus / "doc1.txt"), tmp_path, engine="ray", workers=3, progress=False)


@pytest.mark.ray
def test_ray_reports_the_warnings_local_does(ray_cluster, hand_export, tmp_path):
    """An actor has no terminal: a cut sentence's warning travels with its row to the driver, which logs it."""
    long = ", ".join(["the teacher reads a book"] * 80)  # far more tokens than the model's positions
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "corpus.txt").write_text(f"Hello.\n{long}\n\nThank you.\n{long}\n", encoding="utf-8")
    run = dict(workers=2, chunk_rows=2, options={"num_beams": 1, "max_new_tokens": 4}, progress=False)
    logs: dict[str, list[str]] = {"local": [], "ray": []}
    for engine, lines in logs.items():
        translate_files(hand_export, str(tmp_path / "in"), tmp_path / engine, engine=engine, log=lines.append, **run)
    cuts = {engine: [line for line in lines if "too long" in line] for engine, lines in logs.items()}
    assert cuts["ray"] == cuts["local"]
    assert [line.split(":")[2] for line in cuts["ray"]] == [" corpus.txt line 2", " corpus.txt line 5"]


@pytest.mark.ray
def test_every_node_must_hold_the_driver_s_model(ray_cluster, hand_export, tmp_path):
    from mtonnx.runtime.integrity import content_key
    from mtonnx.scale import ray_engine

    ray_engine.check_nodes((str(hand_export),), content_key(hand_export))  # the same copy: nothing to say
    with pytest.raises(ScaleError, match=r"^node \S+ \(id \w+\) holds another model at .*: its files differ"):
        ray_engine.check_nodes((str(hand_export),), "0" * 64)
    missing = tmp_path / "nowhere"
    with pytest.raises(ScaleError, match=rf"^node \S+ \(id \w+\) has no model directory {missing}: copy it there"):
        ray_engine.check_nodes((str(missing),), content_key(hand_export))
