"""The torch-free runtime: what a user deploys after the migration (onnxruntime + sentencepiece + numpy).

Nothing in this package imports torch or transformers. The names below load on first use, so that importing
the name contract (`mtonnx.runtime.layout`) costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "EmptyTranslationError": "translator",
    "GenerationSettings": "decoding",
    "SessionSettings": "sessions",
    "MarianSpmTokenizer": "tokenizer",
    "load_tokenizer": "tokenizer",
    "ModelDirError": "translator",
    "SearchGraph": "search_graph",
    "Translator": "translator",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'mtonnx.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mtonnx.runtime.{_WHERE[name]}"), name)
