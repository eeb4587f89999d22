"""Nothing lost on any path: outputs that respect what their path is (device, FIFO, symlink, "-"), every sentence of
a paragraph translated through the API, and every refusal one line with exit 2 (a closed stdin, a full disk, a
prefix too long for the model, corrupt run directories for `compare`, broken model files)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import threading
import warnings
from pathlib import Path

import pytest

from conftest import REPO, mtonnx_cmd, run_cli
from mtonnx.runtime import Translator, layout
from mtonnx.runtime.decoding import MissingGenerationConfig
from mtonnx.runtime.segments import split_sentences

PARAGRAPH = (
    "I like to drink tea. He is very tall. We go to school every day. She bought a new book. It is raining today."
)


def translate_cli(model_dir: Path, *args: str, **options) -> subprocess.CompletedProcess:
    return run_cli("translate", "--model-dir", str(model_dir), "--max-new-tokens", "6", *args, **options)


def one_error_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one error line on stderr (the progress bar's lines aside), with the exit code `code`."""
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("translating:")]
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and len(lines) == 1 and lines[0].startswith("mtonnx: error: "), done.stderr
    return lines[0]


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("Hello, teacher!\nRun the command.\n", encoding="utf-8")
    return path


def null_device(path: Path) -> Path:
    """A character device with /dev/null's numbers at `path` (never the real /dev/null); skip where not permitted."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root (CI runs as root)")
    return path


# 1. `-o` writes what the path is: a device in place, a FIFO streamed, a symlink's target, "-" stdout.
def test_output_to_a_device_writes_it_in_place_and_it_stays_a_device(hand_export, source, tmp_path):
    device = null_device(tmp_path / "mynull")
    done = translate_cli(hand_export, "-i", str(source), "-o", str(device))
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(device.lstat().st_mode) and os.major(device.lstat().st_rdev) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "mynull"]  # no temp file left beside it


def test_output_through_a_symlink_writes_its_target_and_keeps_the_link(hand_export, source, tmp_path):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n", encoding="utf-8")
    link.symlink_to(target)
    done = translate_cli(hand_export, "-i", str(source), "-o", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert len(target.read_text(encoding="utf-8").splitlines()) == 2
    assert target.read_text(encoding="utf-8") == translate_cli(hand_export, "-i", str(source)).stdout


def test_output_to_a_fifo_is_streamed_to_its_reader(hand_export, source, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    done = translate_cli(hand_export, "-i", str(source), "-o", str(fifo))
    reader.join(timeout=60)
    if reader.is_alive():  # the command never opened the FIFO: release the reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert received and len(received[0].splitlines()) == 2


def test_dash_means_stdin_and_stdout(hand_export, source):
    done = translate_cli(hand_export, "-i", "-", "-o", "-", input=source.read_text(encoding="utf-8"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == translate_cli(hand_export, "-i", str(source)).stdout and len(done.stdout.splitlines()) == 2


def test_compare_out_through_a_symlinked_directory_and_as_a_file(tmp_path):
    run = write_run(tmp_path / "a")
    real, link = tmp_path / "reports", tmp_path / "reports-link"
    real.mkdir()
    link.symlink_to(real)
    done = run_cli("compare", str(run), str(run), "--out", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and (real / "compare.md").is_file()
    (tmp_path / "afile").write_text("x")
    line = one_error_line(run_cli("compare", str(run), str(run), "--out", str(tmp_path / "afile")))
    assert "--out" in line and "is a file" in line


# 2. A paragraph is translated whole through the API, sentence by sentence, and its lines are kept.
def test_the_api_translates_every_sentence_of_a_paragraph(hand_export):
    translator = Translator(hand_export)
    sentences = split_sentences(PARAGRAPH)
    assert len(sentences) == 5
    whole = translator.translate(PARAGRAPH, max_new_tokens=6)
    assert whole == "".join(translator.translate(sentences, max_new_tokens=6))
    lines = translator.translate("I like tea.\nHe is very tall.\n", max_new_tokens=6)
    assert lines.split("\n") == [*translator.translate(["I like tea.", "He is very tall."], max_new_tokens=6), ""]


def test_the_api_refuses_bytes_by_name(hand_export):
    with pytest.raises(TypeError, match=r"texts is bytes, not str: decode it first"):
        Translator(hand_export).translate(b"x")


# 4. A source prefix that leaves a sentence no room is refused before any work.
def test_a_prefix_longer_than_the_models_positions_is_one_line(hand_export, source):
    line = one_error_line(translate_cli(hand_export, "-i", str(source), "--source-prefix", " ".join(["word"] * 300)))
    assert "--source-prefix: the source prefix is" in line and "the model has 256 positions" in line
    with pytest.raises(ValueError, match="the model has 256 positions"):
        Translator(hand_export).translate("Hello.", source_prefix=" ".join(["word"] * 300))


# 7. stdin and stdout that cannot be used: rc 0 or 2, one line, never a traceback.
def shell(command: str, hand_export: Path) -> subprocess.CompletedProcess:
    line = " ".join(mtonnx_cmd("translate", "--model-dir", str(hand_export), "--max-new-tokens", "6"))
    return subprocess.run(["bash", "-c", f"{line} {command}"], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_empty_stdin_translates_to_nothing(hand_export):
    done = shell("< /dev/null", hand_export)
    assert done.returncode == 0 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr


def test_a_closed_stdin_is_one_line(hand_export):
    assert "stdin is closed" in one_error_line(shell("<&-", hand_export))


def test_a_full_disk_on_stdout_is_one_line(hand_export, source):
    assert "No space left on device" in one_error_line(shell(f"-i {source} > /dev/full", hand_export))


def test_output_under_proc_is_one_line_before_any_work(hand_export, source):
    line = one_error_line(translate_cli(hand_export, "-i", str(source), "-o", "/proc/mtonnx-out.txt"))
    assert "cannot create a file in /proc" in line


# 5. compare: corrupt run directories are one line and exit 2; a run compared with itself changed nothing.
def write_run(directory: Path) -> Path:
    """A run directory as `mtonnx run` writes it: metrics with bench and quant timings, env, translations."""
    results = [
        {"engine": e, "config": "b1_beam1_t1_n8", "times_ms": [ms, ms * 1.05, ms * 0.95, ms, ms * 1.1]}
        for e, ms in {"pytorch-fp32": 12.0, "optimum-fp32": 8.0, "mtonnx-int8": 2.0, "ct2-int8": 1.0}.items()
    ]
    quant = {
        name: {"bleu": 10.0 + i, "gate": "pass", "size_mb": 4.0 * (i + 1), "times_ms_b1": [3.0, 3.1, 2.9, 3.0, 3.2]}
        for i, name in enumerate(("fp32", "int8"))
    }
    directory.mkdir(parents=True)
    metrics = {"bench": {"results": results}, "quant": quant, "run": {"fingerprint": "abc"}}
    (directory / "metrics.json").write_text(json.dumps(metrics))
    env = {"params": {"model": {"name": "tiny"}}, "packages": {"onnxruntime": "1.23"}, "cpu": {"model": "x"}}
    (directory / "env.json").write_text(json.dumps(env))
    (directory / "variants").mkdir()
    translations = {"sources": ["Hello."], "variants": {"fp32": ["你好。"], "int8": ["你好。"]}}
    (directory / "variants" / "translations.json").write_text(json.dumps(translations, ensure_ascii=False))
    return directory


def test_compare_of_a_run_with_itself_changed_nothing_in_any_kind(tmp_path):
    run = write_run(tmp_path / "a")
    done = run_cli("compare", str(run), str(run), "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {kind: len(items) for kind, items in result["changes"].items()} == dict.fromkeys(result["changes"], 0)
    assert all(t["changed"] == 0 for t in result["translations"].values()) and result["fingerprints"]["equal"]


CORRUPTIONS = {
    "metrics.json a list": ("metrics.json", "[1, 2]", "metrics.json holds a JSON list"),
    "metrics.json not JSON": ("metrics.json", "{oops", "metrics.json cannot be read"),
    "metrics.json bench a string": ("metrics.json", '{"bench": "x"}', "'bench' is str"),
    "metrics.json tuning a string": ("metrics.json", '{"tuning": "x"}', "'tuning' is str"),
    "metrics.json tuning a list": ("metrics.json", '{"tuning": [1]}', "'tuning' is list"),
    "metrics.json bench results of strings": ("metrics.json", '{"bench": {"results": ["x"]}}', "bench.results"),
    "env.json params a list": ("env.json", '{"params": []}', "'params' is list"),
    "env.json compare a string": ("env.json", '{"params": {"compare": "x"}}', "'compare' is str"),
    "env.json speed margin a string": (
        "env.json",
        '{"params": {"model": {"name": "tiny"}, "compare": {"speed_margin": "x"}}}',
        "params.compare.speed_margin",
    ),
    "translations.json variants a list": ("variants/translations.json", '{"variants": ["x"]}', "translations.json"),
    "translations.json variant a string": ("variants/translations.json", '{"variants": {"a": "x"}}', "translations"),
    "env.json missing": ("env.json", None, "has no env.json"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_compare_of_a_corrupt_run_is_one_line_and_exit_2(tmp_path, case):
    name, content, message = CORRUPTIONS[case]
    good, bad = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    if content is None:
        (bad / name).unlink()
    else:
        (bad / name).write_text(content)
    for a, b in ((good, bad), (bad, good)):
        line = one_error_line(run_cli("compare", str(a), str(b)))
        assert message in line, line


def test_compare_to_a_full_stdout_names_the_comparison_and_exit_2(tmp_path):
    run = write_run(tmp_path / "a")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            mtonnx_cmd("compare", str(run), str(run)), stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert done.returncode == 2, done.stderr
    line = one_error_line(done)
    assert "cannot write the comparison to stdout" in line and "--out DIR" in line, line


# 6. Model directory faults name the file; a missing generation_config.json says which settings were taken.
def copy_without(export: Path, target: Path, name: str, content: str | None = None) -> Path:
    shutil.copytree(export, target)
    (target / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    if content is None:
        (target / name).unlink()
    else:
        (target / name).write_text(content)
    return target


def test_a_missing_generation_config_warns_with_the_settings_taken(hand_export, source, tmp_path):
    broken = copy_without(hand_export, tmp_path / "m", "generation_config.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        translator = Translator(broken)
    messages = [str(w.message) for w in caught if issubclass(w.category, MissingGenerationConfig)]
    assert len(messages) == 1 and "has no generation_config.json" in messages[0]
    assert f"num_beams {translator.settings.num_beams} (" in messages[0]
    done = translate_cli(broken, "-i", str(source))
    warned = [line for line in done.stderr.splitlines() if line.startswith("mtonnx: warning:")]
    assert done.returncode == 0 and len(warned) == 1 and "generation_config.json" in warned[0], done.stderr


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("config.json", '{\n "d_model": 64\n "x": 1}', "config.json is not readable JSON"),
        ("config.json", '{"max_position_embeddings": "abc"}', "config.json: max_position_embeddings is 'abc'"),
        ("config.json", "[]", "config.json holds a JSON list"),
        ("generation_config.json", "{oops", "generation_config.json cannot be read"),
    ],
    ids=["malformed", "positions not a number", "a list", "generation config malformed"],
)
def test_a_broken_config_names_the_file(hand_export, source, tmp_path, name, content, message):
    broken = copy_without(hand_export, tmp_path / "m", name, content)
    line = one_error_line(translate_cli(broken, "-i", str(source)))
    assert message in line, line


def test_a_lone_surrogate_is_one_line_naming_it_not_sentencepieces_error(hand_export):
    translator = Translator(hand_export)
    with pytest.raises(ValueError) as caught:
        translator.translate(["Fine.", "I like \ud800 tea."])
    assert str(caught.value) == "texts[1] holds a lone surrogate (U+D800 at character 7): it is not Unicode text"


def test_doctor_on_a_directory_that_is_not_there_or_a_file_is_one_line_and_exit_2(tmp_path):
    a_file = tmp_path / "model.onnx"
    a_file.write_bytes(b"x")
    for given, what in ((tmp_path / "nope", "does not exist"), (a_file, "is a file, not a directory")):
        line = one_error_line(run_cli("doctor", "--model-dir", str(given)))
        assert line == f"mtonnx: error: --model-dir {given} {what}: give an export, variant or deploy/ directory"


def test_doctor_to_a_full_stdout_names_its_report_and_exit_2(hand_export, tiny_dir):
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            mtonnx_cmd("doctor", "--model-dir", str(hand_export), "--source", str(tiny_dir)),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    line = one_error_line(done)
    assert "cannot write doctor's report to stdout" in line, line
