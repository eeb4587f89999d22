"""The outputs of `mtonnx batch`: one shard per input file, never half-written, and a sidecar saying what it holds.

One job per output directory: the driver holds `LOCK` (an flock the kernel drops when its process dies, so a
crashed job leaves nothing stuck) from before it reads any sidecar until its last shard is written. Before an
input is translated, `<stem>.parquet.done` claims its shard path (input, its sha256, format, settings); the shard
`<stem>.parquet` (or `.jsonl`) is then written under a temp name and renamed, and the sidecar rewritten with the
shard's size and counts. Only a shard whose sidecar matches counts as complete: a killed job leaves a claim, a hidden
temp file or parts, and a rerun redoes that input. A path that exists without this project's sidecar is someone
else's file, never overwritten unless the job is told to. A write that holds only part of a file (Ray split its
rows) stores parts under `.parts/<stem>/`; whichever write stores the last part assembles the shard, so no rows pass
through the driver.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from mtonnx.foundation.files import write_with
from mtonnx.scale.inputs import Input, ScaleError

OUTPUT = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("position", pa.int64()),
        ("text", pa.string()),
        ("translation", pa.string()),
        ("error", pa.string()),
    ]
)
# What a translated chunk carries besides OUTPUT, for the writer: which shard, which chunk, of how many, and each
# row's warnings (reported to the driver in the shard's summary, not stored in the shard).
ROUTING = pa.schema(
    [("shard", pa.string()), ("chunk", pa.int64()), ("chunks", pa.int64()), ("warnings", pa.list_(pa.string()))]
)
TRANSLATED = pa.unify_schemas([ROUTING, OUTPUT])
OUTPUT_FORMATS = ("parquet", "jsonl")
PARTS = ".parts"
LOCK = ".mtonnx-batch.lock"


@dataclass(frozen=True)
class Job:
    """Where a job writes, in which format, and the settings a complete shard must have been made with."""

    out_dir: str
    fmt: str = "parquet"
    settings: dict[str, Any] = field(default_factory=dict)


def shard_path(job: Job, stem: str) -> Path:
    """The shard of input `stem`."""
    return Path(job.out_dir) / f"{stem}.{job.fmt}"


def marker_path(job: Job, stem: str) -> Path:
    """The sidecar that marks the shard of `stem` complete."""
    return Path(job.out_dir) / f"{stem}.{job.fmt}.done"


@contextlib.contextmanager
def holding(out_dir: str | Path) -> Iterator[None]:
    """Hold the output directory (it must exist) for this job, or refuse at once with one line when another job
    holds it. Only the driver takes the lock: Ray's write tasks write the shards the driver claimed, and the
    processes Ray starts do not inherit its file descriptor."""
    lock = FileLock(Path(out_dir) / LOCK, blocking=False)
    try:
        lock.acquire()
    except Timeout:
        raise ScaleError(
            f"{out_dir}: another mtonnx batch job holds this output directory; wait for it to end or give another "
            "--output"
        ) from None
    except OSError as err:
        raise ScaleError(f"{out_dir}: cannot write in the output directory ({err.strerror or err})") from None
    try:
        yield
    finally:
        lock.release()


def sidecar(marker: Path) -> dict[str, Any] | None:
    """The sidecar at `marker` if this project wrote it (a JSON object naming its input), else None."""
    if not marker.is_file():
        return None
    try:
        done = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return done if isinstance(done, dict) and "input" in done else None


def _whole(shard: Path, done: dict[str, Any] | None) -> bool:
    """Whether `done` is the complete sidecar of `shard` as it is now (a claim records no size)."""
    return done is not None and shard.is_file() and done.get("bytes") == shard.stat().st_size


def state(job: Job, item: Input) -> str:
    """complete (shard and matching sidecar), stale (made from another version of the input or other settings)
    or missing (nothing, or the claim of a job killed before it finished the shard)."""
    done = sidecar(marker_path(job, item.stem))
    if not _whole(shard_path(job, item.stem), done):
        return "missing"
    made = (done.get("sha256"), done.get("format"), done.get("settings"))
    return "complete" if made == (item.sha256, item.format, job.settings) else "stale"


def foreign(job: Job, item: Input) -> Path | None:
    """The shard or sidecar path of `item` that holds something this project did not write (a shard without our
    sidecar: another tool's `part0.parquet`), or None: overwriting it would destroy someone else's file."""
    if sidecar(marker_path(job, item.stem)) is not None:
        return None
    return next((p for p in (shard_path(job, item.stem), marker_path(job, item.stem)) if os.path.lexists(p)), None)


def prepare(job: Job, item: Input, keep_shard: bool = False) -> None:
    """Remove what an earlier, killed run left for this input (temp files, parts) and, unless `keep_shard` (it is
    complete), claim its shard path for this job: the old shard, if any, stays until the new one replaces it, and
    counts as incomplete meanwhile."""
    out = Path(job.out_dir)
    shard, marker = shard_path(job, item.stem), marker_path(job, item.stem)
    for path in (p for name in (shard.name, marker.name) for p in out.glob(f".{glob.escape(name)}-*")):
        path.unlink(missing_ok=True)
    shutil.rmtree(out / PARTS / item.stem, ignore_errors=True)
    shutil.rmtree(out / PARTS / f"{item.stem}.lock", ignore_errors=True)
    if not keep_shard:
        _write_sidecar(job, item, {})


def commit(table: pa.Table, job: Job, items: dict[str, Input]) -> list[dict[str, Any]]:
    """Write translated rows (TRANSLATED columns): a shard per input whose chunks are all here, parts otherwise.

    Returns, per input seen, its summary (see `write_shard`) or, when it is still waiting for parts, {"shard": stem}.
    """
    done = []
    for stem in sorted(set(table.column("shard").to_pylist())):
        rows = table.filter(pc.equal(table["shard"], stem))
        total, present = rows["chunks"][0].as_py(), set(rows["chunk"].to_pylist())
        if present == set(range(total)):
            done.append(write_shard(rows, job, items[stem]))
            continue
        for chunk in sorted(present):
            part = _part_path(job, stem, chunk)
            part.parent.mkdir(parents=True, exist_ok=True)
            one = rows.filter(pc.equal(rows["chunk"], chunk))
            write_with(part, lambda tmp, one=one: pq.write_table(one, tmp))
        done.append(assemble(job, items[stem], total) or {"shard": stem})
    return done


def assemble(job: Job, item: Input, total: int) -> dict[str, Any] | None:
    """Build the shard from its parts once all `total` are written (one writer wins); None while some are missing."""
    parts = [_part_path(job, item.stem, chunk) for chunk in range(total)]
    if not all(p.is_file() for p in parts):
        return None
    lock = Path(job.out_dir) / PARTS / f"{item.stem}.lock"
    try:
        lock.mkdir()
    except FileExistsError:
        return None  # another writer is assembling it
    try:
        summary = write_shard(pa.concat_tables([pq.read_table(p) for p in parts]), job, item)
        shutil.rmtree(parts[0].parent, ignore_errors=True)
        return summary
    finally:
        shutil.rmtree(lock, ignore_errors=True)


def write_shard(rows: pa.Table, job: Job, item: Input) -> dict[str, Any]:
    """Write one input's rows (in position order) as its shard, then its complete sidecar; returns the shard's
    summary: shard, rows, errors, translated (rows with text and no error) and warnings (its rows' messages)."""
    rows = rows.sort_by("position")
    warnings = [message for messages in rows["warnings"].to_pylist() for message in messages]
    rows = rows.select(OUTPUT.names).cast(OUTPUT)
    shard = shard_path(job, item.stem)
    if job.fmt == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows.to_pylist())
        write_with(shard, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    else:
        write_with(shard, lambda tmp: pq.write_table(rows, tmp))
    errors = rows["error"].to_pylist()
    translated = sum(1 for t, e in zip(rows["text"].to_pylist(), errors) if t.strip() and not e)
    summary = {"shard": item.stem, "rows": rows.num_rows, "errors": sum(map(bool, errors)), "translated": translated}
    _write_sidecar(job, item, {**summary, "bytes": shard.stat().st_size})
    return {**summary, "warnings": warnings}


def _write_sidecar(job: Job, item: Input, shard: dict[str, Any]) -> None:
    """Write `item`'s sidecar: what its shard is made from (input, sha256, format, the job's settings) and `shard`
    (nothing for a claim; the summary and size once the shard is written)."""
    made = {"input": item.path, "sha256": item.sha256, "format": item.format, "settings": job.settings}
    text = json.dumps({**made, **shard}, ensure_ascii=False, indent=2) + "\n"
    write_with(marker_path(job, item.stem), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def empty() -> pa.Table:
    """No translated rows (an input without rows still gets its shard)."""
    return TRANSLATED.empty_table()


def read_output(out_dir: str | Path) -> pa.Table:
    """Every complete shard in `out_dir` (Parquet and JSONL) as one table, ordered by source and position."""
    tables = []
    for marker in sorted(Path(out_dir).glob("*.done")):
        shard = marker.with_suffix("")
        if not _whole(shard, sidecar(marker)):
            continue
        if shard.suffix == ".jsonl":
            lines = shard.read_text(encoding="utf-8").splitlines()
            tables.append(pa.Table.from_pylist([json.loads(line) for line in lines], schema=OUTPUT))
        else:
            tables.append(pq.read_table(shard).cast(OUTPUT))
    table = pa.concat_tables(tables) if tables else OUTPUT.empty_table()
    return table.sort_by([("source", "ascending"), ("position", "ascending")])


def _part_path(job: Job, stem: str, chunk: int) -> Path:
    return Path(job.out_dir) / PARTS / stem / f"{chunk:08d}.parquet"
