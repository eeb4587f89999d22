"""The service's settings: the params file's `serve` section (or its schema defaults), overridden by CLI flags.

One frozen object read by the app, the batcher and the server, so a test builds a service from keywords alone.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from mtonnx.params import SCHEMA, ParamsError, load

# The serve-section keys that a CLI flag of the same name (--max-batch-size for max_batch_size) overrides.
FLAGS = (
    "host",
    "port",
    "threads",
    "max_batch_size",
    "max_wait_ms",
    "queue_size",
    "request_timeout_s",
    "header_timeout_s",
    "max_body_bytes",
    "max_items",
    "max_chars",
)


@dataclass(frozen=True)
class ServeSettings:
    """Everything `mtonnx serve` runs with; the defaults are the params schema's `serve` defaults."""

    model_dir: str = ""
    decoder: str = "auto"
    source_prefix: str = ""
    host: str = SCHEMA["serve"]["host"].default
    port: int = SCHEMA["serve"]["port"].default
    threads: int = SCHEMA["serve"]["threads"].default
    max_batch_size: int = SCHEMA["serve"]["max_batch_size"].default
    max_wait_ms: float = SCHEMA["serve"]["max_wait_ms"].default
    queue_size: int = SCHEMA["serve"]["queue_size"].default
    request_timeout_s: float = SCHEMA["serve"]["request_timeout_s"].default
    header_timeout_s: float = SCHEMA["serve"]["header_timeout_s"].default
    max_body_bytes: int = SCHEMA["serve"]["max_body_bytes"].default
    max_items: int = SCHEMA["serve"]["max_items"].default
    max_chars: int = SCHEMA["serve"]["max_chars"].default
    log_text: bool = SCHEMA["serve"]["log_text"].default
    cors_origins: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)  # never shown by /info or repr

    def limits(self) -> dict[str, Any]:
        """The request limits and batching settings, as /info shows them."""
        keys = ("max_body_bytes", "max_items", "max_chars", "queue_size", "request_timeout_s", "header_timeout_s")
        return {k: getattr(self, k) for k in (*keys, "max_batch_size", "max_wait_ms")}


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    """Settings from parsed `mtonnx serve` flags; raises ParamsError (one line) on a bad params file or flag."""
    params = load(args.params) if args.params else None
    section = dict(params["serve"]) if params else {k: f.default for k, f in SCHEMA["serve"].items()}
    from mtonnx.runtime.translator import deployed_prefix

    prefix = params["model"]["source_prefix"] if params else deployed_prefix(args.model_dir)
    for key in FLAGS:
        value = getattr(args, key, None)
        if value is not None:
            section[key] = _in_range(key, value)
    if getattr(args, "log_text", False):
        section["log_text"] = True
    if getattr(args, "source_prefix", None) is not None:
        prefix = args.source_prefix
    known = {f.name for f in fields(ServeSettings)}
    settings = ServeSettings(
        model_dir=str(args.model_dir),
        decoder=args.decoder,
        source_prefix=prefix,
        cors_origins=tuple(getattr(args, "cors_origin", None) or ()),
        **{k: v for k, v in section.items() if k in known},
    )
    key_file = getattr(args, "api_key_file", None)
    return replace(settings, api_key=read_api_key(key_file)) if key_file else settings


def read_api_key(path: str | Path) -> str:
    """The key in a file (surrounding whitespace stripped); raises ParamsError when unreadable or empty."""
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise ParamsError(f"--api-key-file {path}: cannot read it ({err.__class__.__name__})") from None
    if not key:
        raise ParamsError(f"--api-key-file {path}: the file is empty")
    return key


def _in_range(key: str, value: Any) -> Any:
    spec = SCHEMA["serve"][key]
    if isinstance(value, float) and not math.isfinite(value):  # nan passes every comparison below
        raise ParamsError(f"--{key.replace('_', '-')} = {value!r} is not a finite number")
    if spec.lo is not None and value < spec.lo or spec.hi is not None and value > spec.hi:
        flag = "--" + key.replace("_", "-")
        raise ParamsError(f"{flag} = {value!r} is out of range {spec.lo}..{spec.hi}")
    return value
