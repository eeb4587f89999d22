"""Each model directory lists the SHA-256 of every file it holds (layout.SUMS, in `sha256sum -c` format), so a
damaged or replaced file is refused by name when the directory loads instead of translating to garbage.

Exports, variants and deploy/ write the list last, once every other file is in place (`write_sums`); the runtime
checks it before loading anything (`verify`). A directory without the list (an export made before it existed, or by
hand) still loads and cannot be verified. A user who trusts a mount opts out with MTONNX_VERIFY=0 (every command),
or `Translator(..., verify=False)`. `content_key` names what a directory's files hold, for a job's completion key.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mtonnx.foundation.buildkey import KEY_FILE
from mtonnx.foundation.files import write_atomic
from mtonnx.runtime import layout

BLOCK = 1 << 20
VERIFY_ENV = "MTONNX_VERIFY"  # "0" turns the check off for every command (a mount the user trusts)


class IntegrityError(RuntimeError):
    """A listed file that is missing or whose SHA-256 differs (truncated, overwritten, replaced); str() names it and
    the fix."""


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, read in blocks (a file can be larger than memory allows twice)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


UNLISTED = (layout.SUMS, KEY_FILE)  # the list itself, and the lab's build key, recorded after a build completes


def listed_files(directory: str | Path) -> list[Path]:
    """The regular files of a directory that its list covers: every one but UNLISTED and hidden ones."""
    return sorted(
        p for p in Path(directory).iterdir() if p.is_file() and p.name not in UNLISTED and not p.name.startswith(".")
    )


def write_sums(directory: str | Path) -> Path:
    """Write the directory's list (`sha256sum -c` format, two spaces between hash and name), atomically; call it
    after the last file is written."""
    lines = "".join(f"{file_sha256(p)}  {p.name}\n" for p in listed_files(directory))
    return write_atomic(Path(directory) / layout.SUMS, lines)


def read_sums(directory: str | Path) -> dict[str, str] | None:
    """{file name: SHA-256} of the directory's list, None when it has none; an unreadable list is an IntegrityError."""
    path = Path(directory) / layout.SUMS
    if not path.is_file():
        return None
    try:
        entries = [line.split(None, 1) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        sums = {name.lstrip("*"): digest.lower() for digest, name in entries}
    except (OSError, UnicodeDecodeError, ValueError):
        raise IntegrityError(f"{path} is not a SHA-256 list (sha256sum format): re-copy the directory") from None
    if not sums or any(len(d) != 64 or "/" in name for name, d in sums.items()):
        raise IntegrityError(f"{path} is not a SHA-256 list (sha256sum format): re-copy the directory")
    return sums


def verify(directory: str | Path) -> int | None:
    """Check every listed file: the number checked, None when the directory has no list (it cannot be verified).
    The first missing, resized or changed file is an IntegrityError naming it."""
    directory = Path(directory)
    sums = read_sums(directory)
    if sums is None:
        return None
    for name, digest in sums.items():
        path = directory / name
        if not path.is_file():
            raise IntegrityError(f"{path} is listed in {layout.SUMS} but missing: re-copy the directory")
        if file_sha256(path) != digest:
            raise IntegrityError(
                f"{path} does not match its SHA-256 in {layout.SUMS} (the file is damaged or was replaced): "
                "re-copy the directory"
            )
    return len(sums)


def enabled(verify: bool | None = None) -> bool:
    """Whether to verify: `verify` when given, else unless MTONNX_VERIFY is 0 (or false, no, off)."""
    if verify is not None:
        return verify
    return os.environ.get(VERIFY_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def content_key(directory: str | Path) -> str:
    """A SHA-256 naming what the directory's files hold (names and bytes, generation config and tokenizer
    included): the hash of its list when it has one, else of every file's hash."""
    directory = Path(directory)
    path = directory / layout.SUMS
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    lines = "".join(f"{file_sha256(p)}  {p.name}\n" for p in listed_files(directory))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def cost(directory: str | Path, load: Callable[[Path], Any]) -> dict[str, float]:
    """Seconds to verify a directory against seconds to load it with `load(directory)` (e.g. a Translator with
    `verify=False`): what the check adds to a start, on this machine's page cache as it stands (run it twice for a
    warm cache)."""
    directory = Path(directory)
    start = time.perf_counter()
    checked = verify(directory)
    hashing = time.perf_counter() - start
    start = time.perf_counter()
    load(directory)
    loading = time.perf_counter() - start
    size = sum(p.stat().st_size for p in listed_files(directory))
    return {
        "files": checked or 0,
        "mb": round(size / 2**20, 1),
        "verify_s": round(hashing, 3),
        "load_s": round(loading, 3),
        "verify_share_of_load": round(hashing / loading, 3) if loading else 0.0,
    }
