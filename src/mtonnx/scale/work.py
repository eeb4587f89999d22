"""The work both engines do: a file's bytes into chunk rows, and `Chunks`, one Translator translating chunk rows.

A chunk (up to `inputs.CHUNK_ROWS` consecutive rows of one file) is one `Translator.translate` call, which sorts
its sentences by length into batches of `batch_size`; rows are split into sentences by the one rule of
runtime.segments, as `mtonnx translate` does. Chunks are fixed by the file alone, so every engine makes the same
calls and gets the same translations. A sentence too long for the model becomes a warning on its row, naming the
file and line, which the job logs once the row's shard is written (a Ray actor has no terminal of its own).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from mtonnx.runtime.translator import EmptyTranslationError
from mtonnx.scale import inputs
from mtonnx.scale.shards import TRANSLATED


def file_chunks(data: bytes, item: inputs.Input, chunk_rows: int = inputs.CHUNK_ROWS) -> list[dict[str, Any]]:
    """One file's rows as chunk rows: shard, source, format, chunk, chunks and the chunk's columns as lists.

    The bytes must be the ones the job planned with (`item.sha256`): a sidecar records that hash as the version its
    shard translates, so a file edited while the job runs fails the job instead of passing as that version."""
    if hashlib.sha256(data).hexdigest() != item.sha256:
        raise inputs.ScaleError(f"{item.path} changed while the job ran: run the job again to translate it as it is")
    parts = inputs.chunks(inputs.read_rows(data, item.stem, item.format), chunk_rows)
    routing = {"shard": item.stem, "source": item.path, "format": item.format, "chunks": len(parts)}
    return [{**routing, "chunk": k, **part} for k, part in enumerate(parts)]


def place(chunk: dict[str, Any], k: int) -> str:
    """Where row `k` of a chunk is, for a warning: file name and line (row in Parquet), and its id unless that is
    the `<stem>:<line>` a text row gets."""
    name, position, row_id = Path(chunk["source"]).name, chunk["position"][k], chunk["id"][k]
    where = f"{name} {'row' if chunk['format'] == 'parquet' else 'line'} {position}"
    return where if row_id == f"{chunk['shard']}:{position}" else f"{where} (id {row_id})"


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
        verify: bool | None = None,
    ):
        from mtonnx.runtime import SessionSettings, Translator

        self.model_dir = next((d for d in model_dirs if Path(d).is_dir()), model_dirs[-1])
        self.translator = Translator(
            self.model_dir, decoder=decoder, session=SessionSettings(threads=threads), verify=verify
        )
        self.batch_size, self.source_prefix, self.options = batch_size, source_prefix, dict(options or {})

    def _translate(self, texts: list[str]) -> tuple[list[str], list[list[int]]]:
        """Translations of `texts` and, per text, the number of pieces of each sentence that had to be cut to fit
        the model (collected per call, so a call that fails reports no cut)."""
        cuts: list[list[int]] = [[] for _ in texts]
        done = self.translator.translate(
            texts,
            batch_size=self.batch_size,
            source_prefix=self.source_prefix,
            on_cut=lambda cut: cuts[cut.text].append(cut.pieces),
            **self.options,
        )
        return done, cuts

    def _alone(self, text: str) -> tuple[str, list[int], str]:
        """One row translated on its own: (translation, cuts, error), the error empty when it translated."""
        try:
            done, cuts = self._translate([text])
        except Exception as err:  # this row's own failure: its error, not the chunk's
            return "", [], f"translation failed: {type(err).__name__}: {err}".replace("\n", " ")
        return done[0], cuts[0], ""

    def translate(
        self, texts: list[str], errors: list[str], places: list[str]
    ) -> tuple[list[str], list[str], list[list[str]]]:
        """(translations, errors, warnings) of one chunk: rows that already have an error are not translated; if the
        chunk's call fails, each row is retried alone and only the rows that fail again get an error. A row's
        warnings name it by `places` (a row is one line: a cut is always in line 1 of its text)."""
        todo = [i for i, error in enumerate(errors) if not error]
        translations, errors, warnings = [""] * len(texts), list(errors), [[] for _ in texts]
        try:
            done, cuts = self._translate([texts[i] for i in todo])
            results = list(zip(done, cuts, [""] * len(todo)))
        except EmptyTranslationError:  # the model answers nothing: the job fails, no shard is marked complete
            raise
        except Exception:  # one bad row must not fail its chunk
            results = [self._alone(texts[i]) for i in todo]
        for i, (translation, pieces, error) in zip(todo, results):
            translations[i], errors[i] = translation, error
            warnings[i] = [
                f"{places[i]}: a sentence too long for the model was translated in {n} pieces" for n in pieces
            ]
        return translations, errors, warnings

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Ray's map_batches: a table of chunk rows (file_chunks' columns) in, their rows translated out."""
        return self.rows(batch.to_pylist())

    def rows(self, chunks: list[dict[str, Any]]) -> pa.Table:
        """Chunk rows (file_chunks' dicts) in, their rows translated out (shards.TRANSLATED)."""
        return translated(
            chunks,
            [
                self.translate(chunk["text"], chunk["error"], [place(chunk, k) for k in range(len(chunk["id"]))])
                for chunk in chunks
            ],
        )


def translated(chunks: list[dict[str, Any]], results: list[tuple[list[str], list[str], list[list[str]]]]) -> pa.Table:
    """Chunk rows and their (translations, errors, warnings) as one table of rows (shards.TRANSLATED columns)."""
    out: dict[str, list] = {name: [] for name in TRANSLATED.names}
    for chunk, (translations, errors, warnings) in zip(chunks, results):
        count = len(chunk["id"])
        for name in ("shard", "chunk", "chunks", "source"):
            out[name] += [chunk[name]] * count
        for name in ("id", "position", "text"):
            out[name] += chunk[name]
        out["translation"] += translations
        out["error"] += errors
        out["warnings"] += warnings
    return pa.Table.from_pydict(out, schema=TRANSLATED)
