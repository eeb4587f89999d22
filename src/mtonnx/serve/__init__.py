"""`mtonnx serve`: an HTTP translation service with dynamic batching over the torch-free runtime.

FastAPI + uvicorn + prometheus-client (the `serve` extra). Importing this package is light (argparse only): the
service's stack loads when a command runs. Nothing here imports torch or transformers.
"""

from mtonnx.serve.command import add_arguments, bench_arguments, bench_main, main

__all__ = ["add_arguments", "bench_arguments", "bench_main", "main"]
