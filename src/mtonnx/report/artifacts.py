"""Files a step leaves behind, never half-written: a file is written to a temp path and renamed over the
target; a directory is built in a staging directory beside the target and moved into place when complete."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_UMASK = os.umask(0o022)  # read once, at import (setting it is the only way to read it), and restored
os.umask(_UMASK)


def write_atomic(path: str | Path, content: str | bytes) -> Path:
    """Write `content` to a temp file beside `path`, then rename it over `path`."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    return write_with(path, lambda tmp: Path(tmp).write_bytes(data))


def write_with(path: str | Path, write: Callable[[str], Any]) -> Path:
    """`write(tmp)` a hidden temp file beside `path`, then rename it over `path`, with the mode an ordinary new
    file gets (0666 less the umask, not mkstemp's 0600: reports and shards are read by others)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    """Atomic, UTF-8 (Chinese stays readable), indented JSON."""
    return write_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


@contextlib.contextmanager
def staged_dir(target: str | Path, keep_existing: bool = False) -> Iterator[Path]:
    """Yield an empty staging directory beside `target`; when the block ends without an error it replaces
    `target` (or, with `keep_existing`, is dropped if `target` appeared meanwhile: a concurrent builder's
    identical result). On any error, Ctrl-C included, the staging directory is removed and `target` is as before."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        yield tmp
        if not (keep_existing and target.exists()):
            replace_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(new: Path, target: Path) -> None:
    """Move `new` to `target`; an existing target is swapped out first and deleted only afterwards."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}-old-{os.getpid()}")
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
