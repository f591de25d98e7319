"""The live stream (static/js/widget/stream.js) when it is lost, in real Chromium on the real stack: a dropped
socket is said plainly over the pipeline, which holds still at the last moment seen (the simulated clock stops
instead of counting past what the page saw), and catches up when the socket is back; a web tier that is down
is said to be not answering. The web tier is really restarted and really stopped (runtime/stack.py)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, WebSocketRoute, expect

from tests.conftest import ARTIFACTS
from tests.helpers import delete_page_labs, page_lab

SPEED = 200
FROZEN = re.compile(r"What you see stopped at t = ([\d,.]+) s")


def open_chapter_1(page: Page, stack, theme: str) -> dict:
    page.set_viewport_size({"width": 1280, "height": 800})
    page.emulate_media(color_scheme=theme)
    page.goto(f"{stack.url}/chapters/1?speed={SPEED}")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)
    return page_lab(page, "ch1")


def clock_value(page: Page) -> int:
    return int(page.get_by_test_id("readout-clock").get_attribute("data-value"))


def renders(page: Page, n: int = 3) -> None:
    """Wait until the page has drawn n more frames (a frame is drawn every render tick, 250 ms): each would
    move a clock that extrapolates."""
    page.evaluate("document.querySelector('#lab-widget').lwRenderStats.reset()")
    page.wait_for_function(
        "(n) => document.querySelector('#lab-widget').lwRenderStats().frames >= n", arg=n, timeout=15_000
    )


def frozen_t(page: Page) -> int:
    m = FROZEN.search(page.get_by_test_id("conn-lost").inner_text())
    assert m, page.get_by_test_id("conn-lost").inner_text()
    return round(float(m.group(1).replace(",", "")))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_dropped_socket_freezes_the_picture_says_so_and_catches_up(page: Page, stack, api, theme):
    ids = open_chapter_1(page, stack, theme)
    blocked = [True]

    def socket(ws: WebSocketRoute) -> None:  # while blocked, every new socket is refused at once
        if blocked[0]:
            ws.close(code=1011)
        else:
            ws.connect_to_server()

    page.route_web_socket(re.compile(r"/ws/labs/"), socket)
    stack.restart_web()  # the live socket drops with the web tier; the new one answers plain requests
    lost = page.get_by_test_id("conn-lost")
    expect(lost).to_be_visible(timeout=30_000)
    expect(lost).to_have_attribute("data-conn", "reconnecting", timeout=30_000)
    expect(lost).to_contain_text("The lab keeps running on the server; reconnecting")
    clock = page.get_by_test_id("readout-clock")
    expect(clock).to_have_attribute("data-frozen", "yes")
    at = frozen_t(page)
    assert abs(clock_value(page) - at) <= 1, "the clock shows the moment the notice names"
    # the lab runs on: its clock passes the frozen moment by a minute, and the page's does not move
    api.wait_for(ids, lambda s: s["clock"]["t"] > at + 60)
    renders(page)
    assert clock_value(page) == at, "the on-screen clock kept counting while disconnected"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"connection-lost-{theme}.png"))
    blocked[0] = False  # the next reconnect goes through: the picture catches up with the lab
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=30_000)
    expect(lost).to_be_hidden()
    expect(clock).to_have_attribute("data-frozen", "no")
    server_t = api.snapshot(ids)["clock"]["t"]
    page.wait_for_function(
        "(t) => Number(document.querySelector('[data-testid=readout-clock]').dataset.value) >= t",
        arg=int(server_t),
        timeout=15_000,
    )
    delete_page_labs(page, api, ["ch1"])


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_server_that_is_down_is_said_to_be_not_answering(page: Page, stack, api, theme):
    open_chapter_1(page, stack, theme)
    try:
        stack.stop_web()
        lost = page.get_by_test_id("conn-lost")
        expect(lost).to_have_attribute("data-conn", "down", timeout=30_000)
        expect(lost).to_be_visible()
        expect(lost).to_contain_text("The server is not answering")
        expect(page.get_by_test_id("conn-status")).to_have_text("○ server not answering")
        at = frozen_t(page)
        renders(page)
        assert clock_value(page) == at
        page.screenshot(path=str(ARTIFACTS / f"server-down-{theme}.png"))
    finally:
        stack.start_web()
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=45_000)
    expect(page.get_by_test_id("conn-lost")).to_be_hidden()
    delete_page_labs(page, api, ["ch1"])
