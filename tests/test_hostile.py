"""Hostile but fair input to `translate`, the runtime, `doctor` and `run`: every case ends in the right exit code
and one line on stderr (never a traceback), output aligned with the input line by line, and input and existing
output files untouched on failure."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_notebook

from conftest import REPO, cli_env, mtonnx_cmd, run_cli, tuned_variants
from mtonnx.runtime import Translator, layout
from mtonnx.runtime.segments import clean, segment, split_sentences
from mtonnx.runtime.textio import line_chunks

GOOD_OUTPUT = "an earlier, good translation\n"


def translate_cli(model_dir, *args: str, stdin: bytes | None = None, cwd=REPO) -> subprocess.CompletedProcess:
    return run_cli(
        "translate", "--model-dir", str(model_dir), "--max-new-tokens", "8", *args, input=stdin, cwd=cwd, text=False
    )


def one_error_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    stderr = done.stderr.decode() if isinstance(done.stderr, bytes) else done.stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert done.returncode == code, stderr
    assert "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith("mtonnx: error: "), stderr
    return lines[0]


@pytest.fixture
def files(tmp_path):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("Hello, teacher!\nRun the command.\n", encoding="utf-8")
    output.write_text(GOOD_OUTPUT, encoding="utf-8")
    return source, output


def unchanged(source: Path, output: Path) -> bool:
    return (
        source.read_text(encoding="utf-8") == "Hello, teacher!\nRun the command.\n"
        and output.read_text(encoding="utf-8") == GOOD_OUTPUT
    )


# Row 1: a form feed (or any other line-breaking character but "\n") never adds an output line.
def test_control_characters_never_break_a_line(hand_export, tmp_path):
    lines = ["Hello,\x0cteacher!", "Run\x0bthe\x1ccommand.", "", "He\x85wears\u2028a\u2029suit.\r", "End."]
    source = tmp_path / "in.txt"
    source.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    done = translate_cli(hand_export, "-i", str(source))
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    translator = Translator(hand_export)
    for line, translated in zip(lines, out):
        sentences = split_sentences(clean(line.removesuffix("\r")))
        assert translated == "".join(translator.translate(sentences, max_new_tokens=8)), line


def split_lines(text: str, size: int = 3) -> list[str]:
    """The lines `mtonnx translate` reads from `text`, read `size` at a time (so chunk edges are crossed)."""
    return [line for chunk in line_chunks(io.BytesIO(text.encode("utf-8")), "text", size=size) for line in chunk]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_any_text_gives_one_output_line_per_input_line(text):
    lines = split_lines(text.removeprefix("\ufeff"))
    text = text.removeprefix("\ufeff")
    assert len(lines) == text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    segmented = segment(lines)
    out = segmented.join(f"<{s}>" for s in segmented.pieces)
    assert len(out) == len(lines)
    for line, translated in zip(lines, out):
        assert "\n" not in translated
        assert translated == "".join(f"<{s}>" for s in split_sentences(clean(line)))


@settings(max_examples=12, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40), max_size=5))
def test_the_api_gives_one_output_per_input(hand_export, texts):
    out = Translator(hand_export).translate(texts, max_new_tokens=4)
    assert isinstance(out, list) and len(out) == len(texts) and all(isinstance(t, str) for t in out)


# Rows 2 and 6: options checked up front, before any model is loaded (the model directory does not even exist).
@pytest.mark.parametrize(
    "args",
    [
        ["--batch-size", "-2"],
        ["--batch-size", "0"],
        ["--batch-size", "1000"],
        ["--beams", "-1"],
        ["--beams", "0"],
        ["--max-new-tokens", "-3"],
        ["--max-new-tokens", "0"],
        ["--threads", "-1"],
        ["--threads", "1000"],
        ["--batch-size", "many"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_options_are_one_line_before_any_model_loads(tmp_path, files, args):
    source, output = files
    start = time.perf_counter()
    line = one_error_line(translate_cli(tmp_path / "no-model", "-i", str(source), "-o", str(output), *args))
    assert args[0] in line and time.perf_counter() - start < 10
    assert unchanged(source, output)


def test_max_new_tokens_past_the_models_positions_is_refused(hand_export, files):
    source, output = files
    line = one_error_line(
        translate_cli(hand_export, "-i", str(source), "-o", str(output), "--max-new-tokens", "100000")
    )
    assert "the model has 256 positions, so at most 255 new tokens" in line and unchanged(source, output)


def test_threads_zero_is_onnx_runtimes_default(hand_export, files, tmp_path):
    source, _ = files
    done = translate_cli(hand_export, "-i", str(source), "--threads", "0")
    assert done.returncode == 0 and len(done.stdout.decode().splitlines()) == 2


def test_the_api_checks_the_same_rules(hand_export):
    translator = Translator(hand_export)
    for options, message in (
        ({"batch_size": -2}, "batch_size must be an integer from 1 to 256"),
        ({"num_beams": 0}, "num_beams must be an integer from 1"),
        ({"max_new_tokens": 100000}, "max_new_tokens must be an integer from 1 to 255 (the model has 256 positions)"),
    ):
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            translator.translate(["Hello."], **options)


# Rows 3 and 7: the output is checked before any work and written atomically; the input is never modified.
def test_output_onto_the_input_is_refused(hand_export, files):
    source, output = files
    line = one_error_line(translate_cli(hand_export, "-i", str(source), "-o", str(source)))
    assert "is the input file" in line and unchanged(source, output)


def test_output_into_a_missing_directory_is_refused_before_translating(hand_export, files, tmp_path):
    source, output = files
    start = time.perf_counter()
    line = one_error_line(translate_cli(hand_export, "-i", str(source), "-o", str(tmp_path / "nope" / "out.txt")))
    assert "does not exist" in line and time.perf_counter() - start < 30 and unchanged(source, output)


def test_output_is_written_whole_and_nothing_else_is_left(hand_export, files):
    source, output = files
    done = translate_cli(hand_export, "-i", str(source), "-o", str(output))
    assert done.returncode == 0 and len(output.read_text(encoding="utf-8").splitlines()) == 2
    assert sorted(p.name for p in output.parent.iterdir()) == ["in.txt", "out.txt"]


# Row 5: a line longer than the model's positions is translated in pieces, and stderr names the line.
def test_a_5000_word_line_is_translated_in_pieces_named_by_line(hand_export, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("Hello.\n" + " ".join(["the teacher reads a long book"] * 850) + "\n", encoding="utf-8")
    done = translate_cli(hand_export, "-i", str(source))
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode().split("\n")
    assert len(out) == 3 and "line 2: a sentence too long for the model was translated in" in done.stderr.decode()
    assert len(out[1]) > 20 * len(out[0])  # every piece translated, not 97 % dropped


# Row 8: invalid UTF-8 is one line naming the line and byte; --errors replace goes on.
@pytest.mark.parametrize("via", ["file", "stdin"])
def test_invalid_utf8_names_the_line_and_byte(hand_export, tmp_path, via):
    data = b"Hello.\nGood \xff\xfe morning.\nBye.\n"
    source = tmp_path / "in.txt"
    source.write_bytes(data)
    args, stdin = (["-i", str(source)], None) if via == "file" else ([], data)
    line = one_error_line(translate_cli(hand_export, *args, stdin=stdin))
    assert "line 2, byte 5: not valid UTF-8" in line and "--errors replace" in line
    done = translate_cli(hand_export, *args, "--errors", "replace", stdin=stdin)
    assert done.returncode == 0 and len(done.stdout.decode().splitlines()) == 3


# Rows 9 and 13: broken files are one ModelDirError naming the file and the fix.
def broken_copy(source: Path, target: Path, breaking) -> Path:
    shutil.copytree(source, target)
    (target / layout.SUMS).unlink()  # edited by hand: no SHA256SUMS (test_integrity checks the list)
    breaking(target)
    return target


def truncate(name: str):
    return lambda d: (d / name).write_bytes((d / name).read_bytes()[: (d / name).stat().st_size // 3])


BREAKAGES = {
    "truncated encoder": (truncate(layout.ENCODER), layout.ENCODER),
    "random-bytes decoder": (lambda d: (d / layout.DECODER).write_bytes(os.urandom(4096)), layout.DECODER),
    "vocab.json without <pad>": (
        lambda d: (d / "vocab.json").write_text(
            json.dumps({k: v for k, v in json.loads((d / "vocab.json").read_text()).items() if k != "<pad>"})
        ),
        "vocab.json",
    ),
    "vocab.json not JSON": (lambda d: (d / "vocab.json").write_text("{oops"), "vocab.json"),
    "truncated source.spm": (truncate("source.spm"), "tokenizer"),
}


@pytest.mark.parametrize("case", list(BREAKAGES))
def test_a_broken_export_is_one_line_naming_the_file(hand_export, tmp_path, files, case):
    breaking, named = BREAKAGES[case]
    broken = broken_copy(hand_export, tmp_path / "broken", breaking)
    source, output = files
    line = one_error_line(translate_cli(broken, "-i", str(source), "-o", str(output)))
    assert named in line and unchanged(source, output), line


@pytest.fixture(scope="module")
def tuned(dynamo_export, tmp_path_factory):
    return Path(tuned_variants(dynamo_export, tmp_path_factory.mktemp("hostile-tuned"))["int8-tuned"])


@pytest.mark.parametrize("case", ["missing", "truncated"])
def test_a_tuned_variant_without_its_whole_weights_file_names_it(tuned, tmp_path, files, case):
    breaking = (lambda d: (d / layout.WEIGHTS).unlink()) if case == "missing" else truncate(layout.WEIGHTS)
    broken = broken_copy(tuned, tmp_path / "broken", breaking)
    source, output = files
    line = one_error_line(translate_cli(broken, "-i", str(source), "-o", str(output)))
    assert "cannot be loaded by ONNX Runtime" in line and unchanged(source, output), line


# Row 4: doctor checks the layout translate would pick.
@pytest.mark.parametrize("step", [layout.INPLACE_STEP, layout.TUNED_STEP, layout.SEARCH_HEAD])
def test_doctor_fails_a_variant_with_any_onnx_file_truncated(tiny_dir, tuned, tmp_path, step):
    """The default layout's step, and files of other layouts that `--decoder` can load (issue 36: a truncated
    decoder_with_past_tuned.onnx passed, since only the default layout's files were loaded)."""
    broken = broken_copy(tuned, tmp_path / "broken", truncate(step))
    done = run_cli("doctor", "--model-dir", str(broken), "--source", str(tiny_dir), "--json", timeout=300)
    rows = json.loads(done.stdout)
    assert done.returncode == 1 and rows[-1]["status"] == "fail" and step in rows[-1]["evidence"]


def test_doctor_checks_greedy_tokens_of_the_layout_translate_picks(tiny_dir, tuned):
    from mtonnx.check.doctor import diagnose

    rows = {r["check"]: r for r in diagnose(tuned, source=tiny_dir)}
    assert rows["every ONNX file loads"]["evidence"].startswith("inplace layout")
    assert rows["greedy tokens = generate (inplace layout)"]["status"] in ("ok", "warn")  # int8: a warning at worst


# Row 10: a shuffled vocab.json of the right size is caught by doctor.
def test_doctor_catches_a_shuffled_vocab(tiny_dir, hand_export, tmp_path):
    from mtonnx.check.doctor import diagnose

    def shuffle(d: Path):
        vocab = json.loads((d / "vocab.json").read_text())
        pieces = list(vocab)
        (d / "vocab.json").write_text(json.dumps(dict(zip(pieces, reversed(list(vocab.values()))))))

    rows = {r["check"]: r for r in diagnose(broken_copy(hand_export, tmp_path / "b", shuffle), source=tiny_dir)}
    assert rows["tokenizer vocabulary = the source model's"]["status"] == "fail"


# Row 13: doctor without a source model, and on a hard-linked weights file: rows, not tracebacks.
def test_doctor_without_a_source_model_is_a_row(hand_export, tmp_path):
    done = run_cli("doctor", "--model-dir", str(hand_export), "--source", str(tmp_path / "nope"), timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("source model "))
    assert row.split()[2] == "fail" and "does not exist" in row


def test_doctor_on_a_hard_linked_weights_file(tiny_dir, tuned, tmp_path):
    from mtonnx.check.doctor import diagnose

    linked = tmp_path / "linked"
    linked.mkdir()
    for f in tuned.iterdir():
        (os.link if f.name == layout.WEIGHTS else shutil.copy2)(f, linked / f.name)
    rows = diagnose(linked, source=tiny_dir)
    assert rows[0]["status"] == "ok" and not [r for r in rows if r["status"] == "fail"], rows
    assert Translator(linked).translate("Hello.", max_new_tokens=4)


# Row 11: abbreviations do not end a sentence.
@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Mr. Smith went to Washington.", 1),
        ("The U.S. Army arrived on Monday. It left.", 2),
        ("Dr. J. Smith, e.g. this one, is here.", 1),
        ("Version 3.9 is required.", 1),
        ("Run it. Then stop!", 2),
    ],
)
def test_abbreviations_do_not_end_a_sentence(text, sentences):
    assert len(split_sentences(text)) == sentences, split_sentences(text)


# Row 12: the API's types.
def test_a_string_in_gives_a_string_out_and_other_types_are_refused(hand_export):
    translator = Translator(hand_export)
    assert translator.translate("Hello.", max_new_tokens=4) == translator.translate(["Hello."], max_new_tokens=4)[0]
    for texts, where in ((["Hello.", None], "texts\\[1\\] is NoneType"), ([7], "texts\\[0\\] is int")):
        with pytest.raises(TypeError, match=where):
            translator.translate(texts)


# Row 14: bad `run` arguments and params files are one line, exit 2.
def run_command(*args: str, cwd=REPO, models_dir=None) -> subprocess.CompletedProcess:
    return run_cli("run", *args, cwd=cwd, env=cli_env(models_dir) if models_dir else None, timeout=120)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "is a directory, not a params file"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not a text file"),
        (b"export:\n  tolerance: .nan\n", "must be a finite number"),
        (b"data:\n  hsk_size: 3\n  hsk_size: 4\n", "duplicate key 'hsk_size'"),
    ],
    ids=["directory", "binary", "nan", "duplicate keys"],
)
def test_bad_params_files_are_one_line(tmp_path, content, message):
    path = tmp_path / "p.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    line = one_error_line(run_command("--params", str(path)))
    assert message in line, line


def test_only_without_a_notebook_number_and_out_as_a_file_are_one_line(tmp_path):
    assert "--only ',': give notebook numbers" in one_error_line(
        run_command("--params", "params/ci.yaml", "--only", ",")
    )
    (tmp_path / "file").write_text("x")
    line = one_error_line(run_command("--params", "params/ci.yaml", "--out", str(tmp_path / "file")))
    assert "is a file: give a directory" in line


# Row 15: Ctrl-C during `run` writes the report, marked interrupted, exit 130, no traceback.
def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT's default disposition in the child, as in a terminal: a job that a script starts in the
    background inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_a_run_writes_the_report_marked_interrupted(tmp_path, models_dir):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    cells = [
        new_code_cell('params_path = ""\nrun_dir = ""\nmodels_dir = ""', metadata={"tags": ["parameters"]}),
        new_code_cell("import time\ntime.sleep(120)"),
    ]
    metadata = {"kernelspec": {"name": "mtonnx", "display_name": "mtonnx", "language": "python"}}
    nbformat.write(new_notebook(cells=cells, metadata=metadata), notebooks / "01_slow.ipynb")
    out = tmp_path / "run"
    process = subprocess.Popen(
        mtonnx_cmd(
            "run", "--params", str(REPO / "params" / "ci.yaml"), "--out", str(out), "--notebooks", str(notebooks)
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(models_dir),
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    # The kernel's log appears when the runner launches it, inside the step that Ctrl-C must stop cleanly: the output
    # folder alone came first by seconds of set-up (versions, model), which a busy machine stretched past a fixed wait.
    kernel_log = out / "notebooks" / "01_slow.kernel.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not kernel_log.is_file():
        time.sleep(0.2)
    time.sleep(3)  # the kernel is running the sleeping cell
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "mtonnx: interrupted:" in stderr.strip().splitlines()[-1]
    index = (out / "index.html").read_text()
    assert "Run interrupted" in index


def test_python_runs_the_cli_module_too():
    done = subprocess.run(
        [sys.executable, "-m", "mtonnx", "translate", "--batch-size", "0", "--model-dir", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith("mtonnx: error: translate: argument --batch-size")


class _Endless(io.RawIOBase):
    """`lines` lines of 64 bytes made as they are read: a large input that no test file has to hold."""

    def __init__(self, lines: int):
        self.left, self.line = lines, b"x" * 63 + b"\n"

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer) // len(self.line), self.left)
        data = self.line * count
        buffer[: len(data)] = data
        self.left -= count
        return len(data)


def test_reading_holds_one_chunk_of_lines_whatever_the_input_length():
    import tracemalloc

    tracemalloc.start()
    lines = sum(len(chunk) for chunk in line_chunks(io.BufferedReader(_Endless(1_000_000)), "big", size=1024))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert lines == 1_000_000
    assert peak < 2_000_000, f"peak {peak} bytes while reading 64 MB"


def test_translate_writes_the_first_lines_before_the_input_ends(hand_export):
    """A stream in, a stream out: translations of the first chunk arrive while stdin is still open."""
    process = subprocess.Popen(
        mtonnx_cmd("translate", "--model-dir", str(hand_export), "--max-new-tokens", "2"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    try:
        process.stdin.write(b"Hello.\n" * 1500)
        process.stdin.flush()
        first = [process.stdout.readline() for _ in range(1024)]  # blocks until they come: stdin stays open
        assert all(line.endswith(b"\n") for line in first) and len(set(first)) == 1
        process.stdin.close()
        rest = process.stdout.read().splitlines(keepends=True)
        assert process.wait(timeout=120) == 0 and len(rest) == 1500 - 1024 and set(rest) == set(first)
    finally:
        process.kill()


def test_a_bad_byte_after_the_first_chunk_writes_no_output_file(hand_export, tmp_path):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(b"Hello.\n" * 1100 + b"caf\xe9\n")
    done = translate_cli(hand_export, "-i", str(source), "-o", str(out))
    errors = [line for line in done.stderr.decode().splitlines() if line.startswith("mtonnx:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()
    assert errors == [
        f"mtonnx: error: {source}: line 1101, byte 3: not valid UTF-8 (invalid continuation byte); convert the file "
        "to UTF-8, or pass --errors replace to translate it with the bad bytes replaced"
    ]
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["in.txt"]
