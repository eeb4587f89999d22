"""The outputs of `mtonnx batch`: one shard per input file, there whole or not at all, and a sidecar marking it done.

`<stem>.parquet` (or `.jsonl`) is written under a temp name and renamed; then `<stem>.parquet.done` records the
input's size and mtime, the settings and the shard's size. Only a shard whose sidecar matches counts as complete: a
killed job leaves nothing, a hidden temp file, or a shard without sidecar, and a rerun redoes that input. A write
that holds only part of a file (Ray split its rows) stores parts under `.parts/<stem>/`; whichever write stores
the last part assembles the shard, so no rows pass through the driver.
"""

from __future__ import annotations

import glob
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mtonnx.foundation.files import write_with
from mtonnx.scale.inputs import Input

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
# What a translated chunk carries besides OUTPUT, for the writer: which shard, which chunk, of how many.
ROUTING = pa.schema([("shard", pa.string()), ("chunk", pa.int64()), ("chunks", pa.int64())])
TRANSLATED = pa.unify_schemas([ROUTING, OUTPUT])
OUTPUT_FORMATS = ("parquet", "jsonl")
PARTS = ".parts"


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


def state(job: Job, item: Input) -> str:
    """complete (shard and matching sidecar), stale (made from another version of the input or other settings)
    or missing (nothing, or a shard a killed job left without sidecar)."""
    shard, marker = shard_path(job, item.stem), marker_path(job, item.stem)
    if not (shard.is_file() and marker.is_file()):
        return "missing"
    try:
        done = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "missing"
    if done.get("bytes") != shard.stat().st_size:
        return "missing"
    made = (done.get("size"), done.get("mtime_ns"), done.get("format"), done.get("settings"))
    if made != (item.size, item.mtime_ns, item.format, job.settings):
        return "stale"
    return "complete"


def prepare(job: Job, item: Input, keep_shard: bool = False) -> None:
    """Remove what an earlier, killed run left for this input (temp files, parts) and, unless `keep_shard` (it is
    complete), its shard and sidecar, before redoing it. One job per output directory at a time."""
    out = Path(job.out_dir)
    shard, marker = shard_path(job, item.stem), marker_path(job, item.stem)
    leftovers = [p for name in (shard.name, marker.name) for p in out.glob(f".{glob.escape(name)}-*")]
    for path in leftovers if keep_shard else (marker, shard, *leftovers):
        path.unlink(missing_ok=True)
    shutil.rmtree(out / PARTS / item.stem, ignore_errors=True)
    shutil.rmtree(out / PARTS / f"{item.stem}.lock", ignore_errors=True)


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
    """Write one input's rows (in position order) as its shard, then its sidecar; returns the shard's summary:
    shard, rows, errors, translated (rows with text and no error)."""
    rows = rows.sort_by("position").select(OUTPUT.names).cast(OUTPUT)
    shard = shard_path(job, item.stem)
    if job.fmt == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows.to_pylist())
        write_with(shard, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    else:
        write_with(shard, lambda tmp: pq.write_table(rows, tmp))
    errors = [e for e in rows["error"].to_pylist() if e]
    texts = rows["text"].to_pylist()
    translated = sum(1 for t, e in zip(texts, rows["error"].to_pylist()) if t.strip() and not e)
    summary = {"shard": item.stem, "rows": rows.num_rows, "errors": len(errors), "translated": translated}
    done = {"input": item.path, "size": item.size, "mtime_ns": item.mtime_ns, "format": item.format}
    done["settings"] = job.settings
    marker = json.dumps({**done, **summary, "bytes": shard.stat().st_size}, ensure_ascii=False, indent=2) + "\n"
    write_with(marker_path(job, item.stem), lambda tmp: Path(tmp).write_text(marker, encoding="utf-8"))
    return summary


def empty() -> pa.Table:
    """No translated rows (an input without rows still gets its shard)."""
    return TRANSLATED.empty_table()


def read_output(out_dir: str | Path) -> pa.Table:
    """Every complete shard in `out_dir` (Parquet and JSONL) as one table, ordered by source and position."""
    tables = []
    for marker in sorted(Path(out_dir).glob("*.done")):
        shard = marker.with_suffix("")
        if shard.suffix == ".jsonl":
            lines = shard.read_text(encoding="utf-8").splitlines()
            tables.append(pa.Table.from_pylist([json.loads(line) for line in lines], schema=OUTPUT))
        else:
            tables.append(pq.read_table(shard).cast(OUTPUT))
    table = pa.concat_tables(tables) if tables else OUTPUT.empty_table()
    return table.sort_by([("source", "ascending"), ("position", "ascending")])


def _part_path(job: Job, stem: str, chunk: int) -> Path:
    return Path(job.out_dir) / PARTS / stem / f"{chunk:08d}.parquet"
