"""`python -m mtonnx ...` is the `mtonnx` command."""

import sys

from mtonnx.cli import main

sys.exit(main())
