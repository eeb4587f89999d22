"""LibreTranslate's request shapes: form bodies as well as JSON, source "auto", /detect, the body's api_key; and
LibreTranslate's own Python client (libretranslatepy) against a real `mtonnx serve` process on 127.0.0.1."""

from __future__ import annotations

from urllib.error import HTTPError

import pytest
from libretranslatepy import LibreTranslateAPI

from mtonnx.runtime import Translator
from mtonnx.serve.app import create_app
from mtonnx.serve.process import ServiceProcess
from mtonnx.serve.schema import FORM
from mtonnx.serve.settings import ServeSettings
from test_serve import Echo, serving

TEXT = "Where is the station? I like tea."
LANGUAGES = [
    {"code": "en", "name": "English", "targets": ["zh", "zh-Hans"]},
    {"code": "zh", "name": "Chinese", "targets": []},
]


@pytest.fixture(scope="module")
def translator(hand_export):
    return Translator(hand_export)


def test_forms_auto_and_detect_answer_in_libretranslates_shapes():
    key = {"api_key": "k3y"}
    bearer = {"Authorization": "Bearer k3y"}
    with serving(create_app(Echo(), ServeSettings(api_key="k3y"))) as c:
        form = c.post("/translate", data={"q": TEXT, "source": "en", "target": "zh", "beams": "2", **key})
        repeated = c.post("/translate", data={"q": ["I like tea.", "1 + 1 = 2"], "source": "auto", **key})
        chinese = {"q": ["I like tea.", "你好世界 ok"], **key}
        chinese_auto, chinese_en = (c.post("/translate", data={**chinese, "source": s}) for s in ("auto", "en"))
        curl = c.post("/translate", content=b'{"q": "Hi."}', headers={"content-type": FORM, **bearer})
        detected = [
            c.post("/detect", data={"q": "Hello, world", **key}).json(),
            c.post("/detect", json={"q": "你好 world", **key}).json(),
            c.post("/detect", json={"q": "1 + 1 = 2"}, headers=bearer).json(),
        ]
        refusals = [
            c.post("/detect", data={"q": TEXT, "api_key": "nope"}),
            c.post("/detect", data=key),
            c.post("/translate", data={"q": "Hi", "beams": "many", **key}),
            c.post("/translate", files={"q": b"Hi"}, headers=bearer),
        ]
    assert form.json() == {"translatedText": "[Where is the station?][I like tea.]"}
    assert repeated.json() == {
        "translatedText": ["[I like tea.]", "[1 + 1 = 2]"],
        "detectedLanguage": [{"confidence": 100.0, "language": "en"}, {"confidence": 0.0, "language": "en"}],
    }
    # source auto refuses what does not read as English; source en translates what it is sent
    assert chinese_auto.status_code == 400 and chinese_auto.json()["error"] == (
        "source auto: q[1] does not read as English (33.3 % of its letters are ASCII, below 50 %); this service "
        "translates English only: send English, or source en to translate it all the same"
    )
    assert chinese_en.json() == {"translatedText": ["[I like tea.]", "[你好世界 ok]"]}
    assert curl.json() == {"translatedText": "[Hi.]"}  # `curl -d '{...}'` posts JSON typed as a form
    assert detected == [
        [{"confidence": 100.0, "language": "en"}],
        [{"confidence": 71.4, "language": "en"}],
        [{"confidence": 0.0, "language": "en"}],
    ]
    assert [(r.status_code, r.json()["error"]) for r in refusals] == [
        (401, "missing or wrong API key: send 'Authorization: Bearer <key>'"),
        (422, "q is required"),
        (422, "beams: Input should be a valid integer, unable to parse string as an integer"),
        (415, f"multipart bodies are not read: send JSON or {FORM} (curl -d, not -F)"),
    ]


def test_libretranslates_own_client_against_a_real_service(hand_export, translator, monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)  # loopback only
    service = ServiceProcess.start(hand_export, api_key="k3y")
    try:
        service.wait_ready()
        client = LibreTranslateAPI(service.url, api_key="k3y")
        languages = client.languages(timeout=30)
        source_en = client.translate(TEXT, "en", "zh", timeout=30)
        source_auto = client.translate(TEXT, "auto", "zh", timeout=30)
        detected = client.detect(TEXT, timeout=30)
        with pytest.raises(HTTPError) as keyless:
            LibreTranslateAPI(service.url).translate(TEXT, "en", "zh", timeout=30)
    finally:
        code = service.stop()
    assert languages == LANGUAGES
    assert source_en == source_auto == translator.translate(TEXT)
    assert detected == [{"confidence": 100.0, "language": "en"}]
    assert keyless.value.code == 401 and code == 0
