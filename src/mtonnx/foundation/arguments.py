"""Command-line argument types shared by every command (`mtonnx`, `mtonnx serve`, `mtonnx batch`): a bad value is
argparse's one-line error, never a traceback."""

from __future__ import annotations

import argparse
import math


def in_range(kind: type, lo: float, hi: float | None = None):
    """An argparse type: a number of `kind` from `lo` to `hi`, or a one-line error."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{value} is out of range {lo}..{hi if hi is not None else 'inf'}")
        return value

    return parse


def add_model_source(parser: argparse.ArgumentParser, model_help: str) -> None:
    """--model-dir or --run (one of them): the model directory the runtime loads, or a run whose deploy/ it loads."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--model-dir", help=model_help)
    where.add_argument("--run", help="a run directory (outputs/<run>): load the variant it recommended, its deploy/")
