"""The /translate request (LibreTranslate's shape) and its checks, each failure one status and one message.

422 for what is not a well-formed request (malformed JSON, wrong types, out-of-range options), 400 for a
language pair or format this service does not translate, 413 for a request over a size limit.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SOURCES, TARGETS, FORMATS = ("en",), ("zh", "zh-Hans"), ("text",)
MAX_BEAMS = 16


class RequestError(Exception):
    """A request the service refuses: `status` and a one-line `message` for the JSON answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class TranslateRequest(BaseModel):
    """`{"q": str | [str], "source": "en", "target": "zh", "format": "text"}` plus optional options."""

    model_config = ConfigDict(extra="ignore", strict=True)

    q: str | list[str]
    source: str = "en"
    target: str = "zh"
    format: str = "text"
    beams: int | None = Field(default=None, ge=1, le=MAX_BEAMS)
    max_new_tokens: int | None = Field(default=None, ge=1)
    api_key: str | None = None  # LibreTranslate's way of passing the key


def parse(body: bytes) -> TranslateRequest:
    """The validated request; raises RequestError(422) naming what is wrong."""
    try:
        return TranslateRequest.model_validate_json(body or b"")
    except ValidationError as err:
        raise RequestError(422, _message(err)) from None


def check(request: TranslateRequest, max_items: int, max_chars: int, max_new_tokens: int) -> list[str]:
    """The request's texts after the language, option and size checks (RequestError 400, 422 or 413)."""
    for name, value, supported in (
        ("source", request.source, SOURCES),
        ("target", request.target, TARGETS),
        ("format", request.format, FORMATS),
    ):
        if value not in supported:
            raise RequestError(
                400,
                f"unsupported {name} {value!r}: this service translates English to Chinese "
                f"(source: {', '.join(SOURCES)}; target: {', '.join(TARGETS)}; format: {', '.join(FORMATS)})",
            )
    if request.max_new_tokens is not None and request.max_new_tokens > max_new_tokens:
        raise RequestError(422, f"max_new_tokens: at most {max_new_tokens} (the model's max_length - 1)")
    texts = [request.q] if isinstance(request.q, str) else request.q
    if len(texts) > max_items:
        raise RequestError(413, f"q has {len(texts)} items; at most {max_items} per request (max_items)")
    for i, text in enumerate(texts):
        if len(text) > max_chars:
            where = "q" if isinstance(request.q, str) else f"q[{i}]"
            raise RequestError(413, f"{where} has {len(text)} characters; at most {max_chars} (max_chars)")
    return texts


def body_api_key(body: bytes) -> str | None:
    """The body's `api_key` field when the body is a JSON object holding a string there, else None."""
    import json

    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    key = data.get("api_key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None


def _message(err: ValidationError) -> str:
    problems = []
    for e in err.errors(include_url=False):
        loc = [str(part) for part in e["loc"]]
        if e["type"] == "json_invalid":
            return f"the body is not valid JSON: {e.get('ctx', {}).get('error', e['msg'])}"
        if not loc:
            return 'the body must be a JSON object such as {"q": "Hello", "source": "en", "target": "zh"}'
        if loc[0] == "q":
            text = "q is required" if e["type"] == "missing" else "q must be a string or a list of strings"
        else:
            text = f"{loc[0]}: {e['msg']}"
        if text not in problems:
            problems.append(text)
    return "; ".join(problems)
