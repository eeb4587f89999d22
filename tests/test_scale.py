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
from mtonnx.runtime.textio import split_sentences, translate_lines
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
        assert [r["translation"] for r in rows] == translate_lines(translate, [r["text"] for r in rows])
    rows = [r for r in _rows(out) if r["source"].endswith("doc1.txt")]
    singles = [r for r in rows if r["text"]]  # one sentence a line: exactly Translator.translate of the lines
    assert [r["translation"] for r in singles] == translate([r["text"] for r in singles])
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
        f"{s}.parquet{e}" for s in ("doc0", "doc1", "doc2", "records", "bin", "str") for e in ("", ".done")
    )


def test_rerun_skips_and_redoes_only_incomplete(hand_export, corpus, tmp_path):
    out = tmp_path / "out"
    run = dict(batch_size=BATCH, options=OPTIONS, progress=False, log=None)
    inputs_ = [str(corpus / "doc1.txt"), str(corpus / "doc2.txt"), str(corpus / "str.parquet")]
    first = translate_files(hand_export, inputs_, out, **run)
    assert translate_files(hand_export, inputs_, out, **run)["skipped"] == 3
    before = _rows(out)
    (out / "doc1.parquet.done").unlink()  # killed between the shard's rename and its sidecar
    with open(out / "doc2.parquet", "ab") as f:  # a shard that is not the one its sidecar describes
        f.write(b"junk")
    (out / ".str.parquet-x1y2").write_bytes(b"half a file")  # a killed write's temp file
    again = translate_files(hand_export, inputs_, out, **run)
    assert (again["skipped"], again["rows"]) == (1, first["rows"] - 2)
    assert _rows(out) == before and not list(out.glob(".*"))
    other = translate_files(hand_export, inputs_, out, **{**run, "options": {"num_beams": 1, "max_new_tokens": 4}})
    assert (other["skipped"], other["redone"]) == (0, 3)  # other settings: redone, never mixed in


def test_interrupted_write_leaves_nothing_complete(corpus, tmp_path, monkeypatch):
    job, item = shards.Job(str(tmp_path)), inputs.find_inputs([str(corpus / "doc1.txt")])[0]
    chunk_rows = work.file_chunks(Path(item.path).read_bytes(), item)
    table = work.translated(chunk_rows, [(c["text"], c["error"]) for c in chunk_rows])

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
    table = work.translated(chunk_rows, [(c["text"], c["error"]) for c in chunk_rows])
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
    translations, errors = chunks.translate(["Hello.", "boom", "", "Thank you."], ["", "", "", ""])
    assert errors == ["", "translation failed: RuntimeError: the model broke", "", ""]
    assert translations[1:3] == ["", ""] and translations[0] == real(["Hello."], **OPTIONS)[0]


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


@pytest.mark.parametrize("module", ["ray.data", "pyarrow"])
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
    assert main(_args(*argv)) == 0
    err = capsys.readouterr().err
    assert "22 rows from 2 files (6 with an error)" in err and "[local]" in err
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["id"] == "101" and set(json.loads(lines[0])) == set(shards.OUTPUT.names)
    assert main(_args(*argv)) == 0 and "skipping 2 of 2 inputs" in capsys.readouterr().err


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
    assert main(_args(*argv)) == 0
    err = capsys.readouterr().err
    assert "skipping 6 of 6 inputs" in err and "0 rows from 0 files" in err
    (out / "bin.parquet.done").unlink()
    assert main(_args(*argv)) == 0
    assert "skipping 5 of 6 inputs" in capsys.readouterr().err and _rows(out) == before


@pytest.mark.ray
def test_ray_refuses_a_pool_the_cluster_cannot_hold(ray_cluster, hand_export, corpus, tmp_path):
    with pytest.raises(ScaleError, match="the Ray cluster has 2 CPUs"):
        translate_files(hand_export, str(corpus / "doc1.txt"), tmp_path, engine="ray", workers=3, progress=False)
