"""Notebook 12's measurements: a corpus from the project's data, what a local Ray cluster costs (start-up, memory),
the pipeline's own I/O rate, the on-paper plan (workers and wall time) from a measured per-worker rate, and the same
job on one node and on two (`two_nodes`, each cluster in a network namespace of its own: mtonnx.scale.cluster)."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from mtonnx.measure.timing import paired_ratio


def write_corpus(texts: list[str], lines: int, out_dir: str | Path, files: int = 4) -> list[Path]:
    """`lines` lines cycled from `texts`, split into `files` text files of (nearly) equal length; their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus = [texts[i % len(texts)] for i in range(lines)]
    per = math.ceil(lines / files)
    paths = []
    for k in range(files):
        path = out / f"corpus-{k:02d}.txt"
        path.write_text("".join(f"{line}\n" for line in corpus[k * per : (k + 1) * per]), encoding="utf-8")
        paths.append(path)
    return paths


def ray_processes() -> list[psutil.Process]:
    """The processes of the Ray cluster this process started (its descendants: gcs, raylet, workers, ...)."""
    return psutil.Process().children(recursive=True)


def rss_mb(processes: list[psutil.Process] | None = None) -> float:
    """Resident memory of `processes` (default: this process's Ray cluster), in MB; gone processes count 0."""
    total = 0
    for process in ray_processes() if processes is None else processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return round(total / 1e6, 1)


def start_local_ray(workers: int = 2, threads: int = 1) -> dict[str, Any]:
    """Import Ray (and Ray Data) and start the local cluster `mtonnx batch --engine ray` would start for this pool;
    returns import_s, startup_s, cpus, processes and rss_mb right after start-up."""
    start = time.perf_counter()
    import ray

    from mtonnx.scale import ray_engine

    imported = time.perf_counter()
    cpus = ray_engine.local_cpus(workers * threads)
    ray.init(num_cpus=cpus, include_dashboard=False, logging_level="WARNING")
    ready = time.perf_counter()
    processes = ray_processes()
    return {
        "import_s": round(imported - start, 2),
        "startup_s": round(ready - imported, 2),
        "cpus": cpus,
        "processes": len(processes),
        "rss_mb": rss_mb(processes),
    }


def stop_ray(timeout_s: float = 30.0) -> int:
    """Shut Ray down and wait for its processes to exit; returns how many are still alive after `timeout_s`."""
    import ray

    processes = ray_processes()
    ray.shutdown()
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return len(alive)


class MemorySampler:
    """`with MemorySampler() as m:` samples the Ray cluster's RSS every `interval_s` in a thread; `m.peak_mb`."""

    def __init__(self, interval_s: float = 0.25):
        self.interval_s, self.peak_mb, self.samples = interval_s, 0.0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(rss_mb())
            self.peak_mb = max(self.peak_mb, self.samples[-1])
            self._stop.wait(self.interval_s)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def alternate(
    run: Callable[[int, Path], dict[str, Any]], workers: tuple[int, ...], repeats: int, out_dir: str | Path
) -> dict[int, list[dict[str, Any]]]:
    """`repeats` rounds of `run(n, out)` for each worker count n in turn, the order reversed every other round (1 2,
    2 1, 1 2, ...), so the machine's drift between minutes hits every count alike and favours no count's place in a
    round; each run writes into its own empty directory out_dir/w<n>-<round> under a MemorySampler.
    Per worker count, its runs' results with `out` and `peak_mb` (the Ray cluster's peak RSS) added."""
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in workers}
    for k in range(repeats):
        for n in workers if k % 2 == 0 else workers[::-1]:
            out = Path(out_dir) / f"w{n}-{k + 1}"
            with MemorySampler() as memory:
                result = run(n, out)
            runs[n].append({**result, "out": out, "peak_mb": memory.peak_mb})
    return runs


def typical(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One worker count's runs in one line: median seconds and sentences/s, their range, the highest peak RSS."""
    rates = [r["sentences_per_s"] for r in runs]
    return {
        "sentences_per_s": round(statistics.median(rates), 2),
        "seconds": round(statistics.median(r["seconds"] for r in runs), 3),
        "sentences_per_s_range": [min(rates), max(rates)],
        "peak_mb": max(r["peak_mb"] for r in runs),
        "repeats": len(runs),
    }


def speedup(base: list[dict[str, Any]], more: list[dict[str, Any]]) -> dict[str, float] | None:
    """`more` workers against `base` on the same corpus, round by round (base seconds / more seconds): median, min
    and max over the rounds."""
    return paired_ratio([r["seconds"] for r in base], [r["seconds"] for r in more])


def load_seconds(model_dir: str | Path, threads: int = 1) -> float:
    """Seconds to build one Translator from `model_dir`: what every actor pays once."""
    from mtonnx.runtime import SessionSettings, Translator

    start = time.perf_counter()
    Translator(model_dir, session=SessionSettings(threads=threads))
    return round(time.perf_counter() - start, 3)


def io_rate(paths: list[Path], out_dir: str | Path) -> dict[str, float]:
    """The pipeline without the model, in one process: read, parse, chunk and write a shard per file (translation =
    text); rows_per_s, and bytes per row read and written."""
    from mtonnx.scale import inputs, shards, work

    job = shards.Job(str(out_dir))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    rows = read = written = 0
    start = time.perf_counter()
    for item in inputs.find_inputs([str(p) for p in paths]):
        data = Path(item.path).read_bytes()
        chunks = work.file_chunks(data, item)
        table = work.translated(chunks, [(chunk["text"], chunk["error"], [[]] * len(chunk["id"])) for chunk in chunks])
        rows += shards.write_shard(table, job, item)["rows"]
        read += len(data)
        written += shards.shard_path(job, item.stem).stat().st_size
    seconds = time.perf_counter() - start
    return {
        "rows_per_s": round(rows / seconds, 1),
        "bytes_in_per_row": round(read / rows, 1),
        "bytes_out_per_row": round(written / rows, 1),
    }


def wall_s(rate_per_worker: float, overhead_s: float, sentences: float, workers: int) -> float:
    """On paper: fixed overhead plus the sentences shared by `workers` each translating `rate_per_worker`/s."""
    return overhead_s + sentences / (workers * rate_per_worker)


def workers_for(rate_per_worker: float, overhead_s: float, sentences: float, deadline_s: float) -> int | None:
    """On paper: the fewest workers that finish `sentences` within `deadline_s` (None: the overhead alone is more)."""
    if deadline_s <= overhead_s:
        return None
    return math.ceil(sentences / (rate_per_worker * (deadline_s - overhead_s)))


def break_even(local_rate: float, rate_per_worker: float, workers: int, overhead_s: float) -> float:
    """The corpus size above which Ray with `workers` beats `local`; inf when it never does."""
    gain = 1 / local_rate - 1 / (workers * rate_per_worker)
    return overhead_s / gain if gain > 0 else math.inf


def dir_mb(path: str | Path) -> float:
    """Size of the files in a directory tree, in MB."""
    return round(sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) / 1e6, 2)


def plan(
    rate_per_worker: float,
    overhead_s: float,
    sizes: dict[str, float],
    workers: tuple[int, ...] = (1, 16, 128, 1024),
    deadlines_h: tuple[float, ...] = (1, 8),
) -> dict[str, Any]:
    """On paper, per corpus size: wall_s at each worker count, and workers_for_<h>h (None: never within it)."""
    out: dict[str, Any] = {"wall_s": {}, **{f"workers_for_{h:g}h": {} for h in deadlines_h}}
    for name, sentences in sizes.items():
        out["wall_s"][name] = {f"w{n}": round(wall_s(rate_per_worker, overhead_s, sentences, n), 1) for n in workers}
        for h in deadlines_h:
            out[f"workers_for_{h:g}h"][name] = workers_for(rate_per_worker, overhead_s, sentences, h * 3600)
    return out


NODE_RUNS = (  # two_nodes' runs: (name, mtonnx.scale.cluster fault, logical CPUs of each node)
    ("nodes1", "none", (2,)),
    ("nodes2", "none", (1, 1)),
    ("kill_worker", "kill-worker", (1, 1)),
)


def two_nodes(
    model_dir: str | Path, inputs: str, out_dir: str | Path, batch_args: tuple[str, ...] = (), repeats: int = 3
) -> dict:
    """The same `mtonnx batch --workers 2` job (`batch_args` added) on one node of 2 CPUs, on two nodes of 1 CPU,
    and on two nodes again with a translation worker killed halfway through the plain two-node run's time
    (NODE_RUNS), in `repeats` rounds of the three, each run on its own cluster with token authentication in its own
    network namespace. Per run: exit status, wall seconds of the command (start to exit, as a user waits for it),
    its output directory and the Ray processes left. Then, paired by round: `nodes2_vs_nodes1`, one node's seconds
    over two nodes' (above 1: two nodes were faster), and `kill_worker_lost_s`, the killed run's seconds beyond the
    plain two-node run's, each as its median with the min and max over the rounds. RuntimeError for a run that did
    not finish with exit status 0."""
    from mtonnx.scale import cluster

    rounds: list[dict[str, dict]] = []
    for k in range(repeats):
        runs: dict[str, dict] = {}
        for name, fault, cpus in NODE_RUNS:
            out = Path(out_dir) / f"{name}-{k + 1}"
            out.parent.mkdir(parents=True, exist_ok=True)
            result = out.with_suffix(".json")
            args = [fault, str(model_dir), inputs, str(out), str(result), "--cpus", ",".join(map(str, cpus))]
            if fault == "kill-worker":
                args += ["--kill-after", str(runs["nodes2"]["seconds"] / 2)]
            done = subprocess.run(cluster.isolated([*args, "--", *batch_args]), capture_output=True, text=True)
            if done.returncode != 0:
                lines = [line for line in done.stderr.splitlines() if line.strip()] or [f"exit {done.returncode}"]
                raise RuntimeError(f"the {name} run could not be made: {lines[-1]}")
            runs[name] = {**json.loads(result.read_text(encoding="utf-8")), "out": out}
            failed = [run for run in runs[name]["runs"] if run["rc"] != 0]
            if failed:
                raise RuntimeError(f"the {name} run failed: {(failed[0]['stderr'] or ['no message'])[-1]}")
        rounds.append(runs)
    ratio = [r["nodes1"]["seconds"] / r["nodes2"]["seconds"] for r in rounds]
    lost = [r["kill_worker"]["seconds"] - r["nodes2"]["seconds"] for r in rounds]
    return {
        "rounds": rounds,
        "nodes2_vs_nodes1": round(statistics.median(ratio), 3),
        "nodes2_vs_nodes1_range": [round(min(ratio), 3), round(max(ratio), 3)],
        "kill_worker_lost_s": round(statistics.median(lost), 2),
        "kill_worker_lost_s_range": [round(min(lost), 2), round(max(lost), 2)],
    }
