"""`mtonnx serve` and `mtonnx serve-bench`: their flags and their main functions (exit codes).

Only argparse and the standard library at import time, so the CLI builds its parser without fastapi installed;
the service's stack is imported when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys

from mtonnx.foundation.arguments import add_model_source
from mtonnx.runtime.layouts import PUBLIC

DECODERS = ("auto", *PUBLIC)
SERVE_STACK = ("fastapi", "uvicorn", "prometheus_client")
BENCH_STACK = ("httpx",)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of `mtonnx serve`; values left unset come from --params' serve section (or its defaults)."""
    add_model_source(parser, "export or variant directory the runtime loads")
    parser.add_argument("--params", help="params YAML file: its serve section and model.source_prefix")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--api-key-file", help="file holding the API key every non-health request must send")
    parser.add_argument("--cors-origin", action="append", help="allow browser calls from this origin (repeatable)")
    parser.add_argument("--log-text", action="store_true", help="also log request texts and translations")
    parser.add_argument("--max-batch-size", type=int, help="most sentences per model call (default 16)")
    parser.add_argument("--max-wait-ms", type=float, help="how long an idle model waits to fill a batch (default 0)")
    parser.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default 1; 0: all cores)")
    parser.add_argument("--decoder", default="auto", choices=DECODERS, help="decoder layout (default auto)")
    parser.add_argument("--source-prefix", help="text put before every sentence, e.g. '>>cmn_Hans<<'")
    parser.add_argument("--queue-size", type=int, help="most sentences waiting; more answer 503 (default 1024)")
    parser.add_argument(
        "--request-timeout-s", type=float, help="body not read within it: 408; translation not done: 504 (default 30)"
    )
    parser.add_argument("--header-timeout-s", type=float, help="headers not complete within it: 408 (default 5)")
    parser.add_argument("--max-body-bytes", type=int, help="largest request body (default 1000000)")
    parser.add_argument("--max-items", type=int, help="most texts (items of q) per request (default 128)")
    parser.add_argument("--max-chars", type=int, help="most characters per text (default 5000)")
    parser.add_argument("--web", action="store_true", help="also serve the model's web page (deploy/web) at /web/")
    return parser


def main(args: argparse.Namespace) -> int:
    """Load the model, serve until SIGTERM/SIGINT, return the exit code (2: bad input, 0: clean stop)."""
    if missing := _missing(SERVE_STACK):
        return _fail(f"{missing} is not installed; the service needs the serve extra: pip install 'mtonnx[serve]'")
    from mtonnx.params import ParamsError
    from mtonnx.runtime import ModelDirError, SessionSettings, Translator
    from mtonnx.runtime.translator import model_dir_of, verify_dir
    from mtonnx.serve import auth, server
    from mtonnx.serve.settings import settings_from_args

    try:
        args.model_dir = model_dir_of(args.model_dir, args.run)
        verify_dir(args.model_dir)  # before any file of it is read, so a damaged one is named as such
        settings = settings_from_args(args)
    except (ParamsError, ModelDirError) as err:
        return _fail(str(err))
    if not auth.is_loopback(settings.host) and settings.api_key is None:
        print(
            f"mtonnx: warning: serving on {settings.host} without --api-key-file: anyone who reaches this port can "
            "use the service",
            file=sys.stderr,
        )
    try:
        translator = Translator(
            settings.model_dir,
            decoder=settings.decoder,
            session=SessionSettings(threads=settings.threads),
            verify=False,  # verified above
        )
    except ModelDirError as err:
        return _fail(str(err))
    except Exception as err:  # a file ONNX Runtime cannot load: still one line, not a traceback
        return _fail(f"{settings.model_dir}: cannot load the model: {str(err).strip().splitlines()[0]}")
    try:
        translator.check_prefix(settings.source_prefix)  # every piece carries it: it must leave room for text
    except ValueError as err:
        return _fail(str(err))
    if getattr(args, "web", False):
        from mtonnx.serve.web import page_dir

        try:
            web = page_dir(settings.model_dir)
        except ValueError as err:
            return _fail(str(err))
    try:
        sock = server.listen(settings.host, settings.port)
    except OSError as err:
        return _fail(f"cannot listen on {settings.host}:{settings.port}: {err.strerror or err}")
    from mtonnx.serve.app import create_app

    server.configure_logging()
    app = create_app(translator, settings)
    if getattr(args, "web", False):
        from mtonnx.serve.web import MOUNT, mount_page

        mount_page(app, web)
        print(f"the web page: http://{settings.host}:{settings.port}{MOUNT}/", file=sys.stderr)
    return server.run(
        app, sock, settings.request_timeout_s, settings.header_timeout_s, on_shutdown=app.state.service.drain
    )


def bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of `mtonnx serve-bench`."""
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the service (default http://127.0.0.1:8000)")
    parser.add_argument("--params", help="params YAML file: serve.bench_* and the evaluation sentences")
    parser.add_argument("--concurrency", help="comma-separated client counts, e.g. 1,4,16 (default: params)")
    parser.add_argument("--seconds", type=float, help="seconds of load per level (default: params)")
    parser.add_argument("-i", "--input", help="sentences to send, one per line (default: the evaluation set)")
    parser.add_argument("--items", type=int, default=1, help="sentences per request (default 1)")
    parser.add_argument("--beams", type=int, help="beams per request (default: the service's)")
    parser.add_argument("--max-new-tokens", type=int, help="max_new_tokens per request (default: the service's)")
    parser.add_argument("--api-key-file", help="file holding the service's API key")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser


def bench_main(args: argparse.Namespace) -> int:
    """Load the service at each concurrency level and print sentences/s and latency percentiles."""
    if missing := _missing(BENCH_STACK):
        return _fail(
            f"{missing} is not installed; the load generator needs the serve extra: pip install 'mtonnx[serve]'"
        )
    from pathlib import Path

    from mtonnx import data
    from mtonnx.params import SCHEMA, ParamsError, load
    from mtonnx.serve import loadgen
    from mtonnx.serve.settings import read_api_key

    try:
        params = load(args.params) if args.params else None
        key = read_api_key(args.api_key_file) if args.api_key_file else None
        levels = client_counts(args.concurrency) if args.concurrency else None
    except ParamsError as err:
        return _fail(str(err))
    serve = params["serve"] if params else {k: f.default for k, f in SCHEMA["serve"].items()}
    if args.input:
        try:
            sentences = [line for line in Path(args.input).read_text(encoding="utf-8").splitlines() if line.strip()]
        except OSError as err:
            return _fail(f"{args.input}: {err.strerror}")
    else:
        data_params = params["data"] if params else {k: f.default for k, f in SCHEMA["data"].items()}
        sentences = [p.en for p in data.eval_set(data_params)]
    if not sentences:
        return _fail("no sentences to send")
    options = {k: v for k, v in (("beams", args.beams), ("max_new_tokens", args.max_new_tokens)) if v}
    if not loadgen.reachable(args.url):
        return _fail(f"{args.url}: no service answers there")
    results = loadgen.sweep(
        args.url,
        sentences,
        levels or serve["bench_concurrency"],
        args.seconds or serve["bench_seconds"],
        items=args.items,
        api_key=key,
        options=options,
    )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(loadgen.format_table(results))
    return 0


def client_counts(text: str) -> list[int]:
    """--concurrency's comma-separated client counts, each a whole number >= 1; ParamsError (one line) otherwise."""
    from mtonnx.params import ParamsError

    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ParamsError(f"--concurrency {text!r}: give client counts >= 1, comma-separated, e.g. 1,4,16")
    return counts


def _missing(modules: tuple[str, ...]) -> str | None:
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            return name.replace("_", "-")
    return None


def _fail(message: str) -> int:
    print(f"mtonnx: error: {message}", file=sys.stderr)
    return 2
