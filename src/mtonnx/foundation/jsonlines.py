"""A child process spoken to in JSON lines: one request per stdin line, one answer per stdout line.

The JavaScript runtime in Node (mtonnx.web.node) and the page in Chromium (mtonnx.lab.webpage) run this way, so a
caller keeps one loaded model across requests and can interleave several runtimes.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any


class JsonLinesProcess:
    """`command` started with pipes; `ask` sends a request and reads its answer. An answer holding `error`, or a
    process that ended, raises `failure` with the message (the end of stderr for a process that ended)."""

    failure: type[Exception] = RuntimeError

    def __init__(self, command: list[str], new_session: bool = False):
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            start_new_session=new_session,
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close stdin (the child finishes its last answer and exits) and wait for it, killing it after 30 s."""
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def answer(self) -> dict[str, Any]:
        """The next answer line."""
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(30)
            raise self.failure(f"exited ({self.process.returncode}): {self.process.stderr.read().strip()[-600:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise self.failure(answer["error"])
        return answer

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request, its answer."""
        self.process.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self.process.stdin.flush()
        return self.answer()
