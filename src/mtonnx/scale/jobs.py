"""`translate_files`: one batch job, from its checks to its summary, on either engine.

Everything that can fail without translating fails first (engine, model directory, inputs, extras, the output
directory and its lock), then the plan: inputs whose complete shard exists are skipped, the others are cleared of
what an earlier run left and translated; a shard path holding a file this project did not write stops the job
before anything is written, unless `overwrite`.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtonnx.runtime.integrity import content_key
from mtonnx.scale.inputs import CHUNK_ROWS, Input, ScaleError, find_inputs

if TYPE_CHECKING:
    from mtonnx.scale.shards import Job

ENGINES = ("local", "ray")
EXTRA = "pip install 'mtonnx[scale]'"


def stderr(message: str) -> None:
    """Print a progress message to stderr."""
    print(message, file=sys.stderr, flush=True)


def require(module: str, what: str) -> None:
    """Import `module` or fail with one line naming the extra that provides it."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise ScaleError(f"{what} needs {module}, which is not installed: {EXTRA}") from None


def translate_files(
    model_dir: str | Path,
    inputs: str | list[str],
    output: str | Path,
    *,
    engine: str = "local",
    workers: int = 2,
    threads_per_worker: int = 1,
    batch_size: int = 32,
    fmt: str = "parquet",
    input_format: str = "auto",
    source_prefix: str = "",
    decoder: str = "auto",
    options: dict[str, Any] | None = None,
    address: str | None = None,
    chunk_rows: int = CHUNK_ROWS,
    overwrite: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = stderr,
    verify: bool | None = None,
) -> dict[str, Any]:
    """Translate files (text, JSONL, Parquet; paths, directories or globs) into one shard per file in `output`.

    `engine` local (one process, no Ray) or ray (`workers` actors of `threads_per_worker` CPUs on the cluster at
    `address`, $RAY_ADDRESS, the one already initialized, or a local one started and stopped here). `options`
    go to generate (num_beams, max_new_tokens). `overwrite` replaces shard paths that hold files this project did
    not write instead of refusing them. `verify` checks the model's SHA256SUMS first (None: unless MTONNX_VERIFY=0;
    Ray workers check their own copies unless MTONNX_VERIFY=0 there). Returns rows, errors, translated, seconds,
    sentences_per_s (translated rows per second of the job, cluster start-up excluded), workers, skipped,
    skipped_errors (rows with an error in the skipped shards), redone, startup_s, and each written shard's summary.
    A model that answers every sentence of a chunk with empty text fails the job (EmptyTranslationError): no shard
    of it is marked complete.
    """
    log = log or (lambda message: None)
    _check_settings(engine, workers, threads_per_worker, batch_size, chunk_rows)
    model = _check_model(model_dir, decoder, batch_size, options, verify)
    out = Path(output).resolve()
    items = find_inputs([inputs] if isinstance(inputs, str | Path) else [str(i) for i in inputs], input_format)
    items = [item for item in items if not Path(item.path).is_relative_to(out)]  # a glob may reach our own shards
    if not items:
        raise ScaleError(f"no input files outside the output directory {output}")
    require("pyarrow", "mtonnx batch")
    require("filelock", "mtonnx batch")
    if engine == "ray":
        require("ray.data", "mtonnx batch --engine ray")
    from mtonnx.scale import shards

    if fmt not in shards.OUTPUT_FORMATS:
        raise ScaleError(f"output format must be {' or '.join(shards.OUTPUT_FORMATS)}; got {fmt!r}")
    options = dict(sorted((options or {}).items()))
    settings = {"model": str(model), "model_content": content_key(model), "decoder": decoder}
    job = shards.Job(str(output), fmt, {**settings, "source_prefix": source_prefix, "options": options})
    given = str(model_dir)
    worker = {
        "model_dirs": (given, str(model)) if not Path(given).is_absolute() else (str(model),),
        "threads": threads_per_worker,
        "batch_size": batch_size,
        "source_prefix": source_prefix,
        "decoder": decoder,
        "options": options,
        "verify": None if engine == "ray" else False,  # checked above; a Ray node checks its own copy
    }
    with shards.holding(_output_dir(output)):
        states, skipped_errors = _plan(job, items, overwrite, log)
        pending = [item for item in items if states[item.path] != "complete"]
        started, startup_s = False, 0.0
        if pending and engine == "ray":
            from mtonnx.scale import ray_engine

            if len(pending) < workers:
                log(
                    f"mtonnx: warning: {len(pending)} input files for {workers} workers: at most {len(pending)} busy "
                    "(a file is the unit of parallel work; split big files, e.g. split -l 100000 big.txt part-)"
                )
            started, startup_s = ray_engine.connect(address, workers * threads_per_worker, log)
        try:
            if pending and engine == "ray":
                ray_engine.check_resources(workers, threads_per_worker)
                ray_engine.check_nodes(worker["model_dirs"], settings["model_content"])
            for item in items:
                shards.prepare(job, item, keep_shard=states[item.path] == "complete")
            start = time.perf_counter()
            summaries = _run(engine, pending, job, worker, workers, threads_per_worker, chunk_rows, progress)
        finally:
            if started:
                import ray

                ray.shutdown()
        seconds = time.perf_counter() - start
    for summary in summaries:
        for warning in summary["warnings"]:
            log(f"mtonnx: warning: {warning}")
    translated = sum(s["translated"] for s in summaries)
    return {
        "engine": engine,
        "files": len(items),
        "skipped": len(items) - len(pending),
        "skipped_errors": skipped_errors,
        "redone": sum(1 for state in states.values() if state == "stale"),
        "rows": sum(s["rows"] for s in summaries),
        "errors": sum(s["errors"] for s in summaries),
        "translated": translated,
        "seconds": round(seconds, 3),
        "sentences_per_s": round(translated / seconds, 2) if translated and seconds > 0 else 0.0,
        "workers": 1 if engine == "local" else workers,
        "threads_per_worker": threads_per_worker,
        "startup_s": round(startup_s, 3),
        "output": str(output),
        "shards": summaries,
    }


def _run(
    engine: str,
    pending: list[Input],
    job: Job,
    worker: dict[str, Any],
    workers: int,
    threads: int,
    chunk_rows: int,
    progress: bool,
) -> list[dict[str, Any]]:
    """Translate `pending` on `engine` (Ray connected and checked already); returns each shard's summary."""
    if not pending:
        return []
    if engine == "local":
        from mtonnx.scale import local

        return local.run(pending, job, worker, chunk_rows, progress)
    from mtonnx.scale import ray_engine

    return ray_engine.run(pending, job, worker, workers, threads, chunk_rows, progress)


def _check_settings(engine: str, workers: int, threads_per_worker: int, batch_size: int, chunk_rows: int) -> None:
    """Refuse an unknown engine or a count that is not a positive integer, before anything is read."""
    if engine not in ENGINES:
        raise ScaleError(f"engine must be {' or '.join(ENGINES)}; got {engine!r}")
    counts = {
        "workers": workers,
        "threads_per_worker": threads_per_worker,
        "batch_size": batch_size,
        "chunk_rows": chunk_rows,
    }
    for name, value in counts.items():
        if not (isinstance(value, int) and value >= 1):
            raise ScaleError(f"{name} must be a positive integer; got {value!r}")


def _check_model(
    model_dir: str | Path, decoder: str, batch_size: int, options: dict[str, Any] | None, verify: bool | None
) -> Path:
    """The model directory, resolved, after the runtime's own checks (its SHA256SUMS first, as `verify` says) and a
    check that it can run these settings: a setting the model cannot run would otherwise fail every row."""
    from mtonnx.runtime.translator import check_dir, check_options, max_positions, verify_dir

    verify_dir(model_dir, verify)
    check_dir(model_dir, decoder)
    model = Path(model_dir).resolve()
    try:
        check_options(max_positions(model), batch_size, **(options or {}))
    except (TypeError, ValueError) as err:
        raise ScaleError(str(err)) from None
    return model


def _output_dir(output: str | Path) -> Path:
    """The output directory, created if needed; one line when it is a file or cannot be created."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise ScaleError(f"--output {output} is a file: give a directory for the shards (one per input file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ScaleError(f"--output {output}: cannot create the directory ({err.strerror or err})") from None
    return path


def _plan(job: Job, items: list[Input], overwrite: bool, log: Callable[[str], None]) -> tuple[dict[str, str], int]:
    """Each input's state (shards.state) and the rows with an error in the complete shards that are skipped;
    refuses, before anything is written, a shard path that holds a file this project did not write (unless
    `overwrite`, and never a directory)."""
    from mtonnx.scale import shards

    states = {item.path: shards.state(job, item) for item in items}
    for item in items:
        found = shards.foreign(job, item) if states[item.path] != "complete" else None
        if found is not None and (found.is_dir() or not overwrite):
            remedy = "" if found.is_dir() else ", or pass --overwrite to replace it"
            raise ScaleError(f"{found}: not written by mtonnx batch (no sidecar of its own); move it away{remedy}")
    complete = [item for item in items if states[item.path] == "complete"]
    skipped_errors = sum(shards.sidecar(shards.marker_path(job, item.stem))["errors"] for item in complete)
    if complete:
        log(f"skipping {len(complete)} of {len(items)} inputs: their complete output is in {job.out_dir}")
    redone = sum(1 for state in states.values() if state == "stale")
    if redone:
        log(f"redoing {redone} inputs whose output was made from another version of the input or other settings")
    return states, skipped_errors


def summary_line(result: dict[str, Any]) -> str:
    """The one-line summary `mtonnx batch` prints at the end."""
    done = result["files"] - result["skipped"]
    line = (
        f"{result['rows']} rows from {done} files ({result['errors']} with an error) in {result['seconds']:.1f} s: "
        f"{result['sentences_per_s']:.1f} sentences/s with {result['workers']} worker(s) x "
        f"{result['threads_per_worker']} thread(s) [{result['engine']}]"
    )
    if result["skipped"]:
        line += f"; {result['skipped']} inputs skipped (complete, {result['skipped_errors']} rows with an error)"
    return f"{line}; output in {result['output']}"
