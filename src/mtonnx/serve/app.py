"""The FastAPI app of `mtonnx serve`: /translate and /detect (LibreTranslate's shapes, JSON or form bodies), health
checks, /info, /languages, /metrics and the OpenAPI schema at /openapi.json.

`create_app(translator, settings)` builds it around a loaded Translator (or a stand-in with its `settings`, `fit` and
`translate_pieces`); the lifespan starts the batcher and runs one warm-up translation, after which /health/ready
answers 200. /translate segments each text by the CLI's rule (engine.segment), queues its sentences, and joins their
translations back per text. Every error is `{"error": "..."}` with its status, documented per route in the schema; an
exception that escapes a route is a JSON 500 too. A client that disconnects before its answer is logged and counted
as 499 (middleware.CLIENT_CLOSED), not as a server error, and its sentences leave the queue.
"""

from __future__ import annotations

import asyncio
import functools
import json
import platform
from collections.abc import Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from mtonnx.foundation.envinfo import version_of
from mtonnx.runtime import layout
from mtonnx.runtime.translator import EmptyTranslationError
from mtonnx.serve import auth, schema
from mtonnx.serve.batcher import Batcher, QueueFull
from mtonnx.serve.engine import Options, TranslatorEngine
from mtonnx.serve.metrics import ServiceMetrics
from mtonnx.serve.middleware import CLIENT_CLOSED, NOTE, RETRY_AFTER_S, SHUTTING_DOWN, BodyGuard, RequestLog, log
from mtonnx.serve.settings import ServeSettings

PATHS = ("/translate", "/detect", "/languages", "/info", "/metrics", "/openapi.json", *auth.PUBLIC_PATHS)
# Two sentences: a model that answers both with nothing is broken (runtime.translator.EMPTY_ANSWER_PIECES).
WARMUP_TEXTS, WARMUP_TOKENS = ("Hello, world.", "How are you?"), 4
ERRORS = {  # what each error status means, for the OpenAPI schema
    400: "a language pair or format this service does not translate",
    401: "a missing or wrong API key",
    408: "the request's body did not arrive within request_timeout_s",
    413: "over max_body_bytes, max_items or max_chars, or more sentences than queue_size",
    415: "a multipart body (send JSON or a form)",
    422: "a malformed request",
    500: "the model failed on this request's batch",
    503: "warming up, the queue is full, or shutting down (with Retry-After)",
    504: "no translation within request_timeout_s",
}
VERSIONED = ("mtonnx", "onnxruntime", "numpy", "sentencepiece", "fastapi", "starlette", "uvicorn", "prometheus-client")


class Service:
    """The app's state: the engine, the batcher, the metrics and readiness."""

    def __init__(self, translator: Any, settings: ServeSettings):
        self.translator, self.settings = translator, settings
        self.engine = TranslatorEngine(translator, settings.source_prefix)
        self.batcher = Batcher(
            self.engine,
            max_batch_size=settings.max_batch_size,
            max_wait_s=settings.max_wait_ms / 1000,
            queue_size=settings.queue_size,
        )
        self.metrics = ServiceMetrics(lambda: self.batcher.depth)
        self.batcher.observe = self.metrics.observe_batch
        self.ready, self.not_ready_reason = False, "the model is warming up"
        self.stopping = asyncio.Event()  # set when the graceful shutdown begins
        self._warmup: asyncio.Task | None = None

    async def start(self) -> None:
        """Start the batcher and the warm-up translation (readiness follows it)."""
        self.batcher.start()
        self._warmup = asyncio.get_running_loop().create_task(self.warm_up())

    async def _warm_up_problem(self) -> str | None:
        """Why the warm-up sentences got no translation through the model's worker thread (None: they did)."""
        options = self.engine.defaults._replace(max_new_tokens=WARMUP_TOKENS)
        try:
            await self.batcher.call(self.engine, list(WARMUP_TEXTS), options)
        except Exception as err:
            return f"the warm-up translation failed: {err}"
        return None

    async def recheck(self) -> None:
        """After a batch came back empty, translate the warm-up sentences again: a model that answers them with
        nothing too is broken and no longer ready; one that answers them stays ready (a request with nothing to
        translate must not take the service down)."""
        problem = await self._warm_up_problem()
        if problem:
            self.ready, self.not_ready_reason = False, problem
            self.metrics.ready.set(0)
            log.error("%s", problem)

    async def warm_up(self) -> None:
        """One translation through the model's worker thread; then ready (or not, naming the failure)."""
        problem = await self._warm_up_problem()
        if problem:
            self.not_ready_reason = problem
            log.error(problem)
            return
        self.ready = True
        self.metrics.ready.set(1)
        log.info("ready: %s (%s layout)", self.settings.model_dir or "model", getattr(self.translator, "layout", "?"))

    def drain(self) -> None:
        """The graceful shutdown began: not ready any more, and a client still sending a body is answered 503."""
        self.ready, self.not_ready_reason = False, SHUTTING_DOWN
        self.metrics.ready.set(0)
        self.stopping.set()

    async def stop(self) -> None:
        """Finish the queued and running batches, then stop."""
        self.drain()
        if self._warmup:
            await self._warmup
        await self.batcher.close()

    async def authorized(self, request: Request, body_key: bool = False) -> bool:
        """True without an API key, else when the Bearer header matches it or, with `body_key`, the body's `api_key`
        field does (LibreTranslate's way; the body is read only then)."""
        key = self.settings.api_key
        if key is None or auth.key_matches(auth.bearer(request.headers.get("authorization")), key):
            return True
        if not body_key:
            return False
        found = schema.body_api_key(await request.body(), request.headers.get("content-type"))
        return auth.key_matches(found, key)

    def info(self) -> dict[str, Any]:
        """What /info shows: model directory, layout, variant manifest, versions, defaults, limits, readiness."""
        return {**self._static_info, "ready": self.ready}

    @functools.cached_property
    def _static_info(self) -> dict[str, Any]:
        """/info's fixed part, built once: it reads the manifest and looks up 8 package versions."""
        model_dir = Path(self.settings.model_dir or self.translator.dir).resolve()
        manifest_path = model_dir / layout.VARIANT_MANIFEST
        manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else None
        s, defaults = self.translator.settings, self.engine.defaults
        return {
            "model_dir": str(model_dir),
            "layout": getattr(self.translator, "layout", None),
            "variant_manifest": manifest,
            "versions": {"python": platform.python_version(), **{name: version_of(name) for name in VERSIONED}},
            "generation": {
                "num_beams": defaults.num_beams,
                "max_new_tokens": defaults.max_new_tokens,
                "length_penalty": s.length_penalty,
                "early_stopping": s.early_stopping,
                "source_prefix": self.settings.source_prefix,
            },
            "limits": {
                **self.settings.limits(),
                "max_beams": schema.MAX_BEAMS,
                "max_new_tokens": defaults.max_new_tokens,
            },
            "languages": {
                "source": list(schema.SOURCES),
                "target": list(schema.TARGETS),
                "format": list(schema.FORMATS),
            },
            "threads": self.settings.threads,
            "decoder": self.settings.decoder,
            "auth": self.settings.api_key is not None,
        }


def create_app(translator: Any, settings: ServeSettings = ServeSettings()) -> FastAPI:
    """The service around a loaded translator; its lifespan starts batching and the warm-up."""
    service = Service(translator, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="mtonnx translation service", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    app.add_middleware(
        BodyGuard,
        max_body_bytes=settings.max_body_bytes,
        timeout_s=settings.request_timeout_s,
        stopping=service.stopping,
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(RequestLog, metrics=service.metrics, paths=PATHS)  # outermost: sees every answer
    _add_error_handlers(app)
    _add_routes(app, service)
    _add_translate(app, service)
    return app


def _add_routes(app: FastAPI, service: Service) -> None:
    @app.get("/health/live", response_model=schema.Status)
    async def live() -> dict[str, str]:
        return {"status": "live"}

    @app.get("/health/ready", responses={200: {"model": schema.Status}, **_documented(503)})
    async def ready() -> JSONResponse:
        if service.ready:
            return JSONResponse({"status": "ready"})
        return _error(503, service.not_ready_reason, retry=True)

    @app.get(
        "/info", responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}, **_documented(401)}
    )
    async def info(request: Request) -> JSONResponse:
        return JSONResponse(service.info()) if await service.authorized(request) else _unauthorized()

    @app.get("/languages", responses={200: {"model": list[schema.Language]}, **_documented(401, 408, 413, 503)})
    async def languages(request: Request) -> JSONResponse:
        if not await service.authorized(request, body_key=True):
            return _unauthorized()
        return JSONResponse(
            [
                {"code": "en", "name": "English", "targets": list(schema.TARGETS)},
                {"code": "zh", "name": "Chinese", "targets": []},
            ]
        )

    @app.get("/metrics", response_class=PlainTextResponse, responses=_documented(401))
    async def metrics(request: Request) -> Response:
        if not await service.authorized(request):
            return _unauthorized()
        return Response(service.metrics.render(), media_type=service.metrics.content_type)

    @app.post(
        "/detect",
        responses={200: {"model": list[schema.Detection]}, **_documented(401, 408, 413, 415, 422, 503)},
        openapi_extra=schema.request_body(schema.DetectRequest),
    )
    async def detect(request: Request) -> JSONResponse:
        """English, the only language this model reads, with schema.detect's confidence."""
        if not await service.authorized(request, body_key=True):
            return _unauthorized()
        try:
            parsed = schema.parse(await request.body(), request.headers.get("content-type"), schema.DetectRequest)
        except schema.RequestError as err:
            return _error(err.status, err.message)
        return JSONResponse([schema.detect(parsed.q)])


def _add_translate(app: FastAPI, service: Service) -> None:
    settings = service.settings

    @app.post(
        "/translate",
        responses={
            200: {"model": schema.TranslateResponse},
            **_documented(400, 401, 408, 413, 415, 422, 500, 503, 504),
        },
        openapi_extra=schema.request_body(schema.TranslateRequest),
    )
    async def translate(request: Request) -> JSONResponse:
        """One translation per text of q, in q's shape: each text translated sentence by sentence, its lines kept."""
        if not await service.authorized(request, body_key=True):
            return _unauthorized()
        defaults = service.engine.defaults
        try:
            parsed = schema.parse(await request.body(), request.headers.get("content-type"))
            texts = schema.check(parsed, settings.max_items, settings.max_chars, defaults.max_new_tokens)
        except schema.RequestError as err:
            return _error(err.status, err.message)
        note = request.scope.get(NOTE, {})
        if settings.log_text:
            note["text"] = texts
        if not service.ready:
            return _error(503, service.not_ready_reason, retry=True)
        segmented = service.engine.segment(texts)
        note["sentences"] = len(segmented.pieces)
        if len(segmented.pieces) > settings.queue_size:
            return _error(
                413, f"q has {len(segmented.pieces)} sentences; at most {settings.queue_size} per request (queue_size)"
            )
        options = Options(parsed.beams or defaults.num_beams, parsed.max_new_tokens or defaults.max_new_tokens)
        try:
            done = await _unless_gone(
                request, service.batcher.submit(segmented.pieces, options), settings.request_timeout_s
            )
        except QueueFull as err:
            if not service.ready:  # the shutdown began while this request waited: one message for every such 503
                return _error(503, service.not_ready_reason, retry=True)
            return _error(503, f"the service is busy: {err}; retry later", retry=True)
        except TimeoutError:
            return _error(504, f"no translation within {settings.request_timeout_s} s (request_timeout_s)")
        except ClientDisconnect:
            raise  # its handler answers 499
        except EmptyTranslationError as err:  # nothing came back: not ready if the warm-up now fails too
            log.error("%s", err)
            await service.recheck()
            return _error(500, str(err))
        except Exception as err:  # the model raised for this request's batch
            log.exception("translation failed")
            return _error(500, f"translation failed: {type(err).__name__}: {err}")
        out = segmented.join(done)
        if settings.log_text:
            note["text"] = {"q": texts, "translatedText": out}
        answer: dict[str, Any] = {"translatedText": out[0] if isinstance(parsed.q, str) else out}
        if parsed.source == schema.AUTO:
            found = [schema.detect(text) for text in texts]
            answer["detectedLanguage"] = found[0] if isinstance(parsed.q, str) else found
        return JSONResponse(answer)


async def _unless_gone(request: Request, work: Awaitable, timeout_s: float) -> Any:
    """The result of `work`, waited for at most `timeout_s` (TimeoutError) and only while the client stays connected
    (ClientDisconnect); in both cases `work` is cancelled, so its sentences leave the queue."""
    job, gone = asyncio.ensure_future(work), asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({job, gone}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        job.cancel()  # a no-op once it is done
    if job.done():
        return job.result()
    raise ClientDisconnect() if gone.done() else TimeoutError()


async def _disconnected(request: Request) -> None:
    """Return once the client disconnects (after the body, receive() has nothing else to tell)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return _error(err.status_code, str(err.detail), headers=getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()))

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, err: ClientDisconnect) -> Response:
        return Response(status_code=CLIENT_CLOSED)  # nobody reads it: the status is for the log and the metrics

    @app.exception_handler(Exception)  # the last resort (starlette still re-raises it for the server's traceback)
    async def internal_error(request: Request, err: Exception) -> JSONResponse:
        return _error(500, "internal server error; the service's log has the details")


def _documented(*statuses: int) -> dict[int, dict[str, Any]]:
    """The OpenAPI responses of these error statuses: each an ErrorBody, described by ERRORS."""
    return {status: {"model": schema.ErrorBody, "description": ERRORS[status]} for status in statuses}


def _error(status: int, message: str, retry: bool = False, headers: dict | None = None) -> JSONResponse:
    headers = {**(headers or {}), **({"Retry-After": RETRY_AFTER_S} if retry else {})}
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _unauthorized() -> JSONResponse:
    return _error(
        401, "missing or wrong API key: send 'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"}
    )
