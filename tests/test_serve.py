"""The translation service: the Translator's translations through HTTP, dynamic batching that hands every request
its own results, every refusal with its status and a JSON message, the API key, metrics, and a real process that
drains in-flight requests on SIGTERM and exits 0."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from prometheus_client.parser import text_string_to_metric_families

from mtonnx import data
from mtonnx.runtime import Translator, layout
from mtonnx.runtime.segments import segment
from mtonnx.serve import add_arguments, bench_arguments, bench_main, main
from mtonnx.serve.app import create_app
from mtonnx.serve.batcher import Batcher
from mtonnx.serve.engine import length_groups
from mtonnx.serve.middleware import SHUTTING_DOWN
from mtonnx.serve.process import ServiceProcess
from mtonnx.serve.settings import ServeSettings, settings_from_args

SOURCES = [p.en for p in data.eval_set({"hsk_size": 16, "techdocs_size": 8, "eval_split": "test"})]
FAST = {"beams": 2, "max_new_tokens": 12}  # request options; the Translator's names below
LIMITS = {"max_items": 32, "max_chars": 300, "max_body_bytes": 20_000}


def _runtime(options: dict) -> dict:
    return {"num_beams": options.get("beams"), "max_new_tokens": options.get("max_new_tokens")}


@pytest.fixture(scope="module")
def translator(hand_export):
    return Translator(hand_export)


class Client:
    """A blocking client for an app running with its lifespan on a background event loop (as TestClient does,
    over httpx's ASGITransport, which starlette's TestClient no longer wants to use)."""

    def __init__(self, portal, http: httpx.AsyncClient):
        self.portal, self.http = portal, http

    def get(self, path: str, **kwargs) -> httpx.Response:
        return self.portal.call(lambda: self.http.get(path, **kwargs))

    def post(self, path: str, **kwargs) -> httpx.Response:
        return self.portal.call(lambda: self.http.post(path, **kwargs))


@contextlib.contextmanager
def serving(app):
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(app.router.lifespan_context(app)):
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://serve", timeout=60)
        client = Client(portal, http)
        try:
            _wait_ready(client)
            yield client
        finally:
            portal.call(http.aclose)


@pytest.fixture(scope="module")
def client(translator, hand_export):
    with serving(create_app(translator, ServeSettings(model_dir=str(hand_export), **LIMITS))) as c:
        yield c


class StandIn:
    """The Translator with a delay per call, a failure on texts containing 'boom', or a gate to hold calls
    (`entered` is set as a call begins)."""

    def __init__(self, inner, delay: float = 0.0, gate: threading.Event | None = None):
        self.inner, self.delay, self.gate, self.calls = inner, delay, gate, []
        self.entered = threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def translate_pieces(self, pieces, **options):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        time.sleep(self.delay)
        self.calls.append(list(pieces))
        if any("boom" in t for t in pieces):
            raise RuntimeError("the model blew up")
        return self.inner.translate_pieces(pieces, **options)


class Echo:
    """A stand-in Translator that answers at once: each piece's translation is the piece in brackets."""

    settings = SimpleNamespace(num_beams=2, max_length=64, length_penalty=1.0, early_stopping=True)
    layout, dir = "echo", "."

    def fit(self, sentence: str, source_prefix: str = "") -> list[str]:
        return [sentence]

    def translate_pieces(self, pieces: list[str], **options) -> list[str]:
        return [f"[{piece}]" for piece in pieces]


def _wait_ready(c: Client) -> None:
    deadline = time.monotonic() + 30
    while c.get("/health/ready").status_code != 200:
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.02)


async def _ready(http: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + 30
    while (await http.get("/health/ready")).status_code != 200:
        assert time.monotonic() < deadline, "never ready"
        await asyncio.sleep(0.02)


async def _until(condition, tries: int = 3000) -> None:
    """Wait (10 ms steps, `tries` at most) until condition() holds."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{condition} never held")


def _in_process(app, work, wait_ready: bool = True):
    """Run `work(http)` against the app with its lifespan (httpx's ASGITransport runs no lifespan itself)."""

    async def session():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://serve", timeout=60) as http:
                if wait_ready:
                    await _ready(http)
                return await work(http)

    return asyncio.run(session())


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(families: dict, name: str, sample: str, **labels) -> float:
    return sum(s.value for s in families[name].samples if s.name == sample and labels.items() <= s.labels.items())


def test_translations_equal_the_translators(client, translator):
    options = {"q": SOURCES, "source": "en", "target": "zh", **FAST}
    assert client.post("/translate", json=options).json() == {
        "translatedText": translator.translate(SOURCES, **_runtime(FAST))
    }
    defaults = client.post("/translate", json={"q": SOURCES[:4], "source": "en", "target": "zh"}).json()
    assert defaults["translatedText"] == translator.translate(SOURCES[:4])  # generation_config's beams and length
    one = client.post("/translate", json={"q": SOURCES[5], "max_new_tokens": 12}).json()
    assert one == {"translatedText": translator.translate([SOURCES[5]], max_new_tokens=12)[0]}  # a str q, a str
    assert client.post("/translate", json={"q": ["", "  ", SOURCES[0]], **FAST}).json()["translatedText"][:2] == [
        "",
        "",
    ]
    assert client.post("/translate", json={"q": []}).json() == {"translatedText": []}


PARAGRAPH = (
    "I like to drink tea. He is very tall. We go to school every day. She bought a new book. It is raining today."
)


def test_a_paragraph_is_translated_sentence_by_sentence_as_the_cli_does(client, translator, caplog):
    lines = "I like tea.\nHe is very tall."
    with caplog.at_level(logging.INFO, logger="mtonnx.serve"):
        paragraph = client.post("/translate", json={"q": PARAGRAPH, "source": "en", "target": "zh"})
        both = client.post("/translate", json={"q": [lines, PARAGRAPH]})
    assert paragraph.status_code == 200 and paragraph.json() == {"translatedText": translator.translate(PARAGRAPH)}
    assert len(segment([PARAGRAPH]).pieces) == 5
    assert "POST /translate 200 5 sentences" in caplog.text and "POST /translate 200 7 sentences" in caplog.text
    kept = both.json()["translatedText"]
    assert kept == translator.translate([lines, PARAGRAPH]) and kept[0].count("\n") == 1


def test_the_default_model_answers_the_paragraph_with_as_many_sentences_as_the_cli(hsk_export):
    """Issue 36's repro on the default model: the service returned one short sentence where the CLI gave five."""
    from conftest import run_cli

    cli = run_cli("translate", "--model-dir", str(hsk_export), input=PARAGRAPH + "\n")
    assert cli.returncode == 0, cli.stderr
    with serving(create_app(Translator(hsk_export), ServeSettings(model_dir=str(hsk_export)))) as c:
        served = c.post("/translate", json={"q": PARAGRAPH, "source": "en", "target": "zh"}).json()["translatedText"]
    assert served == cli.stdout.rstrip("\n")
    assert served.count("。") == cli.stdout.count("。") >= 4  # a Chinese full stop per English sentence (the model's)


def test_a_long_paragraph_gives_every_sentence(translator, caplog):
    paragraph = " ".join(SOURCES * 20)[:5000].rsplit(". ", 1)[0] + "."
    pieces = segment([paragraph], fit=translator.fit).pieces
    with caplog.at_level(logging.INFO, logger="mtonnx.serve"), serving(create_app(translator)) as c:
        answer = c.post("/translate", json={"q": paragraph, **FAST})
    assert len(pieces) > 100 and f"POST /translate 200 {len(pieces)} sentences" in caplog.text
    assert answer.json() == {"translatedText": translator.translate(paragraph, **_runtime(FAST))}


def test_concurrent_requests_each_get_exactly_their_own_results(translator, hand_export):
    requests = [
        {"q": [SOURCES[(5 * i + j) % len(SOURCES)] for j in range(1 + i % 4)], **FAST}
        if i % 3
        else {"q": SOURCES[i % len(SOURCES)], "beams": 1, "max_new_tokens": 10}
        for i in range(64)
    ]
    app = create_app(translator, ServeSettings(model_dir=str(hand_export), max_wait_ms=20))

    async def work(http):
        answers = await asyncio.gather(*(http.post("/translate", json=r) for r in requests))
        return answers, (await http.get("/metrics")).text

    answers, metrics = _in_process(app, work)
    for request, answer in zip(requests, answers):
        texts = [request["q"]] if isinstance(request["q"], str) else request["q"]
        expected = translator.translate(texts, **_runtime(request))
        assert answer.status_code == 200
        assert answer.json()["translatedText"] == (expected[0] if isinstance(request["q"], str) else expected)
    families = _families(metrics)
    calls = _sample(families, "mtonnx_batch_sentences", "mtonnx_batch_sentences_count")
    sentences = sum(len(segment([r["q"]] if isinstance(r["q"], str) else r["q"]).pieces) for r in requests)
    assert _sample(families, "mtonnx_sentences_translated", "mtonnx_sentences_translated_total") == sentences
    assert calls < sentences / 4, "concurrent sentences should share model calls"


def test_batches_never_mix_options_and_respect_the_size():
    seen: list[tuple[str, list[str]]] = []

    def run(texts, key):
        seen.append((key, list(texts)))
        return [f"{key}:{t}" for t in texts]

    async def work():
        batcher = Batcher(run, max_batch_size=3, max_wait_s=0.01, queue_size=100)
        batcher.start()
        jobs = [batcher.submit([f"{i}.{j}" for j in range(i % 3 + 1)], "ab"[i % 2]) for i in range(10)]
        out = await asyncio.gather(*jobs)
        await batcher.close()
        return out

    out = asyncio.run(work())
    for i, results in enumerate(out):
        key = "ab"[i % 2]
        assert results == [f"{key}:{i}.{j}" for j in range(i % 3 + 1)]
    assert all(len(texts) <= 3 for _, texts in seen)
    assert all("ab"[int(t.split(".")[0]) % 2] == key for key, texts in seen for t in texts), "options never mix"
    assert sum(len(t) for _, t in seen) == sum(i % 3 + 1 for i in range(10))


def test_length_groups_split_where_lengths_jump():
    texts = ["a" * 10, "b" * 200, "c" * 12, "d" * 15, "e" * 190]
    assert length_groups(texts) == [[0, 2, 3], [4, 1]]
    assert length_groups([]) == []


BAD = [
    (b'{"q": "Hi"', 422, "not valid JSON"),
    (b"[1, 2]", 422, "JSON object"),
    ({"q": 5}, 422, "q must be a string or a list of strings"),
    ({"q": ["a", 3]}, 422, "q must be a string or a list of strings"),
    ({"source": "en"}, 422, "q is required"),
    ({"q": "Hi", "beams": 0}, 422, "beams"),
    ({"q": "Hi", "beams": "2"}, 422, "beams"),
    ({"q": "Hi", "max_new_tokens": 100_000}, 422, "max_new_tokens"),
    ({"q": "Hi", "source": "fr"}, 400, "source: en"),
    ({"q": "Hi", "target": "de"}, 400, "target: zh"),
    ({"q": "Hi", "format": "html"}, 400, "format: text"),
    ({"q": ["Hi"] * 33}, 413, "max_items"),
    ({"q": ["Hi", "a" * 301]}, 413, "q[1] has 301 characters; at most 300 (max_chars)"),
    ({"q": "x" * 25_000}, 413, "max_body_bytes"),
    ({"q": ["Go. " * 70] * 16}, 413, "q has 1120 sentences; at most 1024 per request (queue_size)"),
]


@pytest.mark.parametrize("body,status,message", BAD, ids=[f"{s}-{m[:24]}" for _, s, m in BAD])
def test_bad_input_gets_its_status_and_a_json_message(client, body, status, message):
    sent = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = client.post("/translate", **sent)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert message in response.json()["error"]


def test_size_limits_hold_without_content_length_and_errors_are_json(client):
    async def chunks():  # a chunked body: no Content-Length
        for _ in range(5):
            yield b'{"q": "' + b"x" * 5_000

    response = client.post("/translate", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413 and "max_body_bytes" in response.json()["error"]
    assert client.get("/nowhere").status_code == 404 and "error" in client.get("/nowhere").json()
    assert client.get("/translate").status_code == 405 and "error" in client.get("/translate").json()


def test_full_queue_answers_503_with_retry_after(translator):
    slow = StandIn(translator, delay=0.3)
    app = create_app(slow, ServeSettings(max_batch_size=1, queue_size=2))

    async def work(http):
        answers = await asyncio.gather(*(http.post("/translate", json={"q": s, **FAST}) for s in SOURCES[:8]))
        return answers, await http.post("/translate", json={"q": SOURCES[0], **FAST})

    answers, after = _in_process(app, work)
    statuses = sorted(a.status_code for a in answers)
    assert 503 in statuses and 200 in statuses and set(statuses) == {200, 503}
    busy = next(a for a in answers if a.status_code == 503)
    assert busy.headers["retry-after"] == "1" and "at most 2 sentences" in busy.json()["error"]
    assert after.status_code == 200  # the service stays up


def test_a_refused_request_is_told_how_many_sentences_it_needed(translator):
    gate = threading.Event()
    gate.set()
    held = StandIn(translator, gate=gate)
    app = create_app(held, ServeSettings(max_batch_size=1, queue_size=4))
    batcher = app.state.service.batcher

    async def work(http):
        gate.clear()
        held.entered.clear()
        first = asyncio.ensure_future(http.post("/translate", json={"q": "Hi.", **FAST}))  # held in the model
        await _until(held.entered.is_set)
        second = asyncio.ensure_future(http.post("/translate", json={"q": "One. Two.", **FAST}))  # queued
        await _until(lambda: batcher.depth == 2)
        refused = await http.post("/translate", json={"q": "Where is it? I like tea. He is tall.", **FAST})
        gate.set()
        return refused, await first, await second

    refused, first, second = _in_process(app, work)
    assert refused.status_code == 503 and refused.json() == {
        "error": "the service is busy: the queue holds 2 of at most 4 sentences and this request needs 3; retry later"
    }
    assert first.status_code == second.status_code == 200


def test_timeout_answers_504_and_a_model_error_fails_only_its_batch(translator):
    slow = StandIn(translator, delay=0.4)
    app = create_app(slow, ServeSettings(request_timeout_s=0.15))

    async def timeout(http):
        return await http.post("/translate", json={"q": SOURCES[0], **FAST})

    answer = _in_process(app, timeout)
    assert answer.status_code == 504 and "request_timeout_s" in answer.json()["error"]

    failing = StandIn(translator)
    app = create_app(failing, ServeSettings(max_wait_ms=50))

    async def errors(http):
        boom = http.post("/translate", json={"q": ["fine", "boom"], "max_new_tokens": 5})
        other = http.post("/translate", json={"q": SOURCES[1], **FAST})  # other options: another batch
        answers = await asyncio.gather(boom, other)
        return [*answers, await http.post("/translate", json={"q": SOURCES[2], **FAST}), await http.get("/metrics")]

    boom, other, after, metrics = _in_process(app, errors)
    assert boom.status_code == 500 and "the model blew up" in boom.json()["error"]
    assert other.status_code == 200 and after.status_code == 200
    assert _sample(_families(metrics.text), "mtonnx_model_errors", "mtonnx_model_errors_total") == 1


def test_ready_only_after_the_warm_up(translator):
    gate = threading.Event()
    app = create_app(StandIn(translator, gate=gate))

    async def work(http):
        before = [
            await http.get("/health/ready"),
            await http.get("/health/live"),
            await http.post("/translate", json={"q": "Hi"}),
        ]
        gate.set()
        await _ready(http)
        return before

    ready, live, translate = _in_process(app, work, wait_ready=False)
    assert ready.status_code == 503 and "warming up" in ready.json()["error"]
    assert live.status_code == 200
    assert translate.status_code == 503 and translate.headers["retry-after"] == "1"


def test_api_key_is_required_except_for_health_checks(translator):
    app = create_app(translator, ServeSettings(api_key="s3cret-key"))
    good = {"Authorization": "Bearer s3cret-key"}
    with serving(app) as c:
        body = {"q": SOURCES[0], **FAST}
        refused = c.post("/translate", json=body)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        assert "API key" in refused.json()["error"]
        assert c.post("/translate", json=body, headers={"Authorization": "Bearer s3cret-kez"}).status_code == 401
        assert c.post("/translate", content=b"{not json", headers={}).status_code == 401  # no hints before the key
        assert c.post("/translate", json=body, headers=good).status_code == 200
        assert c.post("/translate", json={**body, "api_key": "s3cret-key"}).status_code == 200  # LibreTranslate's way
        for path in ("/info", "/metrics", "/languages"):
            assert c.get(path).status_code == 401 and c.get(path, headers=good).status_code == 200
        assert c.get("/health/live").status_code == 200 and c.get("/health/ready").status_code == 200


def test_info_and_metrics(client, hand_export, translator, tmp_path):
    info = client.get("/info").json()
    assert info["layout"] == "split" and info["variant_manifest"] is None and info["auth"] is False
    assert info["limits"]["max_items"] == 32 and info["limits"]["max_batch_size"] == 16
    assert info["generation"]["num_beams"] == translator.settings.num_beams
    assert info["versions"]["onnxruntime"] and info["versions"]["fastapi"]
    families = _families(client.get("/metrics").text)
    for name in ("mtonnx_requests", "mtonnx_request_seconds", "mtonnx_batch_sentences", "mtonnx_queue_sentences"):
        assert name in families
    assert _sample(families, "mtonnx_requests", "mtonnx_requests_total", path="/info", status="200") == 1
    assert _sample(families, "mtonnx_sentences_translated", "mtonnx_sentences_translated_total") >= 1
    assert _sample(families, "mtonnx_ready", "mtonnx_ready") == 1

    variant = tmp_path / "variant"
    shutil.copytree(hand_export, variant)
    (variant / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    (variant / layout.VARIANT_MANIFEST).write_text(json.dumps({"recipe": "int8", "files": {}}), encoding="utf-8")
    with serving(create_app(Translator(variant), ServeSettings(model_dir=str(variant)))) as c:
        assert c.get("/info").json()["variant_manifest"] == {"recipe": "int8", "files": {}}


def _serve_args(*argv: str) -> argparse.Namespace:
    return add_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def test_settings_come_from_the_params_file_and_flags_override_them(tmp_path):
    params = tmp_path / "serve.yaml"
    params.write_text("model:\n  source_prefix: '>>cmn_Hans<<'\nserve:\n  max_items: 7\n  max_batch_size: 8\n")
    settings = settings_from_args(_serve_args("--model-dir", "m", "--params", str(params), "--max-batch-size", "4"))
    assert (settings.max_items, settings.max_batch_size, settings.source_prefix) == (7, 4, ">>cmn_Hans<<")
    assert (settings.host, settings.port, settings.api_key) == ("127.0.0.1", 8000, None)
    assert settings_from_args(_serve_args("--model-dir", "m")) == ServeSettings(model_dir="m")


def test_command_line_errors_are_one_line_and_exit_2(hand_export, tmp_path, capsys, monkeypatch):
    broken = tmp_path / "broken"
    shutil.copytree(hand_export, broken)
    (broken / layout.SUMS).unlink()  # edited by hand below: no SHA256SUMS (test_integrity checks the list)
    (broken / layout.ENCODER).write_bytes(b"not an onnx file")
    (tmp_path / "empty_key").write_text("\n")
    cases = [
        (["--model-dir", str(tmp_path / "missing")], "is not a directory"),
        (["--model-dir", str(tmp_path)], "missing vocab.json"),
        (["--model-dir", str(broken)], str(broken)),  # an ONNX file ONNX Runtime cannot parse
        (["--model-dir", str(hand_export), "--max-batch-size", "0"], "--max-batch-size = 0 is out of range"),
        (["--model-dir", str(hand_export), "--max-wait-ms", "nan"], "--max-wait-ms = nan is not a finite number"),
        (["--model-dir", str(hand_export), "--api-key-file", str(tmp_path / "empty_key")], "is empty"),
        (["--model-dir", str(hand_export), "--params", str(tmp_path / "nope.yaml")], "params file not found"),
        (["--model-dir", str(hand_export), "--source-prefix", "word " * 300], "a prefix must leave"),
    ]
    for argv, message in cases:
        assert main(_serve_args(*argv)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("mtonnx: error: ") and message in err[0], err
    assert main(_serve_args("--model-dir", str(tmp_path / "missing"), "--host", "0.0.0.0")) == 2
    assert "mtonnx: warning: serving on 0.0.0.0 without --api-key-file" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "fastapi", None)
    assert main(_serve_args("--model-dir", str(hand_export))) == 2
    assert "pip install 'mtonnx[serve]'" in capsys.readouterr().err


def test_a_port_in_use_is_one_line_and_never_ready(hand_export, capsys, caplog):
    with socket.socket() as taken, caplog.at_level(logging.INFO):
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(_serve_args("--model-dir", str(hand_export), "--port", str(port))) == 2
    error = f"mtonnx: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert capsys.readouterr().err.splitlines() == [error]
    assert "ready" not in caplog.text


@pytest.mark.parametrize("value", ["0,abc", "0", "4,-1", "abc", "1,,4"])
def test_serve_bench_concurrency_must_be_client_counts(value, capsys):
    assert bench_main(bench_arguments(argparse.ArgumentParser()).parse_args(["--concurrency", value])) == 2
    error = f"mtonnx: error: --concurrency {value!r}: give client counts >= 1, comma-separated, e.g. 1,4,16"
    assert capsys.readouterr().err.splitlines() == [error]


SLOW = {"beams": 4, "max_new_tokens": 24}


async def _hammer(url: str, headers: dict, workers: int, sigterm_after: float, process) -> list[tuple]:
    """Clients sending requests until the service refuses them; SIGTERM the service while they run."""
    outcomes: list[tuple] = []  # (status or error name, texts, answer, finished at)
    refused = asyncio.Event()
    limits = httpx.Limits(max_keepalive_connections=0)  # a new connection per request: refused means refused
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as http:

        async def client(w: int) -> None:
            for i in range(10_000):
                if refused.is_set():
                    return
                texts = [SOURCES[(7 * w + i + j) % len(SOURCES)] for j in range(1 + (w + i) % 3)]
                try:
                    answer = await http.post("/translate", json={"q": texts, **SLOW})
                except httpx.TransportError as err:
                    outcomes.append((type(err).__name__, texts, None, time.monotonic()))
                    refused.set()
                    return
                outcomes.append((answer.status_code, texts, answer.json(), time.monotonic()))
                if answer.status_code == 503:  # a request that came as the shutdown began
                    refused.set()

        async def terminate() -> float:
            await asyncio.sleep(sigterm_after)
            process.send_signal(signal.SIGTERM)
            return time.monotonic()

        sent, *_ = await asyncio.gather(terminate(), *(client(w) for w in range(workers)))
    return [(*o, sent) for o in outcomes]


def test_a_real_service_process_end_to_end(hand_export, translator, tmp_path, capsys):
    service = ServiceProcess.start(hand_export, "--max-wait-ms", "10", api_key="k3y")
    try:
        service.wait_ready()
        assert httpx.post(f"{service.url}/translate", json={"q": "Hi"}).status_code == 401
        assert service.translate(SOURCES, **FAST) == translator.translate(SOURCES, **_runtime(FAST))
        families = _families(httpx.get(f"{service.url}/metrics", headers=service.headers).text)
        assert _sample(families, "mtonnx_sentences_translated", "mtonnx_sentences_translated_total") >= len(SOURCES)
        (tmp_path / "key").write_text("k3y")
        bench = bench_arguments(argparse.ArgumentParser()).parse_args(
            ["--url", service.url, "--concurrency", "1,4", "--seconds", "0.4", "--api-key-file", str(tmp_path / "key")]
            + ["--max-new-tokens", "8", "--json"]
        )
        assert bench_main(bench) == 0
        results = json.loads(capsys.readouterr().out)
        assert set(results) == {"1", "4"} and all(r["errors"] == 0 and r["sentences"] > 0 for r in results.values())

        expected = dict(zip(SOURCES, translator.translate(SOURCES, **_runtime(SLOW))))
        outcomes = asyncio.run(_hammer(service.url, service.headers, 12, 1.0, service.process))
        code = service.process.wait(30)
    finally:
        service.stop()
    assert code == 0
    log = service.log()
    ok = [o for o in outcomes if o[0] == 200]
    assert ok and all(o[2]["translatedText"] == [expected[t] for t in o[1]] for o in ok)
    late = [o for o in outcomes if o[0] == 503]
    assert all(o[2] == {"error": SHUTTING_DOWN} for o in late), late
    assert all(o[0] in ("ConnectError", "RemoteProtocolError", "ReadError") for o in outcomes if o[0] not in (200, 503))
    assert any(o[3] > o[4] for o in ok), "requests in flight at SIGTERM should finish"
    answered = [line for line in log.splitlines() if "POST /translate " in line]
    before = 1 + sum(r["requests"] for r in results.values())  # service.translate and the bench, all 200
    assert sum(" POST /translate 200 " in line for line in answered) == len(ok) + before, "all accepted answered"
    assert sum(" POST /translate 401 " in line for line in answered) == 1
    assert len(answered) == len(ok) + before + 1 + len(late)
    assert not any(s in log for s in SOURCES), "no text in the log without --log-text"


def test_cors_only_when_an_origin_is_given_and_text_logged_only_when_asked(translator, caplog):
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    body = {"q": SOURCES[3], **FAST}
    with caplog.at_level(logging.INFO, logger="mtonnx.serve"):
        with serving(create_app(translator)) as c:
            assert "access-control-allow-origin" not in c.post("/translate", json=body, headers=preflight).headers
        plain = caplog.text
        caplog.clear()
        settings = ServeSettings(cors_origins=("https://app.example",), log_text=True)
        with serving(create_app(translator, settings)) as c:
            allowed = c.post("/translate", json=body, headers=preflight)
            assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        logged = caplog.text
    assert "POST /translate 200 1 sentences" in plain and SOURCES[3] not in plain
    assert SOURCES[3] in logged and "translatedText" in logged


def test_the_service_never_imports_torch(hand_export):
    probe = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from mtonnx.runtime import Translator\n"
        "from mtonnx.serve import app, command, loadgen, process\n"
        f"app.create_app(Translator({str(hand_export)!r}))\n"
        "import argparse\n"
        "args = command.add_arguments(argparse.ArgumentParser()).parse_args(['--model-dir', '/nonexistent'])\n"
        "print(command.main(args))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2" and "mtonnx: error:" in done.stderr
