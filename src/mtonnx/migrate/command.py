"""`mtonnx migrate`'s flags and its entry point: exit 0 when `deploy/` is written, 1 when a step fails on the evidence
(one line naming the step, the number and the threshold; what was built is kept), 2 for input it cannot use (an
unsupported architecture names the supported families; references in another script than the model's target language
name both), 130 on Ctrl-C (a rerun resumes from the last finished step).
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of `mtonnx migrate`."""
    parser.add_argument("--model", required=True, help="a Hugging Face model directory or hub name")
    parser.add_argument("--out", required=True, help="the directory to write (deploy/, report.html, metrics.json)")
    parser.add_argument("--params", help="params YAML file (default: the schema's defaults, as params/ci.yaml shows)")
    parser.add_argument(
        "--eval",
        dest="eval_file",
        help="your evaluation set: a TSV of source<TAB>reference lines, the references in the model's target language "
        "(default: the packaged English→Chinese set)",
    )
    parser.add_argument(
        "--source-prefix",
        metavar="TEXT",
        help="text put in front of every source sentence, e.g. '>>cmn_Hans<<' for opus-mt-en-zh (default: the params' "
        "model.source_prefix); deploy/ keeps it",
    )
    parser.add_argument("--exporter", choices=("manual", "optimum"), default="manual", help="how to export")
    parser.add_argument("--only-fp32", action="store_true", help="export and verify only: deploy the fp32 export")
    parser.add_argument(
        "--overwrite", action="store_true", help="write into a non-empty --out that mtonnx migrate did not create"
    )
    return parser


def main(args: argparse.Namespace) -> int:
    """Run the migration; returns the exit code."""
    from mtonnx.migrate.steps import Migration, MigrationFailed, MigrationRefused, run
    from mtonnx.params import ParamsError

    try:
        migration = Migration.from_args(args, log=lambda m: print(m, file=sys.stderr))
        deployed = run(migration)
    except (MigrationRefused, ParamsError) as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    except MigrationFailed as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 1
    print(f"deploy: {deployed}", file=sys.stderr)
    return 0
