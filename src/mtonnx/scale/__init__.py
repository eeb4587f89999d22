"""Scale-out: the torch-free runtime over many files, in one process (`local`) or on Ray Data (`ray`: laptop, cluster).

`translate_files` runs one job and returns its summary; `add_arguments` and `main` are `mtonnx batch`. Importing
this package is light: pyarrow and Ray (the `scale` extra: pip install 'mtonnx[scale]') load when a job runs.
"""

from mtonnx.scale.command import add_arguments, main
from mtonnx.scale.inputs import ScaleError
from mtonnx.scale.jobs import translate_files

__all__ = ["ScaleError", "add_arguments", "main", "translate_files"]
