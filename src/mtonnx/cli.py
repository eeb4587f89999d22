"""The `mtonnx` command line.

- `run`: execute the notebook pipeline for a params file. Heavy libraries (torch, papermill) are
  imported only after the params file validated, so a bad params file is reported in well under 2 s.
- `translate`: translate English text with an exported model, torch-free (the deployed runtime).
- `bench`: the peer benchmark for a params file (results JSON in the run dir).
- `doctor`: check an export against its source model (table or JSON; exit 1 on any failure).
- `compare`: what changed between two run directories, classified; exit 1 on a regression (JSON only, no torch).
- `train`: train the default model from packaged data (`make model`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtonnx.params import ParamsError, load


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="mtonnx", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="execute the notebooks with papermill and write the report")
    run.add_argument("--params", required=True, help="params YAML file, e.g. params/default.yaml")
    run.add_argument("--out", help="run directory (default: outputs/<params name>)")
    run.add_argument("--only", help="comma-separated notebook numbers to run, e.g. 01,02")
    run.add_argument("--notebooks", help="directory of NN_name.ipynb notebooks (default: the project's)")
    translate = commands.add_parser("translate", help="translate English text with an exported model (no torch)")
    translate.add_argument("--model-dir", required=True, help="export directory (hand export or optimum's)")
    translate.add_argument("-i", "--input", help="input text file, one sentence or paragraph per line (default: stdin)")
    translate.add_argument("-o", "--output", help="output file (default: stdout)")
    translate.add_argument("--beams", type=int, help="beam size (default: the model's generation_config)")
    translate.add_argument("--max-new-tokens", type=int, help="longest translation in tokens (default: the model's)")
    translate.add_argument("--batch-size", type=int, default=16)
    translate.add_argument("--source-prefix", default="", help="e.g. '>>cmn_Hans<<' for opus-mt-en-zh")
    translate.add_argument(
        "--decoder", default="auto", choices=("auto", "tuned", "lean", "split", "merged", "no-cache")
    )
    translate.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads per session")
    bench = commands.add_parser("bench", help="the peer benchmark (PyTorch, optimum, mtonnx, CTranslate2)")
    bench.add_argument("--params", required=True, help="params YAML file; its bench section sets the matrix")
    bench.add_argument("--out", help="run directory (default: outputs/<params name>)")
    doctor = commands.add_parser("doctor", help="check an export directory against its source model")
    doctor.add_argument("--model-dir", required=True, help="the source model (Hugging Face directory)")
    doctor.add_argument("--onnx-dir", required=True, help="the export directory (hand, optimum or a variant)")
    doctor.add_argument("--tolerance", type=float, default=1e-4, help="fp32 logits parity tolerance")
    doctor.add_argument("--json", action="store_true", help="print the rows as JSON (for CI)")
    compare = commands.add_parser("compare", help="what changed between two run directories (exit 1 on a regression)")
    compare.add_argument("run_a", help="the run compared against, e.g. main's last run")
    compare.add_argument("run_b", help="the run under review, e.g. a branch's")
    compare.add_argument("--out", help="directory to write compare.<format> into (default: print it)")
    compare.add_argument("--format", choices=("md", "html", "json"), default="md")
    compare.add_argument("--speed-margin", type=float, help="beyond-spread factor for speed (default: RUN_B's params)")
    compare.add_argument("--size-threshold", type=float, help="relative size/memory change that counts (e.g. 0.1)")
    train = commands.add_parser("train", help="train the default model from packaged data (params: train section)")
    train.add_argument("--params", required=True, help="params YAML file, e.g. params/train.yaml")
    args = parser.parse_args(argv)

    if args.command == "translate":
        return _translate(args)
    if args.command == "doctor":
        return _doctor(args)
    if args.command == "compare":
        return _compare(args)
    try:
        params = load(args.params)
    except ParamsError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    if args.command == "bench":
        return _bench(params, args)
    return _train(params) if args.command == "train" else _run(params, args)


def _run(params: dict, args: argparse.Namespace) -> int:
    from mtonnx.report.runner import RunFailed, run
    from mtonnx.sources.models import ModelSourceError

    only = [n.strip().zfill(2) for n in args.only.split(",") if n.strip()] if args.only else None
    out = Path(args.out) if args.out else Path("outputs") / params["name"]
    try:
        run(params, out, only=only, notebooks_dir=args.notebooks, log=lambda m: print(m, file=sys.stderr))
    except (RunFailed, ModelSourceError) as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 1
    return 0


def _bench(params: dict, args: argparse.Namespace) -> int:
    from mtonnx.measure.benchmark import metrics, run_benchmark
    from mtonnx.report.record import merge_metrics, record
    from mtonnx.report.runner import default_models_dir
    from mtonnx.sources.models import ModelSourceError

    out = Path(args.out) if args.out else Path("outputs") / params["name"]
    try:
        result = run_benchmark(params, out, default_models_dir(), log=lambda m: print(m, file=sys.stderr))
    except ModelSourceError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 1
    record(out, "bench", metrics(result))  # the same bench.* metrics notebook 07 records
    merge_metrics(out)
    for row in result["results"]:
        print(
            f"{row['engine']:>13}  {row['config']:<22} {row['median_ms']:>10.1f} ms  "
            f"x{row['speedup_vs_pytorch_fp32']} vs PyTorch fp32"
        )
    print(f"results: {result['path']}", file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    import json

    from mtonnx.check.doctor import diagnose, format_table

    rows = diagnose(args.model_dir, args.onnx_dir, tolerance=args.tolerance)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 1 if any(r["status"] == "fail" for r in rows) else 0


def _train(params: dict) -> int:
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


def _translate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from mtonnx.runtime import ModelDirError, SessionSettings, Translator
    from mtonnx.runtime.textio import translate_lines

    try:
        translator = Translator(args.model_dir, decoder=args.decoder, session=SessionSettings(threads=args.threads))
        text = Path(args.input).read_text(encoding="utf-8") if args.input else sys.stdin.read()
    except (ModelDirError, OSError) as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    lines = text.splitlines()
    options = {k: v for k, v in (("num_beams", args.beams), ("max_new_tokens", args.max_new_tokens)) if v}
    with tqdm(total=0, unit="sentence", file=sys.stderr, desc="translating") as bar:

        def translate(sentences: list[str]) -> list[str]:
            bar.reset(total=len(sentences))
            return translator.translate(
                sentences, batch_size=args.batch_size, source_prefix=args.source_prefix, progress=bar.update, **options
            )

        result = "\n".join(translate_lines(translate, lines)) + ("\n" if lines else "")
    if args.output:
        Path(args.output).write_text(result, encoding="utf-8")
    else:
        sys.stdout.write(result)
    return 0


def _compare(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from mtonnx.report import compare as comparing
    from mtonnx.report.artifacts import write_atomic

    try:
        a, b = comparing.load_run(args.run_a), comparing.load_run(args.run_b)
        flags = {"speed_margin": args.speed_margin, "size_threshold": args.size_threshold}
        thresholds = dataclasses.replace(
            comparing.thresholds_of(b), **{k: v for k, v in flags.items() if v is not None}
        )
        result = comparing.compare(a, b, thresholds)
    except comparing.CompareError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    text = {
        "md": comparing.to_markdown,
        "html": comparing.to_html,
        "json": lambda r: json.dumps(r, ensure_ascii=False, indent=2, default=str) + "\n",
    }[args.format](result)
    if args.out:
        path = write_atomic(Path(args.out) / f"compare.{args.format}", text)
        print(f"compare: {path}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    for regression in result["regressions"]:
        print(f"mtonnx: regression: {regression}", file=sys.stderr)
    return 1 if result["regressions"] else 0
