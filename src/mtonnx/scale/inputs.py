"""The inputs of `mtonnx batch`: find the files, read each one into rows, cut the rows into chunks.

Both engines call these same functions on a file's bytes, so local and Ray see the same rows. A row is
(id, position, text, error); a row that cannot be translated (undecodable bytes, no text, not a string, empty in
JSONL/Parquet) carries its reason in `error` instead of failing its file.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path

from mtonnx.runtime.integrity import file_sha256
from mtonnx.runtime.segments import clean

FORMATS = ("text", "jsonl", "parquet")
EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
CHUNK_ROWS = 2048  # rows per translate call: length-sorted inside, the unit of progress
COLUMNS = ("id", "position", "text", "error")
BOM = b"\xef\xbb\xbf"
_MISSING = object()


class ScaleError(ValueError):
    """A batch job that cannot start (no inputs, two with one stem, a bad setting, a missing extra); one line."""


@dataclass(frozen=True)
class Input:
    """One input file: its absolute path, shard stem, format, and the sha256 of its bytes, which identifies its version
    (an edit that keeps the size and mtime is still another version)."""

    path: str
    stem: str
    format: str
    sha256: str


def format_of(path: str | Path, input_format: str = "auto") -> str:
    """text, jsonl or parquet: `input_format`, or by extension (anything unknown is text: .txt, .en, ...)."""
    if input_format != "auto":
        return input_format
    return EXTENSIONS.get(Path(path).suffix.lower(), "text")


def find_inputs(specs: list[str], input_format: str = "auto") -> list[Input]:
    """The input files of files, directories (their visible files) and globs (`**` recurses), in order."""
    if input_format not in ("auto", *FORMATS):
        raise ScaleError(f"input format must be auto, {', '.join(FORMATS)}; got {input_format!r}")
    paths: list[Path] = []
    for spec in specs:
        if glob.has_magic(spec):
            found = [Path(p) for p in sorted(glob.glob(spec, recursive=True)) if Path(p).is_file()]
            if not found:
                raise ScaleError(f"no input file matches {spec!r}")
        elif Path(spec).is_dir():
            found = sorted(p for p in Path(spec).iterdir() if p.is_file() and not p.name.startswith("."))
            if not found:
                raise ScaleError(f"{spec}: the directory holds no input files")
        elif Path(spec).is_file():
            found = [Path(spec)]
        else:
            raise ScaleError(f"{spec}: no such file or directory")
        paths += found
    items: dict[str, Input] = {}
    for path in paths:
        resolved = str(path.resolve())
        if resolved in items:
            continue
        if not os.access(resolved, os.R_OK):
            raise ScaleError(f"{path}: not readable")
        items[resolved] = Input(resolved, path.stem, format_of(path, input_format), file_sha256(resolved))
    stems: dict[str, str] = {}
    for item in items.values():
        if item.stem in stems:
            raise ScaleError(
                f"{stems[item.stem]} and {item.path} would both write the shard {item.stem!r} (and the same ids): "
                "rename one or translate them in separate runs"
            )
        stems[item.stem] = item.path
    return list(items.values())


def read_rows(data: bytes, stem: str, fmt: str) -> dict[str, list]:
    """A file's bytes as rows: columns id, position (1-based line, or row for Parquet), text, error."""
    rows: dict[str, list] = {name: [] for name in COLUMNS}
    reader = {"text": _text_rows, "jsonl": _jsonl_rows, "parquet": _parquet_rows}[fmt]
    for row in reader(data, stem):
        for name, value in zip(COLUMNS, row):
            rows[name].append(value)
    return rows


def chunks(rows: dict[str, list], size: int = CHUNK_ROWS) -> list[dict[str, list]]:
    """Consecutive slices of at most `size` rows (columns as in read_rows); none for a file without rows."""
    count = len(rows["id"])
    return [{name: rows[name][start : start + size] for name in COLUMNS} for start in range(0, count, size)]


def _lines(data: bytes) -> list[bytes]:
    """Lines split on b"\\n" only, a trailing b"\\r" and a leading BOM dropped; a final newline ends a line."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if lines and lines[0].startswith(BOM):
        lines[0] = lines[0][len(BOM) :]
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def _decode(raw: bytes, what: str) -> tuple[str, str]:
    try:
        return raw.decode("utf-8"), ""
    except UnicodeDecodeError as err:
        return raw.decode("utf-8", "replace"), f"{what} is not UTF-8 (byte {err.start})"


def _text_rows(data: bytes, stem: str):
    """Text: every line a row, empty lines included (they translate to "": line alignment is kept)."""
    for number, raw in enumerate(_lines(data), 1):
        text, error = _decode(raw, "the line")
        yield f"{stem}:{number}", number, clean(text), error


def _jsonl_rows(data: bytes, stem: str):
    """JSON Lines: one object per line with `text` (and `id`); blank lines carry no record and are skipped."""
    for number, raw in enumerate(_lines(data), 1):
        if not raw.strip():
            continue
        line, error = _decode(raw, "the line")
        if error:
            yield f"{stem}:{number}", number, "", error
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            yield f"{stem}:{number}", number, "", f"not JSON: {getattr(err, 'msg', err)}"
            continue
        if not isinstance(record, dict):
            yield f"{stem}:{number}", number, "", f"not a JSON object: {type(record).__name__}"
            continue
        yield (_row_id(record.get("id"), stem, number), number, *_text_value(record.get("text", _MISSING)))


def _parquet_rows(data: bytes, stem: str):
    """Parquet: every row a row (`text` string or binary, optional `id`); an unreadable file is one error row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        source = pq.ParquetFile(pa.BufferReader(data))
        names = source.schema_arrow.names
        if "text" not in names:
            yield f"{stem}:0", 0, "", f"no 'text' column (columns: {', '.join(names) or 'none'})"
            return
        table = source.read(columns=[c for c in ("id", "text") if c in names])
    except (pa.ArrowException, OSError) as err:
        yield f"{stem}:0", 0, "", f"not a readable Parquet file: {err}"
        return
    ids = table.column("id").to_pylist() if "id" in names else [None] * table.num_rows
    for number, (row_id, value) in enumerate(zip(ids, table.column("text").to_pylist()), 1):
        yield (_row_id(row_id, stem, number), number, *_text_value(value))


def _row_id(value, stem: str, number: int) -> str:
    return f"{stem}:{number}" if value is None else str(value)


def _text_value(value) -> tuple[str, str]:
    """(text, error) for a JSONL/Parquet text value: a non-empty string, or the reason it is not one."""
    if value is _MISSING:
        return "", "no 'text' field"
    if value is None:
        return "", "text is null"
    if isinstance(value, bytes):
        value, error = _decode(value, "text")
        if error:
            return clean(value), error
    if not isinstance(value, str):
        return "", f"text is {type(value).__name__}, not a string: {repr(value)[:40]}"
    text = clean(value)
    return text, "" if text.strip() else "empty text"
