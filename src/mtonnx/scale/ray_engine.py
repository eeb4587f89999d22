"""The `ray` engine: the same steps as `local` as a Ray Data pipeline, on a laptop or on a cluster.

`read_binary_files` (one read task per input file) -> `flat_map(work.file_chunks)` (the rows, cut into chunks; one
dataset row per chunk, so Ray never splits a chunk) -> `map_batches(work.Chunks)` on a fixed pool of N actors, each
with num_cpus=T and one Translator with intra_op_num_threads=T (the model loads once per actor; one chunk per call,
one chunk per translate call) -> `write_datasink(ShardSink)`, whose write tasks write each input's shard with
`shards.write_shard` (Ray's file writers name files from (write uuid, task index) only, never from the input).
Files are read with Ray's binary reader and parsed by `inputs`, not `read_text`/`read_json`, which fail a whole
file on one undecodable or malformed line and keep no line numbers. The unit of parallel work is a file: give at
least as many files as workers (ideally 4x or more) for the pool to stay busy.

The scheduling hang on few CPUs (N actors with num_cpus=1 on N CPUs leave none for the 1-CPU read task, and the
job waits forever): the read, chunk and write tasks request num_cpus=0 (they are short and I/O-bound), so they
never wait for a CPU an actor holds, and a cluster with fewer than N*T CPUs, or no node with T, is refused before
any work. A local cluster gets max(cores, N*T) + SPARE_CPUS logical CPUs: the actors take N*T and nothing requests
the spare ones; they only raise the number of idle worker processes Ray keeps warm (one per logical CPU), so the
0-CPU read and write tasks reuse a warm process instead of starting a Python interpreter mid-job, on the cores the
actors translate on.

On a cluster, `connect` turns a missing or wrong authentication token into one line that says how to pass it, and
`check_nodes` refuses, before any work, a node that lacks the model directory or holds another model in it.
Rows land exactly once through a lost worker or node: Ray Data's actor pool keeps its defaults, max_restarts=-1 and
max_task_retries=-1 (a dead actor is restarted and its call retried, on the actors left while it restarts), and
its read and write tasks are retried on a system failure (Ray's max_retries); rows reach disk only through
`shards.commit`, which writes a file's whole shard (or a part named by its chunk) under a temporary name, renames it
and writes its sidecar last; so a chunk run twice writes the same file twice, never two copies of its rows, and a
rerun redoes only the inputs without a complete sidecar.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
import ray.data
from ray.data import ActorPoolStrategy, Datasink
from ray.data.block import BlockAccessor

from mtonnx.scale import shards, work
from mtonnx.scale.inputs import CHUNK_ROWS, Input, ScaleError

SPARE_CPUS = 2  # never requested: they keep a read and a write worker process warm (see the module docstring)
SET_TOKEN = "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, a file holding it) as on its nodes"
# a reachable head that refuses a driver without its token: Ray says only that it failed to connect
NO_TOKEN = f"the cluster uses token authentication, as a head of Ray 2.60 does by default: {SET_TOKEN}"
TOKEN_HINT = f"it requires its authentication token: {SET_TOKEN}"


class ShardSink(Datasink):
    """Ray Data's writer for `mtonnx batch`: each write task commits the shards whose rows it holds (shards.commit);
    the driver collects their summaries."""

    def __init__(self, job: shards.Job, items: dict[str, Input]):
        self.job, self.items, self.summaries = job, items, []

    def write(self, blocks, ctx) -> list[dict[str, Any]]:
        """Write one task's blocks: whole inputs as shards, parts of inputs as parts (the last part assembles)."""
        tables = [BlockAccessor.for_block(block).to_arrow() for block in blocks]
        tables = [t for t in tables if t.num_rows]
        return shards.commit(pa.concat_tables(tables), self.job, self.items) if tables else []

    def on_write_complete(self, write_result) -> None:
        """Keep every write task's shard summaries (on the driver)."""
        self.summaries = [summary for returned in write_result.write_returns for summary in returned]


def connect(address: str | None, cpus_needed: int, log: Callable[[str], None]) -> tuple[bool, float]:
    """Join the cluster at `address` ($RAY_ADDRESS when None) or start a local one (`local_cpus` logical CPUs),
    unless Ray is already initialized; returns (started here, seconds)."""
    start = time.perf_counter()
    if ray.is_initialized():
        return False, 0.0
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        _reachable(address)  # ray.init retries a dead address for minutes
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except ray.exceptions.AuthenticationError:
            raise ScaleError(f"cannot join the Ray cluster at {address}: {TOKEN_HINT}") from None
        except (ConnectionError, RuntimeError, ValueError) as err:
            lines = [line for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
            hint = f" ({TOKEN_HINT})" if "token" in lines[0].lower() else f" (if {NO_TOKEN})"
            raise ScaleError(f"cannot join the Ray cluster at {address}: {lines[0]}{hint}") from None
        log(f"joined the Ray cluster at {address} in {time.perf_counter() - start:.1f} s")
    else:
        cores = os.cpu_count() or 1
        if cpus_needed > cores:
            log(f"mtonnx: warning: {cpus_needed} worker threads on {cores} cores: oversubscribed, expect less speed")
        cpus = local_cpus(cpus_needed)
        ray.init(num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
        log(f"started a local Ray cluster ({cpus} logical CPUs) in {time.perf_counter() - start:.1f} s")
    return True, time.perf_counter() - start


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail with one line when nothing accepts connections at a host:port address ("auto" and the like pass)."""
    import socket

    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not (host and port.isdigit()):
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ScaleError(f"cannot join the Ray cluster at {address}: {err.strerror or err}") from None


def local_cpus(cpus_needed: int) -> int:
    """Logical CPUs of a local cluster for a pool of `cpus_needed`: max(cores, cpus_needed) + SPARE_CPUS."""
    return max(os.cpu_count() or 1, cpus_needed) + SPARE_CPUS


def check_resources(workers: int, threads: int) -> None:
    """Refuse a pool the cluster cannot hold: fewer than workers*threads CPUs, or no node with `threads` CPUs."""
    total = ray.cluster_resources().get("CPU", 0)
    largest = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")), default=0)
    if total < workers * threads or largest < threads:
        raise ScaleError(
            f"the Ray cluster has {total:g} CPUs (at most {largest:g} on one node); {workers} workers x {threads} "
            f"threads need {workers * threads} (and {threads} on one node): lower --workers or --threads-per-worker"
        )


def check_nodes(model_dirs: tuple[str, ...], expected: str, timeout_s: float = 120.0) -> None:
    """Refuse a cluster where a node that can run a worker lacks the model, or holds another one: on each such node
    a task (pinned there, no CPU) finds the first of `model_dirs` that is a directory and its content key
    (runtime.integrity.content_key: its files' names and hashes), which must be the driver's, `expected`. One line
    names the first node that fails, by address and id, and the directory."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(_model_key)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) > 0]
    pinned = [NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in nodes]
    found = ray.get([probe.options(scheduling_strategy=s).remote(model_dirs) for s in pinned], timeout=timeout_s)
    wanted = model_dirs[-1]
    for node, key in zip(nodes, found):
        name = f"node {node['NodeManagerAddress']} (id {node['NodeID'][:12]})"
        if key is None:
            raise ScaleError(
                f"{name} has no model directory {wanted}: copy it there, or mount it at that path, on every node"
            )
        if key != expected:
            raise ScaleError(
                f"{name} holds another model at {wanted}: its files differ from the driver's copy; "
                "copy the same directory to every node"
            )


def _model_key(model_dirs: tuple[str, ...]) -> str | None:
    """On a node: the content key of the first of `model_dirs` that is a directory there, None when none is."""
    from mtonnx.runtime.integrity import content_key

    here = next((d for d in model_dirs if Path(d).is_dir()), None)
    return None if here is None else content_key(here)


def run(
    pending: list[Input],
    job: shards.Job,
    worker: dict[str, Any],
    workers: int,
    threads: int,
    chunk_rows: int = CHUNK_ROWS,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Translate `pending` on the connected Ray cluster with `workers` actors of `threads` CPUs (work.Chunks built
    from `worker`; `check_resources` first); returns each shard's summary."""
    items = {item.stem: item for item in pending}
    by_path = {item.path: item for item in pending}
    with _quiet(not progress):
        ds = ray.data.read_binary_files(
            [item.path for item in pending], include_paths=True, override_num_blocks=len(pending), num_cpus=0
        )
        ds = ds.flat_map(_chunk_rows, fn_kwargs={"by_path": by_path, "chunk_rows": chunk_rows}, num_cpus=0)
        ds = ds.map_batches(
            work.Chunks,
            fn_constructor_kwargs=worker,
            batch_size=1,
            batch_format="pyarrow",
            compute=ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1),
            num_cpus=threads,
        )
        sink = ShardSink(job, items)
        ds.write_datasink(sink, ray_remote_args={"num_cpus": 0})
    summaries = {s["shard"]: s for s in sink.summaries if "rows" in s}
    seen = {s["shard"] for s in sink.summaries}
    for item in pending:
        if item.stem not in seen:  # an input without rows: no chunk of it reached a writer
            summaries[item.stem] = shards.write_shard(shards.empty(), job, item)
        elif item.stem not in summaries:  # every part written, the assembling writer lost a race it should not
            assembled = shards.assemble(job, item, _chunks_of(job, item))
            if assembled is None:
                raise ScaleError(f"{item.path}: some chunks never reached a writer; its shard was not written")
            summaries[item.stem] = assembled
    return [summaries[item.stem] for item in pending]


def _chunk_rows(row: dict[str, Any], by_path: dict[str, Input], chunk_rows: int) -> list[dict[str, Any]]:
    return work.file_chunks(row["bytes"], by_path[row["path"]], chunk_rows)


def _chunks_of(job: shards.Job, item: Input) -> int:
    import pyarrow.parquet as pq

    parts = sorted((Path(job.out_dir) / shards.PARTS / item.stem).glob("*.parquet"))
    return pq.read_table(parts[0], columns=["chunks"])["chunks"][0].as_py() if parts else 1


@contextlib.contextmanager
def _quiet(quiet: bool):
    """No progress bars and no Ray Data INFO lines while `quiet` (the notebook); Ray's defaults otherwise."""
    context = ray.data.DataContext.get_current()
    logger = logging.getLogger("ray.data")
    saved = context.enable_progress_bars, logger.level
    if quiet:
        context.enable_progress_bars = False
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        context.enable_progress_bars = saved[0]
        logger.setLevel(saved[1])
