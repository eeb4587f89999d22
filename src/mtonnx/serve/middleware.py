"""Two ASGI middlewares: the request log (one line per request, plus the request metrics) and the body limit.

The body limit answers 413 with a JSON error naming `max_body_bytes`: at once when Content-Length says the body
is too large, otherwise as soon as the bytes read pass the limit (a chunked body is never buffered past it).
"""

from __future__ import annotations

import json
import logging
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mtonnx.serve.metrics import ServiceMetrics

NOTE = "mtonnx.note"  # scope key: what the endpoint tells the log ({"sentences": n, "text": ...})
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

        try:
            await self.app(scope, receive, send_status)
        finally:
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


class BodyLimit:
    """Refuse request bodies over `max_body_bytes` with 413 and a JSON error."""

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes

    def message(self, size: int | None = None) -> str:
        """The error text: the body's size when known, and the limit."""
        seen = f"{size} bytes" if size is not None else "more bytes"
        return f"the request body has {seen}; at most {self.max_body_bytes} (max_body_bytes)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with a receive() that counts the body's bytes."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            body = json.dumps({"error": self.message(length)}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 413, "headers": [*headers, (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return None
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise HTTPException(413, self.message())  # the app's handler answers it as JSON
            return message

        return await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
