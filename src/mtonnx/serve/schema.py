"""The service's requests and answers (LibreTranslate's shapes) and the request checks, each failure one status and
one message.

A body is JSON, or a form when its Content-Type is application/x-www-form-urlencoded (what LibreTranslate's own
clients post; read with urllib.parse, so no multipart dependency): form values are strings, so numbers are read
from them, and a repeated `q` is a list. A form-typed body that is a JSON object (`curl -d '{...}'` without a
content type) is read as JSON. 422 for what is not a well-formed request (malformed JSON, wrong types,
out-of-range options), 400 for a language pair or format this service does not translate, 413 for a request over a
size limit, 415 for a multipart body. The response models document the answers in the OpenAPI schema.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SOURCES, TARGETS, FORMATS = ("en",), ("zh", "zh-Hans"), ("text",)
AUTO = "auto"  # LibreTranslate's "detect the source language": English, the only source this model reads
# With source auto, a text with letters of which fewer than this share (%) are ASCII is refused (400) rather than
# translated into noise: it is not English. Source en translates whatever it is sent.
AUTO_MIN_ENGLISH = 50
FORM = "application/x-www-form-urlencoded"
MAX_BEAMS = 16


class RequestError(Exception):
    """A request the service refuses: `status` and a one-line `message` for the JSON answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class TranslateRequest(BaseModel):
    """`{"q": str | [str], "source": "en" | "auto", "target": "zh", "format": "text"}` plus optional options."""

    model_config = ConfigDict(extra="ignore", strict=True)

    q: str | list[str]
    # Plain strings checked by `check` (400 naming what is supported); the schema lists the values accepted.
    source: str = Field(default="en", json_schema_extra={"enum": [*SOURCES, AUTO]})
    target: str = Field(default="zh", json_schema_extra={"enum": list(TARGETS)})
    format: str = Field(default="text", json_schema_extra={"enum": list(FORMATS)})
    beams: int | None = Field(default=None, ge=1, le=MAX_BEAMS)
    max_new_tokens: int | None = Field(default=None, ge=1)
    api_key: str | None = None  # LibreTranslate's way of passing the key


class DetectRequest(BaseModel):
    """`{"q": str}`: the text whose language /detect reports."""

    model_config = ConfigDict(extra="ignore", strict=True)

    q: str
    api_key: str | None = None


class ErrorBody(BaseModel):
    """Every refusal's body."""

    error: str


class Detection(BaseModel):
    """A detected language and the confidence in it, 0-100 as LibreTranslate reports it."""

    confidence: float = Field(ge=0, le=100)
    language: str


class TranslateResponse(BaseModel):
    """One translation per text, in q's shape; with source "auto" also what was detected, in the same shape."""

    translatedText: str | list[str]  # LibreTranslate's names
    detectedLanguage: Detection | list[Detection] = None  # absent unless source is "auto"


class Language(BaseModel):
    """A language of /languages and the targets it translates to."""

    code: str
    name: str
    targets: list[str]


class Status(BaseModel):
    """The health checks' answer."""

    status: str


def parse(body: bytes, content_type: str | None, model: type[BaseModel] = TranslateRequest) -> Any:
    """The body as a validated `model`, read as a form or JSON by its content type; RequestError (415, 422)."""
    media = media_type(content_type)
    if media == "multipart/form-data":
        raise RequestError(415, f"multipart bodies are not read: send JSON or {FORM} (curl -d, not -F)")
    try:
        if media == FORM and not body.lstrip().startswith(b"{"):
            return model.model_validate(form_fields(body), strict=False)  # form values are strings: "2" is 2
        return model.model_validate_json(body or b"")
    except ValidationError as err:
        raise RequestError(422, _message(err, model)) from None


def check(request: TranslateRequest, max_items: int, max_chars: int, max_new_tokens: int) -> list[str]:
    """The request's texts after the language, option and size checks (RequestError 400, 422 or 413)."""
    for name, value, supported in (
        ("source", request.source, (*SOURCES, AUTO)),
        ("target", request.target, TARGETS),
        ("format", request.format, FORMATS),
    ):
        if value not in supported:
            raise RequestError(
                400,
                f"unsupported {name} {value!r}: this service translates English to Chinese "
                f"(source: {', '.join((*SOURCES, AUTO))}; target: {', '.join(TARGETS)}; format: {', '.join(FORMATS)})",
            )
    if request.max_new_tokens is not None and request.max_new_tokens > max_new_tokens:
        raise RequestError(422, f"max_new_tokens: at most {max_new_tokens} (the model's max_length - 1)")
    texts = [request.q] if isinstance(request.q, str) else request.q
    if request.source == AUTO:
        for i, text in enumerate(texts):
            share = detect(text)["confidence"]
            if share < AUTO_MIN_ENGLISH and any(c.isalpha() for c in text):
                where = "q" if isinstance(request.q, str) else f"q[{i}]"
                raise RequestError(
                    400,
                    f"source auto: {where} does not read as English ({share:g} % of its letters are ASCII, below "
                    f"{AUTO_MIN_ENGLISH} %); this service translates English only: send English, or source en to "
                    "translate it all the same",
                )
    if len(texts) > max_items:
        raise RequestError(413, f"q has {len(texts)} items; at most {max_items} per request (max_items)")
    for i, text in enumerate(texts):
        if len(text) > max_chars:
            where = "q" if isinstance(request.q, str) else f"q[{i}]"
            raise RequestError(413, f"{where} has {len(text)} characters; at most {max_chars} (max_chars)")
    return texts


def detect(text: str) -> dict[str, Any]:
    """LibreTranslate's detection for `text`: always English, the only language this model reads, with the share of
    the text's letters that are ASCII letters as the confidence (0-100; 0 for a text without letters). A cheap and
    honest signal, not a language identifier: English scores ~100, Chinese or Cyrillic text near 0, and a
    Latin-script language such as French or German scores high too."""
    letters = [c for c in text if c.isalpha()]
    share = sum(c.isascii() for c in letters) / len(letters) if letters else 0.0
    return {"confidence": round(100 * share, 1), "language": SOURCES[0]}


def body_api_key(body: bytes, content_type: str | None) -> str | None:
    """The body's `api_key` field (JSON object or form) when it holds a string, else None."""
    try:
        if media_type(content_type) == FORM and not body.lstrip().startswith(b"{"):
            data: Any = form_fields(body)
        else:
            data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    key = data.get("api_key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None


def form_fields(body: bytes) -> dict[str, str | list[str]]:
    """A form body's fields: the first value of each, except `q`, which is a list when given more than once."""
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise RequestError(422, "the form body is not UTF-8") from None
    return {k: v if k == "q" and len(v) > 1 else v[0] for k, v in fields.items()}


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower case, without parameters ("" when absent)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI's requestBody for a route that reads `model` itself, as JSON or as a form."""
    shape = model.model_json_schema()
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": shape}, FORM: {"schema": shape}}}
    }


def _message(err: ValidationError, model: type[BaseModel]) -> str:
    q_shape = "a string or a list of strings" if model is TranslateRequest else "a string"
    problems = []
    for e in err.errors(include_url=False):
        loc = [str(part) for part in e["loc"]]
        if e["type"] == "json_invalid":
            return f"the body is not valid JSON: {e.get('ctx', {}).get('error', e['msg'])}"
        if not loc:
            return f'the body must be a JSON object such as {{"q": "Hello"}}, or a form ({FORM})'
        if loc[0] == "q":
            text = "q is required" if e["type"] == "missing" else f"q must be {q_shape}"
        else:
            text = f"{loc[0]}: {e['msg']}"
        if text not in problems:
            problems.append(text)
    return "; ".join(problems)
