"""The service as a child process on a free loopback port, for notebook 11 and the tests.

`ServiceProcess.start(model_dir, ...)` runs `python -m mtonnx.serve` with its log in a temp file (a pipe nobody
reads would block the server once full); `wait_ready()` polls /health/ready; `stop()` sends SIGTERM, keeps the
log in memory, removes the temp directory and returns the exit code. A child never outlives its parent: it is
stopped at interpreter exit and, on Linux, the kernel sends it SIGTERM when the parent process dies.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mtonnx.foundation.ports import free_port
from mtonnx.serve.server import EXIT_WITH_PARENT


class ServiceProcess:
    """One `mtonnx serve` child process: its URL, its log, readiness, a graceful stop."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: Path, api_key: str | None = None):
        self.process, self.url, self.log_path, self.api_key = process, url, log_path, api_key
        self._final_log: str | None = None
        atexit.register(self.kill)

    @classmethod
    def start(
        cls,
        model_dir: str | Path,
        *args: str,
        host: str = "127.0.0.1",
        port: int | None = None,
        api_key: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ServiceProcess:
        """Start the service on `model_dir` with extra CLI `args` (e.g. "--max-batch-size", "1")."""
        port = port or free_port(host)
        log_dir = Path(tempfile.mkdtemp(prefix="mtonnx-serve-"))
        command = [sys.executable, "-m", "mtonnx.serve", "--model-dir", str(model_dir), "--host", host]
        command += ["--port", str(port), *args]
        if api_key is not None:
            key_file = log_dir / "api_key"
            key_file.write_text(api_key, encoding="utf-8")
            key_file.chmod(0o600)
            command += ["--api-key-file", str(key_file)]
        log_path = log_dir / "serve.log"
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", EXIT_WITH_PARENT: "1", **(env or {})}
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
        return cls(process, f"http://{host}:{port}", log_path, api_key)

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header when the service has a key."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        """Everything the service logged so far (after stop(): everything it logged)."""
        if self._final_log is not None:
            return self._final_log
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout_s: float = 60.0) -> ServiceProcess:
        """Block until /health/ready answers 200; RuntimeError (with the log's tail) if the process exits first."""
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the service exited with {self.process.returncode}:\n{self.log()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the service was not ready after {timeout_s} s:\n{self.log()[-2000:]}")

    def get(self, path: str) -> Any:
        """GET a path and return its JSON (raises for a non-2xx answer)."""
        import httpx

        response = httpx.get(f"{self.url}{path}", headers=self.headers, timeout=30)
        response.raise_for_status()
        return response.json()

    def translate(self, texts: list[str], **options) -> list[str]:
        """Translate texts with one POST /translate (options: beams, max_new_tokens)."""
        import httpx

        body = {"q": list(texts), "source": "en", "target": "zh", **options}
        response = httpx.post(f"{self.url}/translate", json=body, headers=self.headers, timeout=60)
        response.raise_for_status()
        return response.json()["translatedText"]

    def batch_stats(self) -> dict[str, float]:
        """From /metrics: model calls, sentences translated and mean sentences per call so far."""
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", headers=self.headers, timeout=30).text
        samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}
        calls, sentences = (
            samples.get("mtonnx_batch_sentences_count", 0.0),
            samples.get("mtonnx_batch_sentences_sum", 0.0),
        )
        return {
            "model_calls": calls,
            "sentences": sentences,
            "mean_batch": round(sentences / calls, 2) if calls else 0.0,
        }

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, wait for the graceful shutdown, return the exit code (killed after timeout_s: -9)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        atexit.unregister(self.kill)
        self._remove_log_dir()
        return self.process.returncode

    def kill(self) -> None:
        """Kill the process if it still runs (at interpreter exit) and remove its temp directory."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._remove_log_dir()

    def _remove_log_dir(self) -> None:
        if self._final_log is None:
            self._final_log = self.log()
            shutil.rmtree(self.log_path.parent, ignore_errors=True)

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
