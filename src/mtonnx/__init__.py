"""mtonnx: move a MarianMT English->Chinese model to ONNX Runtime, step by step, measured."""

__version__ = "0.1.0"
