"""Files a step leaves behind, never half-written, and outputs that respect what their path already is.

- A regular file (or a new path) is written to a temp file beside it and renamed over it, so a failed write
  leaves the old file as it was.
- A symlink is followed: its target is written that way, and the link stays a link.
- A character device, FIFO, socket or other special file (`/dev/null`, `/dev/stdout`, a named pipe) is opened
  and written in place, streaming, as `cat > X` would: renaming a file over it would replace the device.
- "-" is stdout (`write_output`).
- A directory is built in a staging directory beside the target and moved into place when complete.
- A path that a published file names is written relative (`relative`): no machine's absolute paths.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
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


def is_special(path: str | Path) -> bool:
    """Whether `path` (symlinks followed) exists and is neither a regular file nor a directory: a device, a FIFO,
    a socket. Such a path is written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_with(path: str | Path, write: Callable[[str], Any]) -> Path:
    """`write(tmp)` a hidden temp file beside `path` (beside a symlink's target), then rename it over it, with the
    mode of the file it replaces, or the one an ordinary new file gets (0666 less the umask, not mkstemp's 0600:
    reports and shards are read by others). A special file (`is_special`) is handed to `write` itself: it is
    written in place."""
    path = Path(path)
    if is_special(path):
        write(str(path))
        return path
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else 0o666 & ~_UMASK  # a replaced file keeps its own
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_output(path: str | Path, content: str | bytes) -> Path | None:
    """A command's output: "-" is stdout, anything else `write_atomic` (which writes a device or FIFO in place and
    follows a symlink). Returns the path written, None for stdout."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    if str(path) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return None
    return write_atomic(path, data)


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


def relative(path: str | Path, start: str | Path = os.curdir) -> str:
    """`path` as seen from `start` (POSIX, climbing with `..` where it lies outside): how a notebook, a report or a
    card names a file, so that what a run publishes holds no absolute path of the machine that made it."""
    return Path(os.path.relpath(path, start)).as_posix()


def link_or_copy(source: str | Path, target: str | Path) -> None:
    """`target` as a hard link to `source` (the bytes stored once: files here are replaced by rename, never edited in
    place), or a copy where the filesystem cannot link them."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def replace_dir(new: Path, target: Path) -> None:
    """Move `new` to `target`; an existing target is swapped out first and deleted only afterwards."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}-old-{os.getpid()}")
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
