"""uvicorn's HTTP/1.1 connection (h11) with what the service adds: a deadline for a request's headers, JSON for the
errors uvicorn answers itself, and a hook at the start of the graceful shutdown.

uvicorn closes idle keep-alive connections, but a client that opens a connection, or begins a request, and then
stalls before its headers are complete holds the connection forever. Here the headers must be complete within
`header_timeout_s` of the connection opening or of the request's first byte: past it the client gets a JSON 408 and
the connection closes (a connection that sent nothing is closed without an answer). A request uvicorn cannot parse
gets a JSON 400 (uvicorn's is plain text), and a client still sending its headers when the shutdown begins a JSON
503 (uvicorn just closes the connection). The app answers everything from the headers on (see middleware.BodyGuard).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from mtonnx.serve.middleware import RETRY_AFTER_S, SHUTTING_DOWN, log


class Connection(H11Protocol):
    """One client connection: uvicorn's, plus the header deadline and JSON answers for its own refusals."""

    def __init__(self, *args: Any, header_timeout_s: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the clock for the first request's headers."""
        super().connection_made(transport)
        self._expect_headers()

    def data_received(self, data: bytes) -> None:
        """Read the bytes; the clock runs while a request's headers are incomplete and stops once they are not."""
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            self._expect_headers()
        else:
            self._stop_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the clock with the connection."""
        self._stop_clock()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes that are not an HTTP/1.1 request, as JSON."""
        self.refuse(400, "the request is not valid HTTP/1.1")

    def shutdown(self) -> None:
        """At the graceful shutdown: a client halfway through its headers gets a 503; the rest is uvicorn's."""
        if self._partial_headers():
            self.refuse(503, SHUTTING_DOWN, {"retry-after": RETRY_AFTER_S})
        else:
            super().shutdown()

    def refuse(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        """Answer `{"error": message}` with `status` and close, whatever state the request is in."""
        body = json.dumps({"error": message}).encode()
        fields = {"content-type": "application/json", "content-length": str(len(body)), "connection": "close"}
        head = [
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
            *(f"{k}: {v}" for k, v in {**fields, **(headers or {})}.items()),
        ]
        self._stop_clock()
        if not self.transport.is_closing():
            self.transport.write("\r\n".join(head).encode("latin-1") + b"\r\n\r\n" + body)
            self.transport.close()

    def _partial_headers(self) -> bool:
        """True while some bytes of a request arrived but not all its headers."""
        return self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])

    def _expect_headers(self) -> None:
        if self._header_timer is None and not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _stop_clock(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        """The deadline passed: a 408 when part of a request came, a quiet close when nothing did."""
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if not self._partial_headers():
            self.transport.close()
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info("%s sent no complete headers within %s s (header_timeout_s): 408", client, self.header_timeout_s)
        self.refuse(408, f"the request's headers did not arrive within {self.header_timeout_s} s (header_timeout_s)")


class Server(uvicorn.Server):
    """uvicorn's server, calling `on_shutdown` as its graceful shutdown begins (before it waits for requests)."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None] | None = None):
        super().__init__(config)
        self.on_shutdown = on_shutdown

    async def shutdown(self, sockets: Any = None) -> None:
        """Tell the app, then shut down as uvicorn does."""
        if self.on_shutdown is not None:
            self.on_shutdown()
        await super().shutdown(sockets)


def build(
    app: Any, graceful_s: float, header_timeout_s: float, on_shutdown: Callable[[], None] | None = None
) -> Server:
    """A server for `app` with these connections; run it with `.run(sockets=[a bound socket])`."""
    config = uvicorn.Config(
        app,
        http=functools.partial(Connection, header_timeout_s=header_timeout_s),
        log_config=None,
        access_log=False,  # RequestLog writes one line per request
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=graceful_s,
    )
    return Server(config, on_shutdown)
