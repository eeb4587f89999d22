"""The FastAPI app of `mtonnx serve`: /translate (LibreTranslate's shape), health checks, /info and /metrics.

`create_app(translator, settings)` builds it around a loaded Translator (or a stand-in with the same
`translate` and `settings`); the lifespan starts the batcher and runs one warm-up translation, after which
/health/ready answers 200. Every error is `{"error": "..."}` with its status (see `schema`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import platform
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from mtonnx.foundation.envinfo import version_of
from mtonnx.runtime import layout
from mtonnx.serve import auth, schema
from mtonnx.serve.batcher import Batcher, QueueFull
from mtonnx.serve.engine import Options, TranslatorEngine
from mtonnx.serve.metrics import ServiceMetrics
from mtonnx.serve.middleware import NOTE, BodyLimit, RequestLog, log
from mtonnx.serve.settings import ServeSettings

PATHS = ("/translate", "/languages", "/info", "/metrics", *auth.PUBLIC_PATHS)
WARMUP_TEXT, WARMUP_TOKENS = "Hello, world.", 4
RETRY_AFTER_S = "1"
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
        self._warmup: asyncio.Task | None = None

    async def start(self) -> None:
        """Start the batcher and the warm-up translation (readiness follows it)."""
        self.batcher.start()
        self._warmup = asyncio.get_running_loop().create_task(self.warm_up())

    async def warm_up(self) -> None:
        """One translation through the model's worker thread; then ready (or not, naming the failure)."""
        options = self.engine.defaults._replace(max_new_tokens=WARMUP_TOKENS)
        try:
            await self.batcher.call(self.engine, [WARMUP_TEXT], options)
        except Exception as err:
            self.not_ready_reason = f"the warm-up translation failed: {err}"
            log.error(self.not_ready_reason)
            return
        self.ready = True
        self.metrics.ready.set(1)
        log.info("ready: %s (%s layout)", self.settings.model_dir or "model", getattr(self.translator, "layout", "?"))

    async def stop(self) -> None:
        """Finish the queued and running batches, then stop."""
        self.ready = False
        self.metrics.ready.set(0)
        if self._warmup:
            await self._warmup
        await self.batcher.close()

    def authorized(self, request: Request, body: bytes | None = None) -> bool:
        """True without an API key, else when the Bearer header (or the body's `api_key`) matches it."""
        key = self.settings.api_key
        if key is None or auth.key_matches(auth.bearer(request.headers.get("authorization")), key):
            return True
        return body is not None and auth.key_matches(schema.body_api_key(body), key)

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

    app = FastAPI(
        title="mtonnx translation service",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.service = service
    app.add_middleware(BodyLimit, max_body_bytes=settings.max_body_bytes)
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
    return app


def _add_routes(app: FastAPI, service: Service) -> None:
    settings = service.settings

    @app.get("/health/live")
    async def live() -> dict[str, str]:
        return {"status": "live"}

    @app.get("/health/ready")
    async def ready() -> JSONResponse:
        if service.ready:
            return JSONResponse({"status": "ready"})
        return _error(503, service.not_ready_reason, retry=True)

    @app.get("/info")
    async def info(request: Request) -> JSONResponse:
        return JSONResponse(service.info()) if service.authorized(request) else _unauthorized()

    @app.get("/languages")
    async def languages(request: Request) -> JSONResponse:
        if not service.authorized(request):
            return _unauthorized()
        return JSONResponse(
            [
                {"code": "en", "name": "English", "targets": list(schema.TARGETS)},
                {"code": "zh", "name": "Chinese", "targets": []},
            ]
        )

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if not service.authorized(request):
            return _unauthorized()
        return Response(service.metrics.render(), media_type=service.metrics.content_type)

    @app.post("/translate")
    async def translate(request: Request) -> JSONResponse:
        body = await request.body()
        if not service.authorized(request, body):
            return _unauthorized()
        defaults = service.engine.defaults
        try:
            parsed = schema.parse(body)
            texts = schema.check(parsed, settings.max_items, settings.max_chars, defaults.max_new_tokens)
        except schema.RequestError as err:
            return _error(err.status, err.message)
        note = request.scope.get(NOTE, {})
        note["sentences"] = len(texts)
        if settings.log_text:
            note["text"] = texts
        if not service.ready:
            return _error(503, service.not_ready_reason, retry=True)
        options = Options(parsed.beams or defaults.num_beams, parsed.max_new_tokens or defaults.max_new_tokens)
        todo = [i for i, t in enumerate(texts) if t.strip()]  # empty or blank items translate to ""
        try:
            done = await asyncio.wait_for(
                service.batcher.submit([texts[i] for i in todo], options), settings.request_timeout_s
            )
        except QueueFull as err:
            return _error(503, f"the service is busy: {err}; retry later", retry=True)
        except TimeoutError:
            return _error(504, f"no translation within {settings.request_timeout_s} s (request_timeout_s)")
        except Exception as err:  # the model raised for this request's batch
            log.exception("translation failed")
            return _error(500, f"translation failed: {type(err).__name__}: {err}")
        out = [""] * len(texts)
        for i, text in zip(todo, done):
            out[i] = text
        if settings.log_text:
            note["text"] = {"q": texts, "translatedText": out}
        return JSONResponse({"translatedText": out[0] if isinstance(parsed.q, str) else out})


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return _error(err.status_code, str(err.detail), headers=getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()))


def _error(status: int, message: str, retry: bool = False, headers: dict | None = None) -> JSONResponse:
    headers = {**(headers or {}), **({"Retry-After": RETRY_AFTER_S} if retry else {})}
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _unauthorized() -> JSONResponse:
    return _error(
        401, "missing or wrong API key: send 'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"}
    )
