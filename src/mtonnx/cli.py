"""The `mtonnx` command line: `run` executes the notebook pipeline for a params file.

Heavy libraries (torch, papermill) are imported only after the params file validated, so a bad
params file is reported in well under two seconds.
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
    args = parser.parse_args(argv)

    try:
        params = load(args.params)
    except ParamsError as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    return _run(params, args)


def _run(params: dict, args: argparse.Namespace) -> int:
    from mtonnx.models import ModelSourceError
    from mtonnx.runner import RunFailed, run

    only = [n.strip().zfill(2) for n in args.only.split(",") if n.strip()] if args.only else None
    out = Path(args.out) if args.out else Path("outputs") / params["name"]
    try:
        run(params, out, only=only, notebooks_dir=args.notebooks, log=lambda m: print(m, file=sys.stderr))
    except (RunFailed, ModelSourceError) as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 1
    return 0
