"""netron renders real pictures in headless Chromium, keeps working when its build is old, cleans up."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import psutil
import pytest
from PIL import Image

from conftest import needs_browser
from mtonnx.export.manual import export_manual
from mtonnx.report import graphview
from mtonnx.runtime import layout

needs_browser(module_level=True)


@pytest.fixture(scope="module")
def encoder(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("graph")
    export_manual(tiny_dir, out / "export", exporter="torchscript", files=[layout.ENCODER])
    return out / "export" / layout.ENCODER


def assert_real_picture(path) -> None:
    image = np.asarray(Image.open(path).convert("L"), dtype=float)
    assert path.stat().st_size > 20_000 and min(image.shape) > 300
    assert image.std() > 10  # a blank or uniform page would be ~0


def session_members(session: int) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session:
                members.append(process)
        except OSError:
            continue
    return members


def test_renders_png_and_svg_with_real_content(encoder, tmp_path):
    result = graphview.render(encoder, tmp_path)
    assert [os.path.basename(p) for p in result["images"]] == ["encoder_model.png", "encoder_model.svg"]
    assert_real_picture(tmp_path / "encoder_model.png")
    svg = (tmp_path / "encoder_model.svg").read_text()
    assert svg.startswith("<svg") or "<svg" in svg[:500]
    assert svg.count('class="node') > 20
    assert session_members(result["session"]) == []  # no netron or Chromium outlives the render


def test_an_aged_netron_build_still_renders(encoder, tmp_path):
    later = dt.datetime.now() + dt.timedelta(days=400)  # netron refuses builds older than 180 days
    result = graphview.render(encoder, tmp_path, formats=("png",), fake_now=later)
    assert_real_picture(tmp_path / "encoder_model.png")
    assert result["images"]


def test_without_the_build_date_fix_an_aged_build_refuses(encoder, tmp_path):
    later = dt.datetime.now() + dt.timedelta(days=400)
    with pytest.raises(graphview.GraphViewError, match="Please update to the newest version") as err:
        graphview.render(encoder, tmp_path, formats=("png",), fake_now=later, keep_build_date=True, timeout_s=10)
    assert err.value.session and session_members(err.value.session) == []


def test_missing_graph_is_a_clear_error(tmp_path):
    with pytest.raises(graphview.GraphViewError, match=r"nope.onnx: no such ONNX file"):
        graphview.render(tmp_path / "nope.onnx", tmp_path)


def test_render_all_draws_each_graph_in_order_and_names_the_one_it_could_not(encoder, tmp_path):
    jobs = {
        "first": (encoder, tmp_path / "first"),
        "missing": (tmp_path / "nope.onnx", tmp_path / "missing"),
        "second": (encoder, tmp_path / "second"),
    }
    results = graphview.render_all(jobs, formats=("png",))
    assert list(results) == list(jobs)
    assert isinstance(results["missing"], graphview.GraphViewError) and "nope.onnx" in str(results["missing"])
    for name in ("first", "second"):
        assert results[name]["images"] == [str(tmp_path / name / "encoder_model.png")]
        assert_real_picture(tmp_path / name / "encoder_model.png")
        assert session_members(results[name]["session"]) == []


def test_the_interactive_view_keeps_working_and_stays_on_the_loopback_server(encoder):
    """The IFrame's page, opened in Chromium 200 days from now: the graph, not netron's update prompt, and no
    request to any host but the loopback server."""
    from playwright.sync_api import sync_playwright

    address = graphview.start_interactive(encoder)
    base = f"http://{address[0]}:{address[1]}/"
    requests = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=graphview.find_chromium(), headless=True, args=graphview.CHROMIUM_ARGS
            )
            page = browser.new_page()
            page.add_init_script(graphview.KEEP_EVAL)  # the wait below evaluates in the page; netron stubs eval out
            page.on("request", lambda request: requests.append(request.url))
            page.clock.set_system_time(dt.datetime.now() + dt.timedelta(days=200))
            page.goto(base)
            page.wait_for_function(graphview.READY, timeout=60_000)
            message = page.locator("#message-text")
            assert not (message.count() and "update" in message.inner_text().lower())
            browser.close()
    finally:
        graphview.stop_interactive(address)
    assert requests and all(url.startswith(base) or url.startswith(("data:", "blob:")) for url in requests), requests
