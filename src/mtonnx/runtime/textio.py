"""Text in, text out for `mtonnx translate`: line i of the output is the translation of line i of the input.

- Lines are split on "\\n" only (a trailing "\\r" is dropped); every other control or separator character
  (form feed, vertical tab, NEL, U+2028, ...) becomes a space, so no line can turn into two.
- Input must be UTF-8: an invalid byte is one error naming the line and byte offset (`errors="replace"` goes on).
- A paragraph is translated sentence by sentence. The splitter is hand-written on purpose: the deployable core
  carries no dependency beyond onnxruntime, sentencepiece, numpy and tqdm, and a sentence splitter only has to be
  conservative here (two sentences kept together still translate; one cut in two does not). It knows the common
  English abbreviations, initials and dotted acronyms ("Mr. Smith", "U.S. Army", "e.g. this").
- A sentence longer than the model's positions is cut into pieces that fit (runtime.translator.Translator.fit),
  translated and joined; the caller is told which line was cut.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

# Every C0/C1 control (line feed too: a JSONL or Parquet text may hold one), the Unicode line and paragraph
# separators, and the byte-order mark.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")
# A candidate sentence end: . ! ? (optionally closed by a quote or bracket), space, then a capital or digit.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al approx no nos fig figs vol ed eds rev gen col lt sgt "
    "capt cmdr gov pres rep sen inc ltd co corp dept univ est jan feb mar apr jun jul aug sep sept oct nov dec "
    "mon tue wed thu fri sat sun p.m a.m u.s u.k u.n e.u".split()
)
DOTTED = re.compile(r"(?:\b[A-Za-z]\.){2,}$|(?:^|\s)[A-Z]\.$")  # U.S. / e.g. / an initial ("J.")


class InputError(ValueError):
    """Input the translator cannot read; str() is the one line shown to the user."""


def read_text(path: str | Path | None, errors: str = "strict") -> str:
    """A file's text (stdin when `path` is None), UTF-8; InputError naming the line and byte offset of an
    invalid byte unless `errors="replace"`."""
    name = str(path) if path is not None else "stdin"
    data = Path(path).read_bytes() if path is not None else sys.stdin.buffer.read()
    try:
        return data.decode("utf-8", errors=errors).removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        offset = err.start - (data.rfind(b"\n", 0, err.start) + 1)
        raise InputError(
            f"{name}: line {line}, byte {offset}: not valid UTF-8 ({err.reason}); convert the file to "
            "UTF-8, or pass --errors replace to translate it with the bad bytes replaced"
        ) from None


def split_lines(text: str) -> list[str]:
    """Lines split on "\\n" only, a trailing "\\r" dropped, a final newline ending the last line (not a new one)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def clean(line: str) -> str:
    """Control and separator characters as spaces: the translator never sees anything that could break a line."""
    return CONTROL.sub(" ", line)


def split_sentences(line: str) -> list[str]:
    """A paragraph as its sentences (a single sentence comes back alone); abbreviations do not end one."""
    parts, start = [], 0
    for match in SENTENCE_END.finditer(line):
        end = match.start() + len(match.group(0).rstrip())
        before = line[start : match.start()]
        word = before.rsplit(None, 1)[-1] if before.split() else ""
        if word.endswith(".") and (word[:-1].lower().strip("(\"'") in ABBREVIATIONS or DOTTED.search(before)):
            continue
        parts.append(line[start:end].strip())
        start = match.end()
    parts.append(line[start:].strip())
    return [p for p in parts if p]


def translate_lines(
    translate: Callable[[list[str]], list[str]],
    lines: list[str],
    fit: Callable[[str], list[str]] | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """Translate each line sentence by sentence (one batched call); empty lines stay empty, and the output has
    exactly one line per input line. `fit` cuts a sentence too long for the model into pieces (reported to
    `warn` with the line number); Chinese joins sentences and pieces without spaces."""
    per_line: list[list[list[str]]] = []
    for number, line in enumerate(lines, 1):
        sentences = []
        for sentence in split_sentences(clean(line)):
            pieces = fit(sentence) if fit else [sentence]
            if len(pieces) > 1 and warn:
                warn(f"line {number}: a sentence too long for the model was translated in {len(pieces)} pieces")
            sentences.append(pieces)
        per_line.append(sentences)
    flat = [piece for sentences in per_line for pieces in sentences for piece in pieces]
    translated = iter(translate(flat) if flat else [])
    return ["".join(next(translated) for pieces in sentences for _ in pieces) for sentences in per_line]
