"""`mtonnx migrate`: the lab's steps as one verified command for a user's own checkpoint, without notebooks.

Load the model, export it, check parity with PyTorch and the runtime's tokens against `generate`, build the
registry's variants, run every gate, measure the objective, recommend, and write `deploy/` with its model card, a
one-page `report.html` and a `metrics.json` that `mtonnx compare` reads. Importing this package is light (argparse
only); the steps import what they need when they run.
"""

from mtonnx.migrate.command import add_arguments, main

__all__ = ["add_arguments", "main"]
