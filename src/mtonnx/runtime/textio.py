"""Text in for `mtonnx translate`: a file or stdin, UTF-8, as lines; line i of the output translates line i.

- Lines are split on "\\n" only (a trailing "\\r" is dropped); runtime.segments splits each into sentences and
  cleans out every other control character, so no line can turn into two.
- Input must be UTF-8: an invalid byte is one error naming the line and byte offset (`errors="replace"` goes on).
- "-" (or no path) is stdin; a closed or unreadable stdin is one InputError, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path


class InputError(ValueError):
    """Input the translator cannot read; str() is the one line shown to the user."""


def read_text(path: str | Path | None, errors: str = "strict") -> str:
    """A file's text (stdin when `path` is None or "-"), UTF-8; InputError naming the line and byte offset of an
    invalid byte unless `errors="replace"`, and for a stdin that is closed."""
    stdin = path is None or str(path) == "-"
    name = "stdin" if stdin else str(path)
    if stdin:
        if sys.stdin is None or sys.stdin.closed:
            raise InputError("stdin is closed: give the input with -i FILE or pipe it in")
        try:
            data = sys.stdin.buffer.read()
        except OSError as err:
            raise InputError(f"stdin cannot be read: {err.strerror or err}") from None
    else:
        data = Path(path).read_bytes()
    try:
        return data.decode("utf-8", errors=errors).removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        offset = err.start - (data.rfind(b"\n", 0, err.start) + 1)
        raise InputError(
            f"{name}: line {line}, byte {offset}: not valid UTF-8 ({err.reason}); convert the file to "
            "UTF-8, or pass --errors replace to translate it with the bad bytes replaced"
        ) from None


def lone_surrogate(text: str) -> str | None:
    """Where `text` holds a lone UTF-16 surrogate (a str no UTF-8 text decodes to, but a JSON "\\ud800" escape or a
    `surrogateescape` decode can make): "U+D800 at character 7", or None. The tokenizer cannot encode one."""
    for i, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":
            return f"U+{ord(char):04X} at character {i}"
    return None


def split_lines(text: str) -> list[str]:
    """Lines split on "\\n" only, a trailing "\\r" dropped, a final newline ending the last line (not a new one)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
