"""The `mtonnx` command line.

- `run`: execute the notebook pipeline for a params file. Heavy libraries (torch, papermill) are
  imported only after the params file validated, so a bad params file is reported before they load.
- `translate`: translate English text with an exported model, torch-free (the deployed runtime).
- `bench`: the peer benchmark for a params file (results JSON in the run dir).
- `doctor`: check an export against its source model (table or JSON; exit 1 on any failure).
- `compare`: what changed between two run directories, classified; exit 1 on a regression (JSON only, no torch).
- `export-web`: a run's model as the web export (deploy/web), for Transformers.js and the JavaScript runtime (js/).
- `serve`, `serve-bench`: the HTTP translation service and its load generator (the `serve` extra).
- `batch`: translate a corpus locally or on Ray Data (the `scale` extra).
- `train`: train the default model from packaged data (`make model`).
- `migrate`: a user's own checkpoint through the lab's steps as one verified command, into deploy/.

Every error a user can cause is one line on stderr and exit code 2 (bad input) or 1 (a run or check failed);
Ctrl-C is exit 130, never a traceback. A command whose extra is not installed says which one to install.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
import warnings
from pathlib import Path

from mtonnx.foundation.arguments import add_model_source, in_range

EXTRAS = {
    "run": "lab",
    "bench": "lab",
    "train": "lab",
    "migrate": "lab",
    "serve": "serve",
    "serve-bench": "serve",
    "batch": "scale",
}
NEEDS = {"lab": ("torch", "papermill", "yaml"), "serve": ("fastapi", "uvicorn"), "scale": ("pyarrow",)}


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument as one line (`mtonnx: error: ...`) and exit code 2."""

    def error(self, message: str):
        """One line and exit 2, instead of argparse's usage block."""
        self.exit(2, f"mtonnx: error: {self.prog.removeprefix('mtonnx ')}: {message}\n")


def build_parser() -> Parser:
    """The whole command line."""
    from mtonnx.runtime.layouts import PUBLIC

    parser = Parser(prog="mtonnx", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    run = commands.add_parser("run", help="execute the notebooks with papermill and write the report")
    run.add_argument("--params", required=True, help="params YAML file, e.g. params/default.yaml")
    run.add_argument("--out", help="run directory (default: outputs/<params name>)")
    run.add_argument("--only", help="comma-separated notebook numbers to run, e.g. 01,02")
    run.add_argument("--notebooks", help="directory of NN_name.ipynb notebooks (default: the project's)")
    translate = commands.add_parser("translate", help="translate English text with an exported model (no torch)")
    add_model_source(translate, "export directory (hand export, optimum's, a variant, a run's deploy/)")
    translate.add_argument("-i", "--input", help="input text file, one sentence or paragraph per line (default: stdin)")
    translate.add_argument("-o", "--output", help="output file, written when complete (default: stdout)")
    translate.add_argument("--beams", type=in_range(int, 1, 64), help="beam size (default: the model's)")
    translate.add_argument(
        "--max-new-tokens",
        type=in_range(int, 1),
        help="longest translation in tokens (default: the model's; at most its positions - 1)",
    )
    translate.add_argument(
        "--batch-size",
        type=in_range(int, 1, 256),
        default=16,
        help="sentences per model call (1..256; memory grows with it)",
    )
    translate.add_argument(
        "--source-prefix", help="e.g. '>>cmn_Hans<<' for opus-mt-en-zh (default: a deploy/ directory's own, else none)"
    )
    translate.add_argument("--decoder", default="auto", choices=("auto", *PUBLIC))
    translate.add_argument(
        "--threads",
        type=in_range(int, 0, 256),
        default=1,
        help="ONNX Runtime threads per session (0: ONNX Runtime's default)",
    )
    translate.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default="strict",
        help="invalid UTF-8 in the input: stop with the line and byte (strict) or replace it",
    )
    bench = commands.add_parser("bench", help="the benchmark's studies (PyTorch, optimum, mtonnx, CTranslate2, ...)")
    bench.add_argument("--params", help="params YAML file; its bench section sets the matrix")
    bench.add_argument("--out", help="run directory (default: outputs/<params name>)")
    bench.add_argument("--only", help="comma-separated studies to run, e.g. peers,corpus (default: all; see --list)")
    bench.add_argument("--list", action="store_true", help="name the studies and what each measures, then stop")
    doctor = commands.add_parser("doctor", help="check an export directory against its source model")
    doctor.add_argument(
        "--model-dir", required=True, help="the export directory (hand, optimum, a variant, deploy/, deploy/web)"
    )
    doctor.add_argument(
        "--source", help="the source model, a Hugging Face directory (default: the one the export's manifest names)"
    )
    doctor.add_argument("--tolerance", type=in_range(float, 0.0, 1.0), default=1e-4, help="fp32 logits tolerance")
    doctor.add_argument("--json", action="store_true", help="print the rows as JSON (for CI)")
    compare = commands.add_parser("compare", help="what changed between two run directories (exit 1 on a regression)")
    compare.add_argument("run_a", help="the run compared against, e.g. main's last run")
    compare.add_argument("run_b", help="the run under review, e.g. a branch's")
    compare.add_argument("--out", help="directory to write compare.<format> into (default: print it)")
    compare.add_argument("--format", choices=("md", "html", "json"), default="md")
    compare.add_argument("--speed-margin", type=in_range(float, 1.0), help="beyond-spread factor (default: B's params)")
    compare.add_argument("--size-threshold", type=in_range(float, 0.0), help="relative size/memory change that counts")
    web = commands.add_parser("export-web", help="a run's model for the browser and Node (deploy/web)")
    web.add_argument("run_dir", help="the run directory (`mtonnx run` or `mtonnx migrate` wrote it)")
    web.add_argument("--out", help="the directory to write (default: RUN_DIR/deploy/web)")
    train = commands.add_parser("train", help="train the default model from packaged data (params: train section)")
    train.add_argument("--params", required=True, help="params YAML file, e.g. params/train.yaml")
    for name, module, help_ in (
        (
            "migrate",
            "mtonnx.migrate",
            "your own checkpoint through the lab's steps, verified, into deploy/ (lab extra)",
        ),
        ("serve", "mtonnx.serve", "the HTTP translation service (serve extra)"),
        ("serve-bench", "mtonnx.serve", "load-test a running service (serve extra)"),
        ("batch", "mtonnx.scale", "translate a corpus locally or on Ray (scale extra)"),
    ):
        sub = commands.add_parser(name, help=help_)
        try:  # the packages' argument definitions are argparse only: they load without their extra
            getattr(_module(module), "bench_arguments" if name == "serve-bench" else "add_arguments")(sub)
        except ImportError:
            sub.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = _missing_extra(args.command)
    if missing:
        print(
            f"mtonnx: error: `mtonnx {args.command}` needs the {missing} extra: pip install 'mtonnx[{missing}]'",
            file=sys.stderr,
        )
        return 2
    warnings.showwarning = _one_line_warning
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("mtonnx: interrupted", file=sys.stderr)
        return 130


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A library's or the runtime's warning as one line on stderr, without the source line Python adds."""
    print(f"mtonnx: warning: {' '.join(str(message).split())}", file=sys.stderr)


def _has(extra: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in NEEDS[extra])


def _missing_extra(command: str) -> str | None:
    extra = EXTRAS.get(command)
    return extra if extra and not _has(extra) else None


def _module(name: str):
    return importlib.import_module(name)


def _with_params(command):
    """Load --params for `command(args, params)`; a bad params file is one line on stderr and exit 2."""

    @functools.wraps(command)
    def wrapper(args: argparse.Namespace) -> int:
        from mtonnx.params import ParamsError, load

        try:
            params = load(args.params)
        except ParamsError as err:
            print(f"mtonnx: error: {err}", file=sys.stderr)
            return 2
        return command(args, params)

    return wrapper


def _run_dir(args: argparse.Namespace, params: dict) -> Path:
    return Path(args.out) if args.out else Path("outputs") / params["name"]


@_with_params
def _run(args: argparse.Namespace, params: dict) -> int:
    from mtonnx.lab.runner import RunFailed, RunInterrupted, run, select_only
    from mtonnx.sources.models import ModelSourceError

    out = _run_dir(args, params)
    try:
        only = select_only(args.only)
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {out} is a file: give a directory for the run")
    except ValueError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    try:
        run(params, out, only=only, notebooks_dir=args.notebooks, log=lambda m: print(m, file=sys.stderr))
    except RunInterrupted as err:
        print(f"mtonnx: interrupted: {err}", file=sys.stderr)
        return 130
    except (RunFailed, ModelSourceError) as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 1
    return 0


def _bench(args: argparse.Namespace) -> int:
    from mtonnx.measure import studies

    if args.list:
        for study in studies.STUDIES:
            print(f"{study.name:<18} {study.about} (records {study.section}.*)")
        return 0
    if not args.params:
        print("mtonnx: error: bench: --params is required (or --list)", file=sys.stderr)
        return 2
    return _bench_run(args)


@_with_params
def _bench_run(args: argparse.Namespace, params: dict) -> int:
    from mtonnx.measure import studies
    from mtonnx.report.record import merge_metrics, record, recorded
    from mtonnx.sources.models import ModelSourceError, default_models_dir

    try:
        names = studies.select(args.only)
    except ValueError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    out = _run_dir(args, params)
    bench = studies.Bench.open(params, out, default_models_dir(), log=lambda m: print(m, file=sys.stderr))
    try:
        studies.run(bench, names)
    except ModelSourceError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 1
    for section, values in studies.metrics(bench, names).items():  # the same metrics the notebooks record
        record(out, section, {**recorded(out, section), **values})
    merge_metrics(out)
    print(f"results: {out / studies.RESULTS}", file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    import json

    from mtonnx.check.doctor import diagnose, format_table
    from mtonnx.deploy.writer import WEB
    from mtonnx.web.doctor import diagnose_web, is_web_export

    directory = Path(args.model_dir)
    if not directory.is_dir():
        what = "is a file, not a directory" if directory.exists() else "does not exist"
        print(f"mtonnx: error: --model-dir {args.model_dir} {what}: give an export, variant or deploy/ directory",
              file=sys.stderr)  # fmt: skip
        return 2
    if is_web_export(directory):  # the JavaScript pitfalls only: the Python runtime does not load this layout
        rows = diagnose_web(directory)
    else:
        rows = diagnose(directory, args.source, tolerance=args.tolerance)
        if is_web_export(directory / WEB):  # deploy/ with its web export
            rows += diagnose_web(directory / WEB)
    problem = _write_stdout(
        (json.dumps(rows, indent=2) if args.json else format_table(rows)) + "\n",
        "doctor's report",
        "a stdout that takes it (redirect it to a file)",
    )
    if problem:
        print(f"mtonnx: error: {problem}", file=sys.stderr)
        return 2
    return 1 if any(r["status"] == "fail" for r in rows) else 0


@_with_params
def _train(args: argparse.Namespace, params: dict) -> int:
    from mtonnx.sources.train import RECIPE, train

    t = params["train"]
    out = (Path(params["_file"]).parent / t["out"]).resolve()
    report = train(
        out,
        RECIPE,
        budget_minutes=t["budget_minutes"],
        max_steps=t["max_steps"] or None,
        max_pairs=t["max_pairs"] or None,
        threads=t["threads"],
        test_sentences=t["test_sentences"] or None,
    )
    print(
        f"{out}: {report['steps']} steps in {report['train_minutes']} min; test BLEU {report['test_bleu']} "
        f"(beam {report['test_bleu_beam']}), gloss baseline {report['baseline_bleu']}",
        file=sys.stderr,
    )
    return 0


def _output_problem(output: str | None, source: str | None) -> str | None:
    """Why `-o` cannot be written (checked before any work), or None. "-" is stdout; a device or FIFO is written in
    place and a symlink's target atomically (foundation.files), so the check is made where the bytes will go."""
    import tempfile

    from mtonnx.foundation.files import is_special

    if output is None or output == "-":
        return None
    path = Path(output)
    if path.is_dir():
        return f"-o {output} is a directory: give a file name"
    if is_special(path):
        return None if os.access(path, os.W_OK) else f"-o {output} is not writable"
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        return f"-o {output}: the directory {target.parent} does not exist"
    if source not in (None, "-") and target == Path(source).resolve():
        return f"-o {output} is the input file: the translation would replace it; write to another file"
    try:  # the temp file the output is written to first: /proc, /sys or a read-only mount refuse it here
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}-"):
            pass
    except OSError as err:
        return f"-o {output}: cannot create a file in {target.parent} ({err.strerror or err})"
    return None


def _write_stdout(text: str, what: str = "the translation", instead: str = "an output file with -o FILE") -> str | None:
    """Write `what` to stdout (`_Stdout`); why it could not be written (a closed stdout, a full disk), naming what
    and where to write it `instead`, or None."""
    if sys.stdout is None:
        return f"stdout is closed: give {instead}"
    out = _Stdout(what, instead)
    try:
        out.write(text.encode("utf-8"))
        out.flush()
    except _StdoutError as err:
        return str(err)
    return None


def _translate(args: argparse.Namespace) -> int:
    import contextlib

    from tqdm import tqdm

    from mtonnx.foundation.files import write_with
    from mtonnx.runtime import ModelDirError, SessionSettings, Translator, textio
    from mtonnx.runtime.textio import InputError
    from mtonnx.runtime.translator import deployed_prefix, max_positions, model_dir_of, verify_dir

    def fail(message: str) -> int:
        print(f"mtonnx: error: {message}", file=sys.stderr)
        return 2

    problem = _output_problem(args.output, args.input)
    if problem:
        return fail(problem)
    try:
        args.model_dir = model_dir_of(args.model_dir, args.run)
        verify_dir(args.model_dir)  # before any file of it is read, so a damaged one is named as such
        if args.source_prefix is None:
            args.source_prefix = deployed_prefix(args.model_dir)
    except ModelDirError as err:
        return fail(str(err))
    options = {k: v for k, v in (("num_beams", args.beams), ("max_new_tokens", args.max_new_tokens)) if v}
    try:
        positions = max_positions(Path(args.model_dir)) if Path(args.model_dir).is_dir() else None
        if positions and args.max_new_tokens and args.max_new_tokens >= positions:
            return fail(
                f"--max-new-tokens {args.max_new_tokens}: the model has {positions} positions, so at most "
                f"{positions - 1} new tokens"
            )
        translator = Translator(
            args.model_dir, decoder=args.decoder, session=SessionSettings(threads=args.threads), verify=False
        )
        try:
            translator.check_prefix(args.source_prefix)
        except ValueError as err:
            raise ValueError(f"--source-prefix: {err}") from None
        if args.input not in (None, "-"):
            open(args.input, "rb").close()  # a missing or unreadable input is named before any output exists
    except (ModelDirError, InputError, ValueError) as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"{err.filename or args.input}: {err.strerror}")

    def translate_into(out) -> None:
        """Translate the input chunk by chunk (runtime.textio.line_chunks) into `out`, one line per line; the
        progress bar starts with the first chunk read, so input refused at once is one error line."""
        with textio.opened(args.input) as (stream, name, size), contextlib.ExitStack() as stack:
            first, bar = 0, None
            for chunk in textio.line_chunks(stream, name, args.errors):
                if bar is None:
                    unit = {"unit": "B", "unit_scale": True} if size else {"unit": "line"}
                    bar = stack.enter_context(tqdm(total=size, file=sys.stderr, desc="translating", **unit))

                def cut(where, first=first, bar=bar) -> None:
                    bar.write(
                        f"mtonnx: warning: line {first + where.text + 1}: a sentence too long for the model was "
                        f"translated in {where.pieces} pieces",
                        file=sys.stderr,
                    )

                translated = translator.translate(
                    chunk, batch_size=args.batch_size, source_prefix=args.source_prefix, on_cut=cut, **options
                )
                out.write("".join(f"{line}\n" for line in translated).encode("utf-8"))
                out.flush()
                first += len(chunk)
                bar.update(stream.tell() - bar.n if size else len(chunk))

    try:
        if args.output not in (None, "-"):
            try:
                write_with(args.output, lambda tmp: _with_file(tmp, translate_into))
            except OSError as err:
                if err.filename is None or err.filename == args.input:
                    raise
                return fail(f"cannot write -o {args.output} ({err.strerror or err})")
            return 0
        if sys.stdout is None:
            return fail("stdout is closed: give an output file with -o FILE")
        translate_into(_Stdout())
    except (ModelDirError, InputError) as err:  # a model that answers nothing, input that cannot be read
        return fail(str(err))
    except _StdoutError as err:
        return fail(str(err))
    except OSError as err:
        return fail(f"{err.filename or args.input}: {err.strerror}")
    return 0


def _with_file(path: str, write) -> None:
    with open(path, "wb") as out:
        write(out)


class _StdoutError(OSError):
    """stdout refused the translation; str() is the message shown."""


class _Stdout:
    """stdout's bytes: a failed write (a closed pipe, a full disk) is one _StdoutError naming `what` was written and
    where to write it `instead`, and stdout then points at /dev/null so the interpreter's own flush at exit cannot
    fail again."""

    def __init__(self, what: str = "the translation", instead: str = "an output file with -o FILE"):
        self.what, self.instead = what, instead

    def write(self, data: bytes) -> None:
        try:
            sys.stdout.buffer.write(data)
        except OSError as err:
            self._failed(err)

    def flush(self) -> None:
        try:
            sys.stdout.buffer.flush()
        except OSError as err:
            self._failed(err)

    def _failed(self, err: OSError) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise _StdoutError(f"cannot write {self.what} to stdout ({err.strerror or err}): give {self.instead}") from None


def _compare(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from mtonnx.foundation.files import write_output
    from mtonnx.report import compare as comparing

    def fail(message: str) -> int:
        print(f"mtonnx: error: {message}", file=sys.stderr)
        return 2

    out = None if args.out in (None, "-") else Path(args.out)
    if out is not None and out.exists() and not out.is_dir():
        return fail(f"--out {args.out} is a file: give a directory to write compare.{args.format} into")
    try:
        a, b = comparing.load_run(args.run_a), comparing.load_run(args.run_b)
        flags = {"speed_margin": args.speed_margin, "size_threshold": args.size_threshold}
        thresholds = dataclasses.replace(
            comparing.thresholds_of(b), **{k: v for k, v in flags.items() if v is not None}
        )
        result = comparing.compare(a, b, thresholds)
    except comparing.CompareError as err:
        return fail(str(err))
    text = {
        "md": comparing.to_markdown,
        "html": comparing.to_html,
        "json": lambda r: json.dumps(r, ensure_ascii=False, indent=2, default=str) + "\n",
    }[args.format](result)
    if out is not None:
        try:
            path = write_output(out / f"compare.{args.format}", text)
        except OSError as err:
            return fail(f"cannot write into --out {args.out} ({err.strerror or err})")
        print(f"compare: {path}", file=sys.stderr)
    else:
        problem = _write_stdout(text, "the comparison", "a directory with --out DIR")
        if problem:
            return fail(problem)
    for regression in result["regressions"]:
        print(f"mtonnx: regression: {regression}", file=sys.stderr)
    return 1 if result["regressions"] else 0


def _extra(module: str, function: str):
    return lambda args: getattr(_module(module), function)(args)


def _export_web(args: argparse.Namespace) -> int:
    from mtonnx.lab.webpage import PageSession
    from mtonnx.web.gated import WebExportError, export_run

    try:
        out, web = export_run(args.run_dir, args.out, page=PageSession)
    except (WebExportError, FileNotFoundError, ValueError) as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    checks = {"Node fp32": web["node"], "Node int8": web.get("q8", {}).get("node"), "page": web["browser"]}
    said = "; ".join(
        f"{name} {c['gate']}" + (f" ({c['reason']})" if "reason" in c else "") for name, c in checks.items() if c
    )
    print(f"web export: {out}, {web['variant']} ({web['dtype']}); gate {web['gate']}: {said}")
    return 0


COMMANDS = {
    "run": _run,
    "translate": _translate,
    "bench": _bench,
    "doctor": _doctor,
    "compare": _compare,
    "export-web": _export_web,
    "train": _train,
    "migrate": _extra("mtonnx.migrate", "main"),
    "serve": _extra("mtonnx.serve", "main"),
    "serve-bench": _extra("mtonnx.serve", "bench_main"),
    "batch": _extra("mtonnx.scale", "main"),
}
