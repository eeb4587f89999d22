"""Text files in, text files out: sentence splitting, empty lines and order kept, for `mtonnx translate`."""

from __future__ import annotations

import re
from collections.abc import Callable

# A sentence ends at . ! ? (optionally closed by a quote or bracket) followed by space and a capital or digit.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(line: str) -> list[str]:
    """A paragraph as its sentences; a single sentence comes back alone."""
    parts, start = [], 0
    for match in SENTENCE_END.finditer(line):
        end = match.start() + len(match.group(0).rstrip())
        parts.append(line[start:end].strip())
        start = match.end()
    parts.append(line[start:].strip())
    return [p for p in parts if p]


def translate_lines(translate: Callable[[list[str]], list[str]], lines: list[str]) -> list[str]:
    """Translate each non-empty line sentence by sentence (one batched call); empty lines stay empty.

    Chinese joins sentences without spaces, so a paragraph's translations are concatenated.
    """
    pieces = [split_sentences(line) for line in lines]
    flat = [sentence for sentences in pieces for sentence in sentences]
    translated = iter(translate(flat))
    return ["".join(next(translated) for _ in sentences) for sentences in pieces]
