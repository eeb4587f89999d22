"""Two ASGI middlewares: the request log (one line per request, plus the request metrics) and the body guard.

The body guard bounds reading a request's body, each refusal a JSON error: 413 naming `max_body_bytes` at once when
Content-Length says the body is too large, otherwise as soon as the bytes read pass the limit (a chunked body is
never buffered past it); 408 when the body is not complete within `timeout_s` of the request's start (a stalled
client); 503 when the service starts shutting down while a client is still sending (it is answered at once rather
than holding the shutdown). These answers close the connection. Before a 413, the rest of the body is read and
dropped, up to DRAIN_BYTES and within `timeout_s`: most clients (urllib, requests) send the whole body before they
read an answer, and a server that closes on unread bytes resets the connection, so they would see "Connection
reset" or "Broken pipe" instead of the 413. A client that asked `Expect: 100-continue` has sent no body yet and is
answered at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mtonnx.serve.metrics import ServiceMetrics

NOTE = "mtonnx.note"  # scope key: what the endpoint tells the log ({"sentences": n, "text": ...})
CLIENT_CLOSED = 499  # the client disconnected before its answer (nginx's code): counted apart from server errors
RETRY_AFTER_S = "1"
DRAIN_BYTES = 64 * 2**20  # the most of a refused body read and dropped before its 413 (past it: answered at once)
SHUTTING_DOWN = "the service is shutting down; retry later"
log = logging.getLogger("mtonnx.serve")


class RequestLog:
    """Log `METHOD path status sentences ms` at info level for every HTTP request and count it in the metrics."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, paths: tuple[str, ...]):
        self.app, self.metrics, self.paths = app, metrics, paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request, then log and count it (also when the app raised: status 500)."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, note, status = time.perf_counter(), {"sentences": 0}, 500
        scope[NOTE] = note

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_progress.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.in_progress.dec()
            seconds = time.perf_counter() - start
            path = scope["path"] if scope["path"] in self.paths else "other"
            self.metrics.observe_request(path, status, seconds)
            text = f" {json.dumps(note['text'], ensure_ascii=False)}" if "text" in note else ""
            log.info(
                "%s %s %d %d sentences %.1f ms%s",
                scope["method"],
                scope["path"],
                status,
                note["sentences"],
                seconds * 1000,
                text,
            )


class BodyGuard:
    """Bound reading request bodies: 413 past `max_body_bytes`, 408 past `timeout_s`, 503 once `stopping` is set."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, timeout_s: float, stopping: asyncio.Event):
        self.app, self.max_body_bytes, self.timeout_s, self.stopping = app, max_body_bytes, timeout_s, stopping

    def too_large(self, size: int | None = None) -> str:
        """The 413 text: the body's size when known, and the limit."""
        seen = f"{size} bytes" if size is not None else "more bytes"
        return f"the request body has {seen}; at most {self.max_body_bytes} (max_body_bytes)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a receive() that counts the body's bytes and bounds the wait for them."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            if length <= DRAIN_BYTES and not _expects_continue(scope):
                await self._drain(receive, time.monotonic() + self.timeout_s)
            body = json.dumps({"error": self.too_large(length)}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 413, "headers": [*headers, (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return None
        deadline, seen, complete = time.monotonic() + self.timeout_s, 0, False

        async def guarded() -> Message:
            nonlocal seen, complete
            if complete:  # after the body: only the disconnect is left to wait for, as long as it takes
                return await receive()
            message = await self._next(receive, deadline)
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    if message.get("more_body", False):
                        await self._drain(receive, deadline, seen)
                    raise _refusal(413, self.too_large())  # the app's handler answers it as JSON
                complete = not message.get("more_body", False)
            return message

        return await self.app(scope, guarded, send)

    async def _drain(self, receive: Receive, deadline: float, seen: int = 0) -> None:
        """Read and drop the rest of a refused body: until its end, DRAIN_BYTES, the deadline or a disconnect."""
        while seen <= DRAIN_BYTES:
            try:
                message = await self._next(receive, deadline)
            except HTTPException:  # the deadline passed or the shutdown began: answer now
                return
            if message["type"] != "http.request":
                return
            seen += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _next(self, receive: Receive, deadline: float) -> Message:
        """The next body message, unless the deadline passes (408) or the shutdown begins (503) first."""
        read, stop = asyncio.ensure_future(receive()), asyncio.ensure_future(self.stopping.wait())
        try:
            left = max(0.0, deadline - time.monotonic())
            await asyncio.wait({read, stop}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not read.done():
                read.cancel()
        if read.done():  # bytes that arrived win over a shutdown that began with them
            return read.result()
        if self.stopping.is_set():
            raise _refusal(503, SHUTTING_DOWN, {"Retry-After": RETRY_AFTER_S})
        raise _refusal(408, f"the request body did not arrive within {self.timeout_s} s (request_timeout_s)")


def _refusal(status: int, message: str, headers: dict[str, str] | None = None) -> HTTPException:
    """An answer to a request whose body is left unread: the connection closes after it."""
    return HTTPException(status, message, headers={"Connection": "close", **(headers or {})})


def _expects_continue(scope: Scope) -> bool:
    return any(name == b"expect" and value.lower() == b"100-continue" for name, value in scope.get("headers", []))


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
