"""Text in for `mtonnx translate`: a file or stdin, UTF-8, as lines; line i of the output translates line i.

- Read in chunks of lines as the translation needs them (`line_chunks`), so an input of any length is translated
  in the memory of one chunk.
- Lines are split on "\\n" only (a trailing "\\r" is dropped); runtime.segments splits each into sentences and
  cleans out every other control character, so no line can turn into two.
- Input must be UTF-8: an invalid byte is one error naming the line and byte offset (`errors="replace"` goes on).
- "-" (or no path) is stdin; a closed or unreadable stdin is one InputError, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class InputError(ValueError):
    """Input the translator cannot read; str() is the one line shown to the user."""


@contextlib.contextmanager
def opened(path: str | Path | None) -> Iterator[tuple[BinaryIO, str, int | None]]:
    """(the binary stream, its name, its size in bytes or None) of a file, or of stdin when `path` is None or "-";
    InputError for a stdin that is closed or cannot be read, OSError for a file."""
    if path is None or str(path) == "-":
        if sys.stdin is None or sys.stdin.closed:
            raise InputError("stdin is closed: give the input with -i FILE or pipe it in")
        yield sys.stdin.buffer, "stdin", None
        return
    with open(path, "rb") as stream:
        info = os.fstat(stream.fileno())
        yield stream, str(path), info.st_size if stat.S_ISREG(info.st_mode) else None


def line_chunks(stream: BinaryIO, name: str, errors: str = "strict", size: int = 1024) -> Iterator[list[str]]:
    """The stream's lines, `size` at a time, read as they are needed so that memory holds one chunk whatever the
    input's length: split on "\n" only, a trailing "\r" dropped, a final newline ending the last line (not a new
    one), a leading byte order mark dropped. InputError naming the line and byte offset of an invalid UTF-8 byte
    unless `errors="replace"`, and for a stream that cannot be read."""
    chunk: list[str] = []
    number = 0
    while True:
        try:
            raw = stream.readline()
        except OSError as err:
            raise InputError(f"{name} cannot be read: {err.strerror or err}") from None
        if not raw:
            break
        number += 1
        try:
            line = raw.decode("utf-8", errors=errors)
        except UnicodeDecodeError as err:
            raise InputError(
                f"{name}: line {number}, byte {err.start}: not valid UTF-8 ({err.reason}); convert the file to "
                "UTF-8, or pass --errors replace to translate it with the bad bytes replaced"
            ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        line = line.removesuffix("\n")
        chunk.append(line.removesuffix("\r"))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def lone_surrogate(text: str) -> str | None:
    """Where `text` holds a lone UTF-16 surrogate (a str no UTF-8 text decodes to, but a JSON "\\ud800" escape or a
    `surrogateescape` decode can make): "U+D800 at character 7", or None. The tokenizer cannot encode one."""
    for i, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":
            return f"U+{ord(char):04X} at character {i}"
    return None
