"""The torch-free runtime: what a user deploys after the migration (onnxruntime + sentencepiece + numpy).

Nothing in this package imports torch or transformers.
"""

from mtonnx.runtime.decoding import GenerationSettings
from mtonnx.runtime.sessions import SessionSettings
from mtonnx.runtime.tokenizer import MarianSpmTokenizer
from mtonnx.runtime.translator import ModelDirError, Translator

__all__ = ["GenerationSettings", "MarianSpmTokenizer", "ModelDirError", "SessionSettings", "Translator"]
