"""Builds keyed by content: an export or variant directory records what it was built from (`build_key.json`), and a
later build reuses it only when that record matches, never because the directory exists.

A key is a hash of its parts: the source's fingerprint (a model's files, or the key of the directory it was built
from), the tool and its settings (exporter, opset, recipe) and the versions of the libraries that change the bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from mtonnx.foundation.files import write_json

KEY_FILE = "build_key.json"
CHUNK = 1 << 20


def key_of(parts: dict[str, Any]) -> str:
    """A short, stable hash of `parts` (JSON, sorted keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def versions(*packages: str) -> dict[str, str | None]:
    """The installed versions of `packages` (None where one is not installed)."""

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {name: version(name) for name in packages}


def files_fingerprint(directory: str | Path, names: Iterable[str] | None = None) -> str:
    """A hash of the named files of `directory` (default: every regular file in it, by name), their names and
    bytes: a model directory's identity for the builds made from it."""
    directory = Path(directory)
    paths = sorted(p for p in directory.iterdir() if p.is_file()) if names is None else [directory / n for n in names]
    digest = hashlib.sha256()
    for path in paths:
        if not path.is_file():
            continue
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def recorded(directory: str | Path) -> dict[str, Any]:
    """The key record of a built directory ({} when it has none or it is unreadable)."""
    path = Path(directory) / KEY_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def matches(directory: str | Path, key: str) -> bool:
    """Whether `directory` was built with exactly this key."""
    return recorded(directory).get("key") == key


def write_key(directory: str | Path, key: str, parts: dict[str, Any]) -> None:
    """Record the key and what went into it in a built directory. Written after the build moved the directory into
    place: a build that dies before leaves no key, so the next one rebuilds."""
    write_json(Path(directory) / KEY_FILE, {"key": key, "parts": parts})


def reuse_or_build(
    directory: str | Path,
    parts: dict[str, Any],
    build: Callable[[], Any],
    log: Callable[[str], None] | None = None,
) -> tuple[str, bool]:
    """(key, reused): reuse `directory` when its recorded key matches `parts`, else `build()` it (a build that
    replaces the directory whole, e.g. through files.staged_dir) and record the key; each outcome is one log line."""
    key = key_of(parts)
    if matches(directory, key):
        if log:
            log(f"reused {directory} (build key {key} matches)")
        return key, True
    why = "no build key" if not recorded(directory) else f"build key {recorded(directory).get('key')} differs"
    if log and Path(directory).exists():
        log(f"rebuilding {directory} ({why}; now {key})")
    build()
    write_key(directory, key, parts)
    return key, False
