"""Bind the service's socket, run the app with uvicorn until SIGTERM or SIGINT, shut down gracefully, and return 0.

The socket is bound first (`listen`), before the app and its warm-up start, so a port in use is one line and exit 2,
never a "ready" for a service that cannot be reached. On the signal uvicorn stops accepting, the app answers clients
still sending a request 503 at once (`on_shutdown`), in-flight requests finish (at most request_timeout_s + a
margin), the lifespan shutdown runs (the batcher finishes its batches), and uvicorn re-raises the signal it caught so
the process would die of it (exit -15). Here a no-op handler is in place while it runs, so the re-raised signal is
absorbed and `mtonnx serve` returns normally: exit 0 after a graceful stop.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable

SIGNALS = (signal.SIGTERM, signal.SIGINT)
SHUTDOWN_MARGIN_S = 5.0
EXIT_WITH_PARENT = "MTONNX_SERVE_EXIT_WITH_PARENT"  # set by serve.process: SIGTERM when the parent dies
PR_SET_PDEATHSIG = 1
log = logging.getLogger("mtonnx.serve")


def configure_logging() -> None:
    """Info-level lines on stderr for the service and uvicorn (uvicorn's own config is not used)."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port as uvicorn binds one (IPv6 for an address with ':', SO_REUSEADDR); OSError
    when it cannot be bound, e.g. the port is in use."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    return sock


def run(
    app,
    sock: socket.socket,
    request_timeout_s: float,
    header_timeout_s: float,
    on_shutdown: Callable[[], None] | None = None,
) -> int:
    """Serve on the bound socket until a signal; 0 after a graceful stop, 1 when the app could not start."""
    from mtonnx.serve.connection import build

    if os.environ.get(EXIT_WITH_PARENT):
        exit_with_parent()
    server = build(app, request_timeout_s + SHUTDOWN_MARGIN_S, header_timeout_s, on_shutdown)
    host, port = sock.getsockname()[:2]
    log.info("listening on http://%s:%d", f"[{host}]" if ":" in host else host, port)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in SIGNALS}
    try:
        server.run(sockets=[sock])
    except SystemExit as stop:  # uvicorn exits this way when the lifespan fails
        return stop.code if isinstance(stop.code, int) else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1


def exit_with_parent() -> None:
    """Ask Linux to send this process SIGTERM when its parent exits (a notebook kernel that died)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent is already gone
        os.kill(os.getpid(), signal.SIGTERM)
