"""The work both engines do: a file's bytes into chunk rows, and `Chunks`, one Translator translating chunk rows.

A chunk (up to `inputs.CHUNK_ROWS` consecutive rows of one file) is one `Translator.translate` call, which sorts
its sentences by length into batches of `batch_size`; paragraphs are split into sentences as `mtonnx translate`
does. Chunks are fixed by the file alone, so every engine makes the same calls and gets the same translations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from mtonnx.runtime.textio import translate_lines
from mtonnx.scale import inputs
from mtonnx.scale.shards import TRANSLATED


def file_chunks(data: bytes, item: inputs.Input, chunk_rows: int = inputs.CHUNK_ROWS) -> list[dict[str, Any]]:
    """One file's rows as chunk rows: shard, source, chunk, chunks and the chunk's columns as lists."""
    parts = inputs.chunks(inputs.read_rows(data, item.stem, item.format), chunk_rows)
    routing = {"shard": item.stem, "source": item.path, "chunks": len(parts)}
    return [{**routing, "chunk": k, **part} for k, part in enumerate(parts)]


class Chunks:
    """One Translator (the model loads once per process: a Ray actor, or the local engine); called with a table of
    chunk rows, it returns their rows translated (shards.TRANSLATED columns), one translate call per chunk.

    `model_dir` is the first of `model_dirs` that is a directory here: the path as the user gave it, which a
    relative path shipped with a Ray job's working_dir resolves on each node, then the driver's absolute path.
    """

    def __init__(
        self,
        model_dirs: tuple[str, ...],
        threads: int = 1,
        batch_size: int = 32,
        source_prefix: str = "",
        decoder: str = "auto",
        options: dict[str, Any] | None = None,
    ):
        from mtonnx.runtime import SessionSettings, Translator

        self.model_dir = next((d for d in model_dirs if Path(d).is_dir()), model_dirs[-1])
        self.translator = Translator(self.model_dir, decoder=decoder, session=SessionSettings(threads=threads))
        self.batch_size, self.source_prefix, self.options = batch_size, source_prefix, dict(options or {})

    def _translate(self, sentences: list[str]) -> list[str]:
        return self.translator.translate(
            sentences, batch_size=self.batch_size, source_prefix=self.source_prefix, **self.options
        )

    def translate(self, texts: list[str], errors: list[str]) -> tuple[list[str], list[str]]:
        """(translations, errors) of one chunk: rows that already have an error are not translated; if the chunk's
        call fails, each row is retried alone and only the rows that fail again get an error."""
        todo = [i for i, error in enumerate(errors) if not error]
        translations, errors = [""] * len(texts), list(errors)
        try:
            done = translate_lines(self._translate, [texts[i] for i in todo])
        except Exception:  # one bad row must not fail its chunk
            done = []
            for i in todo:
                try:
                    done.append(translate_lines(self._translate, [texts[i]])[0])
                except Exception as err:
                    done.append("")
                    errors[i] = f"translation failed: {type(err).__name__}: {err}".replace("\n", " ")
        for i, translation in zip(todo, done):
            translations[i] = translation
        return translations, errors

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Ray's map_batches: a table of chunk rows (file_chunks' columns) in, their rows translated out."""
        return self.rows(batch.to_pylist())

    def rows(self, chunks: list[dict[str, Any]]) -> pa.Table:
        """Chunk rows (file_chunks' dicts) in, their rows translated out (shards.TRANSLATED)."""
        return translated(chunks, [self.translate(chunk["text"], chunk["error"]) for chunk in chunks])


def translated(chunks: list[dict[str, Any]], results: list[tuple[list[str], list[str]]]) -> pa.Table:
    """Chunk rows and their (translations, errors) as one table of rows (shards.TRANSLATED columns)."""
    out: dict[str, list] = {name: [] for name in TRANSLATED.names}
    for chunk, (translations, errors) in zip(chunks, results):
        count = len(chunk["id"])
        for name in ("shard", "chunk", "chunks", "source"):
            out[name] += [chunk[name]] * count
        for name in ("id", "position", "text"):
            out[name] += chunk[name]
        out["translation"] += translations
        out["error"] += errors
    return pa.Table.from_pydict(out, schema=TRANSLATED)
