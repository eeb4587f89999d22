"""`python -m mtonnx.serve [--model-dir ...]` runs the service; `python -m mtonnx.serve bench ...` the load generator.

The same as `mtonnx serve` and `mtonnx serve-bench`, for running the service without the top-level CLI.
"""

import argparse
import sys

from mtonnx.serve.command import add_arguments, bench_arguments, bench_main, main

if len(sys.argv) > 1 and sys.argv[1] == "bench":
    parser = bench_arguments(argparse.ArgumentParser(prog="mtonnx serve-bench", description=bench_main.__doc__))
    sys.exit(bench_main(parser.parse_args(sys.argv[2:])))
parser = add_arguments(argparse.ArgumentParser(prog="mtonnx serve", description=main.__doc__))
sys.exit(main(parser.parse_args()))
