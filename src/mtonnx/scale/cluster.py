"""A Ray cluster of several nodes on one machine, started as a user starts one (`ray start`), with token
authentication on: what the multi-node tests and the 2-node run of the scale-out lesson stand on.

Ray gives a node of a cluster the machine's interface address, never 127.0.0.1, so nodes started on a plain machine
talk through that address. In a network namespace that holds only the loopback device they use 127.0.0.1, and the
cluster forms without touching a network: `isolated(args)` is the command line that runs this module's `main` in a
new one (`unshare --net`, as root or in a user namespace), which brings its loopback device up first.

`LocalCluster`, run inside it, makes this process a child subreaper, so that every process `ray start` leaves behind
(gcs, raylets, workers) stays its descendant; it starts a head and more nodes with one generated token
(RAY_AUTH_MODE=token and RAY_AUTH_TOKEN on every node, and in `env` for the drivers), finds a node's raylet and the
translation workers, kills one on demand, and at the end stops every process it started and counts those left.
`run_job` runs one `mtonnx batch` job against such a cluster, as a user runs it (its own process, `--address`, the
token in its environment), through one fault (FAULTS), and says how each run ended, what was killed, how long the
job took and how many Ray processes were left: `python -m mtonnx.scale.cluster FAULT MODEL INPUTS OUT RESULT_JSON
[--cpus 1,1] [-- BATCH_ARGS]` (run through `isolated`) writes that as JSON, for the tests and notebook 12.

Written by hand: Ray's own test cluster (ray.cluster_utils) starts its nodes through private APIs in the driver's
process, which tests neither `ray start` nor how a token reaches a node.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from mtonnx.foundation.ports import free_port

PR_SET_CHILD_SUBREAPER = 36
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
GCS = "gcs_server"  # the process name of the cluster's control store, on the head
TRANSLATION_WORKER = "MapWorker"  # in the process title Ray gives the actors of a Ray Data map_batches pool
GONE = (psutil.Error, ProcessLookupError, subprocess.TimeoutExpired)  # a process already gone is not an error here


class ClusterError(RuntimeError):
    """The cluster did not start, or a process it was asked to find is not there."""


def isolated(args: list[str]) -> list[str]:
    """The command line that runs `python -m mtonnx.scale.cluster *args` (`main`) in a new network namespace holding
    only a loopback device: `unshare --net` (with --map-root-user when not root: a user namespace grants it)."""
    root = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", "--net", *root, sys.executable, "-m", "mtonnx.scale.cluster", *args]


def loopback_up() -> None:
    """Bring the loopback device up (a new network namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


class LocalCluster:
    """A head and `len(cpus) - 1` more nodes on this machine, each with `cpus[i]` logical CPUs, started with
    `ray start` and one token. `address` and `env` are what a driver needs to join it."""

    def __init__(
        self, cpus: tuple[int, ...] = (1, 1), object_store_mb: int = 150, hidden: dict[int, str] | None = None
    ):
        """`hidden`: {node: directory} a node must not see (an empty tmpfs mounted over it in the node's own mount
        namespace): a node without the model, on a machine whose nodes share one file system."""
        self.cpus, self.object_store_mb, self.hidden = cpus, object_store_mb, dict(hidden or {})
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths have a length limit
        self.env = {
            **os.environ,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        self.raylets: list[psutil.Process] = []

    def __enter__(self) -> LocalCluster:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise ClusterError(f"cannot become a child subreaper: {os.strerror(ctypes.get_errno())}")
        try:
            for node, cpus in enumerate(self.cpus):
                self._start(node, cpus)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        left = self.stop()
        if left and exc[0] is None:
            raise ClusterError(f"{left} Ray processes outlived the cluster's stop")

    def _start(self, node: int, cpus: int) -> None:
        head = ["--head", f"--port={self.port}", f"--temp-dir={self.temp}", "--include-dashboard=false"]
        where = head if node == 0 else [f"--address={self.address}"]
        argv = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            *where,
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={cpus}",
            f"--object-store-memory={self.object_store_mb * 2**20}",
        ]
        if node in self.hidden:
            mount = 'mount -t tmpfs mtonnx-hidden "$0" && exec "$@"'
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, self.hidden[node], *argv]
        before = {p.pid for p in self._raylets()}
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            raise ClusterError(f"ray start of node {node} failed: {lines[-1] if lines else done.returncode}")
        started = [p for p in self._raylets() if p.pid not in before]
        if len(started) != 1:
            raise ClusterError(f"ray start of node {node} left {len(started)} new raylets, not 1")
        self.raylets.append(started[0])

    def processes(self) -> list[psutil.Process]:
        """Every process of the cluster that is still running (this process's descendants)."""
        out = []
        for process in psutil.Process().children(recursive=True):
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    out.append(process)
            except psutil.Error:
                pass
        return out

    def _raylets(self) -> list[psutil.Process]:
        return [p for p in self.processes() if _name(p) == "raylet"]

    def translation_workers(self, node: int | None = None) -> list[psutil.Process]:
        """The running translation actors (Ray Data's map workers), on node `node` only when given."""
        workers = [p for p in self.processes() if TRANSLATION_WORKER in " ".join(_cmdline(p))]
        if node is None:
            return workers
        raylet = self.raylets[node]
        return [p for p in workers if _parent_pid(p) == raylet.pid]

    def kill_worker(self, node: int | None = None) -> int | None:
        """SIGKILL one running translation actor (on `node` when given); its pid, None when none runs."""
        for worker in self.translation_workers(node):
            with contextlib.suppress(*GONE):
                worker.send_signal(signal.SIGKILL)
                return worker.pid
        return None

    def kill_node(self, node: int) -> int:
        """SIGKILL node `node`'s raylet (the node leaves the cluster; its workers exit with it); its pid."""
        raylet = self.raylets[node]
        with contextlib.suppress(*GONE):
            raylet.send_signal(signal.SIGKILL)
        return raylet.pid

    def stop(self, grace_s: float = 10.0) -> int:
        """Stop every process of the cluster, and only those (`ray stop` would stop every Ray process of the machine):
        SIGTERM to all but the GCS, then to the GCS, then SIGKILL to what is left; returns how many are still
        running after that (0: every one stopped, and the cluster's temp directory is removed). The GCS goes last
        because raylets and the autoscaler's monitor exit at once on SIGTERM while it answers, but wait out a
        timeout of their own once it is gone."""
        phases = ((signal.SIGTERM, lambda p: _name(p) != GCS), (signal.SIGTERM, None), (signal.SIGKILL, None))
        for sig, chosen in phases:
            left = [p for p in self.processes() if chosen is None or chosen(p)]
            for process in left:
                with contextlib.suppress(*GONE):
                    process.send_signal(sig)
            psutil.wait_procs(left, timeout=grace_s)
        _reap()
        left = len(self.processes())
        if not left:  # the session's sockets and logs: nothing reads them once every process has stopped
            shutil.rmtree(self.temp, ignore_errors=True)
        return left


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _parent_pid(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.Error:
        return None


def _reap() -> None:
    """Collect the exit status of every child that has exited (the subreaper's orphans become zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


FAULTS = {
    "none": "no fault",
    "kill-worker": "SIGKILL a translation worker",
    "kill-node": "SIGKILL the second node's raylet once a translation worker runs there (the node leaves)",
    "interrupt": "SIGINT the driver once the first shard is complete, then run the job again",
    "no-token": "the driver joins without the cluster's token",
    "hidden-model": "the second node cannot see the model directory",
}
WORKERS = 2


def run_job(
    fault: str,
    model: str,
    inputs: str,
    out: str,
    cpus: tuple[int, ...] = (1, 1),
    batch_args: tuple[str, ...] = (),
    kill_after_s: float = 0.0,
) -> dict:
    """One `mtonnx batch --workers 2` job on a LocalCluster of `cpus`, through `fault` (FAULTS; a kill comes once a
    translation worker runs and `kill_after_s` have passed since the job started): each run's exit status and last
    stderr lines, what was killed and when, the job's wall seconds (its first run, from start to exit), and `left`,
    the Ray processes still running after the cluster stopped. Call it inside `isolated`'s namespace."""
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {', '.join(FAULTS)}; got {fault!r}")
    result: dict = {"fault": fault, "cpus": list(cpus), "runs": []}
    hidden = {1: str(Path(model).resolve().parent)} if fault == "hidden-model" else {}  # the path is absent there
    cluster = LocalCluster(cpus=cpus, hidden=hidden).__enter__()
    argv = [sys.executable, "-m", "mtonnx", "batch", "--input", inputs, "--model-dir", model, "--output", out]
    argv += ["--address", cluster.address, "--workers", str(WORKERS), *batch_args]
    try:
        env = cluster.env
        if fault == "no-token":
            env = {k: v for k, v in env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
        start = time.perf_counter()
        job = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
        if fault == "interrupt":
            _wait(lambda: _complete_shards(out) > 0, job)
            job.send_signal(signal.SIGINT)
            result["interrupted_after_shards"] = _complete_shards(out)
        elif fault in ("kill-worker", "kill-node"):
            node = 1 if fault == "kill-node" else None
            _wait(lambda: bool(cluster.translation_workers(node)), job)
            _wait(lambda: time.perf_counter() - start >= kill_after_s, job)
            result["killed"] = cluster.kill_node(1) if node else cluster.kill_worker()
            result["killed_at_s"] = round(time.perf_counter() - start, 3)
        result["runs"].append(_ended(job))
        result["seconds"] = round(time.perf_counter() - start, 3)
        if fault == "interrupt":
            result["runs"].append(_ended(subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)))
    finally:
        result["left"] = cluster.stop()
    return result


def _wait(done: Callable[[], bool], job: subprocess.Popen) -> None:
    """Until `done()` holds, or the job has exited."""
    while not done() and job.poll() is None:
        time.sleep(0.02)


def _ended(process: subprocess.Popen) -> dict:
    _, err = process.communicate(timeout=1800)
    return {"rc": process.returncode, "stderr": err.strip().splitlines()[-5:]}


def _complete_shards(out: str) -> int:
    """Shards renamed into place (complete; the `.done` claim is written before, when an input is taken)."""
    return len([p for p in Path(out).glob("*") if p.suffix in (".parquet", ".jsonl")])


def main(argv: list[str]) -> int:
    """`python -m mtonnx.scale.cluster FAULT MODEL INPUTS OUT RESULT_JSON [--cpus 1,1] [-- BATCH_ARGS]`: bring the
    loopback device up (in the namespace `isolated` made), run `run_job` and write its result as JSON."""
    parser = argparse.ArgumentParser(prog="python -m mtonnx.scale.cluster")
    parser.add_argument("fault", choices=FAULTS)
    for name in ("model", "inputs", "out", "result"):
        parser.add_argument(name)
    parser.add_argument("--cpus", default="1,1", help="logical CPUs of each node, the head first")
    parser.add_argument("--kill-after", type=float, default=0.0, help="seconds into the job before a kill")
    cut = argv.index("--") if "--" in argv else len(argv)  # after it: more `mtonnx batch` arguments
    args, extra = parser.parse_args(argv[:cut]), tuple(argv[cut + 1 :])
    loopback_up()
    cpus = tuple(int(n) for n in args.cpus.split(","))
    result = run_job(args.fault, args.model, args.inputs, args.out, cpus, extra, args.kill_after)
    Path(args.result).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
