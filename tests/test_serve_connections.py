"""The service over real connections (its own uvicorn server on a loopback port, in a thread, or a real process):
a client that goes away is a 499, not a server error; stalled clients are timed out; a shutdown answers stalled
clients a JSON 503 at once; every error body is JSON, also those below the app."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mtonnx.runtime import Translator
from mtonnx.serve import connection, server
from mtonnx.serve.app import create_app
from mtonnx.serve.process import ServiceProcess
from mtonnx.serve.settings import ServeSettings
from test_serve import Echo, StandIn

HALF_HEADERS = b"POST /translate HTTP/1.1\r\nHost: serve\r\n"
HALF_BODY = HALF_HEADERS + b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"q": '
SHUTTING_DOWN = {"error": "the service is shutting down; retry later"}


@pytest.fixture(scope="module")
def translator(hand_export):
    return Translator(hand_export)


@contextlib.contextmanager
def running(app, header_timeout_s: float = 5.0):
    """The app behind the service's own uvicorn server on a free loopback port, in a thread: (port, server)."""
    sock = server.listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    uv = connection.build(app, 10.0, header_timeout_s, on_shutdown=app.state.service.drain)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        _wait(lambda: _get(port, "/health/ready") == 200)
        yield port, uv
    finally:
        uv.should_exit = True
        thread.join(30)


def _wait(condition, tries: int = 1500) -> None:
    """Poll condition() every 20 ms, `tries` times at most."""
    for _ in range(tries):
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"{condition} never held")


def _get(port: int, path: str) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).status_code
    except httpx.TransportError:
        return None


def _samples(port: int) -> dict[tuple, float]:
    """/metrics as {(name, sorted labels): value}."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    families = text_string_to_metric_families(text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def _in_progress(port: int) -> float:
    return _samples(port)[("mtonnx_requests_in_progress", ())]


def _answered(port: int, status: int) -> float:
    key = ("mtonnx_requests_total", (("path", "/translate"), ("status", str(status))))
    return _samples(port).get(key, 0.0)


def _send(port: int, data: bytes) -> socket.socket:
    """A raw loopback connection that has sent `data` (reads time out after 10 s)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(data)
    return conn


def _answer(conn: socket.socket) -> tuple[int, dict[str, str], dict]:
    """Read until the server closes the connection: status, headers, JSON body."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (field.split(":", 1) for field in fields)}
    return int(status_line.split()[1]), headers, json.loads(body)


def test_stalled_clients_are_timed_out_with_json_408_and_bad_bytes_get_json_400():
    app = create_app(Echo(), ServeSettings(request_timeout_s=0.5))
    with running(app, header_timeout_s=0.5) as (port, _):
        headers, body, silent = _send(port, HALF_HEADERS), _send(port, HALF_BODY), _send(port, b"")
        garbage = _send(port, b"NOT HTTP AT ALL\r\n\r\n")
        late_headers, late_body, not_http = _answer(headers), _answer(body), _answer(garbage)
        assert silent.recv(1) == b""  # a connection that sent nothing is closed without an answer
        silent.close()
        assert _answered(port, 408) == 1  # the body timeout is the app's; the header timeout comes before it
    assert late_headers[::2] == (408, {"error": "the request's headers did not arrive within 0.5 s (header_timeout_s)"})
    assert late_body[::2] == (408, {"error": "the request body did not arrive within 0.5 s (request_timeout_s)"})
    assert not_http[::2] == (400, {"error": "the request is not valid HTTP/1.1"})
    for status, fields, _ in (late_headers, late_body, not_http):
        assert fields["content-type"] == "application/json" and fields["connection"] == "close", status


def test_a_client_that_disconnects_is_499_in_the_metrics_and_one_log_line(translator, caplog):
    gate = threading.Event()
    gate.set()
    held = StandIn(translator, gate=gate)
    body = b'{"q": "I like tea. He is very tall."}'
    whole = b"POST /translate HTTP/1.1\r\nHost: serve\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with caplog.at_level(logging.INFO), running(create_app(held)) as (port, _):
        mid_body = _send(port, HALF_BODY)
        _wait(lambda: _in_progress(port) == 2)  # this request and the /metrics one asking
        mid_body.close()
        _wait(lambda: _answered(port, 499) == 1)
        gate.clear()
        held.entered.clear()
        waiting = _send(port, whole)
        _wait(held.entered.is_set)  # its sentences are in a model call
        waiting.close()
        _wait(lambda: _answered(port, 499) == 2)
        gate.set()
        assert _answered(port, 500) == 0
    logged = [r.getMessage() for r in caplog.records if "POST /translate" in r.getMessage()]
    assert [line.split(" ms")[0].rsplit(" ", 1)[0] for line in logged] == [
        "POST /translate 499 0 sentences",
        "POST /translate 499 2 sentences",
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_shutdown_answers_stalled_clients_json_503_at_once():
    with running(create_app(Echo())) as (port, uv):
        body = _send(port, HALF_BODY)
        _wait(lambda: _in_progress(port) == 2)
        headers = _send(port, HALF_HEADERS)
        _wait(lambda: any(c._partial_headers() for c in list(uv.server_state.connections)))
        uv.should_exit = True
        in_body, in_headers = _answer(body), _answer(headers)
    assert in_body[::2] == in_headers[::2] == (503, SHUTTING_DOWN)
    assert in_body[1]["retry-after"] == in_headers[1]["retry-after"] == "1"


def test_an_exception_escaping_a_route_is_a_json_500():
    app = create_app(Echo())

    @app.get("/explode")
    async def explode() -> None:
        raise RuntimeError("a bug")

    with running(app) as (port, _):
        response = httpx.get(f"http://127.0.0.1:{port}/explode", timeout=10)
    assert response.status_code == 500
    assert response.json() == {"error": "internal server error; the service's log has the details"}


def test_sigterm_answers_a_stalled_client_json_503_and_exits_0(hand_export):
    service = ServiceProcess.start(hand_export)
    try:
        service.wait_ready()
        port = int(service.url.rsplit(":", 1)[1])
        stalled = _send(port, HALF_BODY)
        _wait(lambda: _in_progress(port) == 2)
        service.process.send_signal(signal.SIGTERM)
        status, headers, body = _answer(stalled)
        code = service.process.wait(30)
    finally:
        service.stop()
    assert (status, body, headers["retry-after"], code) == (503, SHUTTING_DOWN, "1", 0)
    log = service.log()
    assert "POST /translate 503 0 sentences" in log and "Traceback" not in log and " ERROR " not in log


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_oversized_body_sent_whole_before_reading_gets_its_413_not_a_reset(chunked):
    import urllib.error
    import urllib.request

    body = b'{"q": "' + b"x" * 3_000_000 + b'"}'
    data = iter([body[i : i + 65536] for i in range(0, len(body), 65536)]) if chunked else body
    with running(create_app(Echo(), ServeSettings(max_body_bytes=100_000))) as (port, _):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/translate", data=data, headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 413
        assert "at most 100000 (max_body_bytes)" in json.loads(refused.value.read())["error"]
        assert _get(port, "/health/ready") == 200
