"""The service's API tested from its own OpenAPI schema: schemathesis generates valid and invalid requests for every
documented route and checks that none gets a server error and every answer (status, content type, body) is one the
schema documents; the real runtime's answers are checked against the same schema."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from mtonnx.runtime import Translator
from mtonnx.serve.app import create_app
from mtonnx.serve.settings import ServeSettings
from test_serve import SOURCES, Echo, serving

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = {"POST": 150, "GET": 25}  # per generation mode; a route without parameters has few distinct requests
FUZZ_LIMITS = ServeSettings(max_items=8, max_chars=400, max_body_bytes=8_000, request_timeout_s=10)


@pytest.fixture(scope="module")
def translator(hand_export):
    return Translator(hand_export)


def _ready(schema) -> None:
    """Start the app (schemathesis runs its lifespan on the first request) and wait out the warm-up."""
    probe = schema["/health/ready"]["GET"]
    for _ in range(500):
        if probe.Case().call().status_code == 200:
            return
    pytest.fail("the service never became ready")


def test_generated_requests_get_documented_answers_and_no_server_error():
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(Echo(), FUZZ_LIMITS))
    _ready(schema)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} == {
        "GET /health/live",
        "GET /health/ready",
        "GET /info",
        "GET /languages",
        "GET /metrics",
        "POST /translate",
        "POST /detect",
    }
    sent = []
    for operation in operations:
        method = operation.method.upper()
        modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if method == "POST" else [GenerationMode.POSITIVE]
        strategy = st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in modes))

        @settings(
            max_examples=EXAMPLES[method] * len(modes),
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def check(case) -> None:
            case.call_and_validate(checks=CHECKS)
            sent.append(case.media_type)

        check()
    assert len(sent) >= 500
    assert "application/x-www-form-urlencoded" in sent and "application/json" in sent


def test_the_real_runtimes_answers_match_the_schema(translator):
    app = create_app(translator, ServeSettings(max_items=4))
    with serving(app) as client:
        schema = schemathesis.openapi.from_dict(client.get("/openapi.json").json())
        requests = [
            ("POST", "/translate", {"json": {"q": " ".join(SOURCES[:3]), "beams": 2, "max_new_tokens": 12}}, 200),
            ("POST", "/translate", {"data": {"q": SOURCES[3], "source": "auto", "max_new_tokens": 12}}, 200),
            ("POST", "/translate", {"json": {"q": ["a"] * 5}}, 413),
            ("POST", "/translate", {"json": {"q": "Hi", "target": "de"}}, 400),
            ("POST", "/translate", {"content": b"{", "headers": {"content-type": "application/json"}}, 422),
            (
                "POST",
                "/translate",
                {"content": b"--x--", "headers": {"content-type": "multipart/form-data; boundary=x"}},
                415,
            ),
            ("POST", "/detect", {"data": {"q": SOURCES[0]}}, 200),
            ("GET", "/languages", {}, 200),
            ("GET", "/info", {}, 200),
            ("GET", "/metrics", {}, 200),
            ("GET", "/health/ready", {}, 200),
        ]
        for method, path, options, status in requests:
            response: httpx.Response = client.portal.call(lambda: client.http.request(method, path, **options))  # noqa: B023
            assert response.status_code == status, (path, response.text)
            schema[path][method].validate_response(response)
