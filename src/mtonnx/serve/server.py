"""Run the app with uvicorn until SIGTERM or SIGINT, shut down gracefully, and return 0.

uvicorn stops accepting on the signal, lets in-flight requests finish (at most request_timeout_s + a margin),
runs the lifespan shutdown (the batcher finishes its batches), then re-raises the signal it caught so the
process would die of it (exit -15). Here a no-op handler is in place while it runs, so the re-raised signal is
absorbed and `mtonnx serve` returns normally: exit 0 after a graceful stop.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

SIGNALS = (signal.SIGTERM, signal.SIGINT)
SHUTDOWN_MARGIN_S = 5.0
EXIT_WITH_PARENT = "MTONNX_SERVE_EXIT_WITH_PARENT"  # set by serve.process: SIGTERM when the parent dies
PR_SET_PDEATHSIG = 1


def configure_logging() -> None:
    """Info-level lines on stderr for the service and uvicorn (uvicorn's own config is not used)."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )


def run(app, host: str, port: int, graceful_s: float) -> int:
    """Serve until a signal; 0 after a graceful stop, 1 when the server could not start (e.g. port in use)."""
    import uvicorn

    if os.environ.get(EXIT_WITH_PARENT):
        exit_with_parent()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,  # RequestLog writes one line per request
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=graceful_s + SHUTDOWN_MARGIN_S,
    )
    server = uvicorn.Server(config)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in SIGNALS}
    try:
        server.run()
    except SystemExit as stop:  # uvicorn exits this way when it cannot bind or the lifespan fails
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
