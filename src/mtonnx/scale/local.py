"""The `local` engine: the Ray engine's read / chunk / translate / write steps in this one process, no Ray imported.

One Translator (`work.Chunks`), the files one after the other, a tqdm bar on stderr; each file's shard is written
with the same `shards.write_shard` the Ray writer uses. The better choice while one machine's cores suffice: no
cluster to start, no processes beside this one (notebook 12 measures what Ray costs).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from mtonnx.scale import shards, work
from mtonnx.scale.inputs import CHUNK_ROWS, Input


def run(
    pending: list[Input],
    job: shards.Job,
    worker: dict[str, Any],
    chunk_rows: int = CHUNK_ROWS,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Translate `pending` into `job`'s shards with one Translator built from `worker` (work.Chunks' arguments);
    returns each shard's summary."""
    from tqdm import tqdm

    translator = work.Chunks(**worker)
    summaries = []
    with tqdm(total=0, unit="row", file=sys.stderr, disable=not progress, desc="translating") as bar:
        for item in pending:
            chunks = work.file_chunks(Path(item.path).read_bytes(), item, chunk_rows)
            bar.total += sum(len(chunk["id"]) for chunk in chunks)
            bar.refresh()
            tables = []
            for chunk in chunks:
                tables.append(translator.rows([chunk]))
                bar.update(len(chunk["id"]))
            summaries.append(shards.write_shard(pa.concat_tables(tables) if tables else shards.empty(), job, item))
    return summaries
