"""Chapter 3's add-on in real Chromium on the real stack: the same jobs watched by real polling, ETag
polling, long-poll, WebSocket and webhook clients, counted per method; a late redelivery refused."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.helpers import delete_page_labs, page_lab

LONG = 90_000


@pytest.fixture
def ch3(page: Page, stack, api):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/3?speed=50")
    expect(page.get_by_test_id("ch3-panel")).to_have_attribute("data-state", "ready", timeout=30_000)
    yield page
    delete_page_labs(page, api, ["ch3"])
    assert not errors, f"JavaScript errors on the page: {errors}"


def row(page: Page, method: str):
    return page.get_by_test_id(f"ch3-row-{method}")


def test_ch3_watches_the_same_jobs_five_ways_and_counts_each(ch3: Page, shot):
    page = ch3
    expect(page.get_by_test_id("ch3-hook-state")).to_contain_text("registered", timeout=10_000)
    page.get_by_test_id("ch3-jobs").fill("3")
    page.get_by_test_id("ch3-interval").fill("1")
    page.get_by_test_id("ch3-start").click()
    expect(page.get_by_test_id("ch3-panel")).to_have_attribute("data-learned-all", "true", timeout=LONG)
    for method in ("poll", "etag", "long", "ws", "hook"):
        expect(row(page, method).locator('[data-c="learned"]')).to_have_text("3 / 3")
    polls = int(row(page, "poll").get_attribute("data-requests"))
    assert polls >= 3 * 2, "plain polling asked every interval until each job was done"
    assert row(page, "poll").get_attribute("data-not-modified") == "0", "no ETag sent, so never a 304"
    assert int(row(page, "etag").get_attribute("data-not-modified")) > 0, "ETag polling got 304s"
    assert int(row(page, "long").get_attribute("data-requests")) < polls, "the long-poll asked far less"
    expect(row(page, "ws").locator('[data-c="requests"]')).to_contain_text("pushed")
    expect(row(page, "hook").locator('[data-c="mean"]')).not_to_have_text("–")
    model = page.get_by_test_id("ch3-model-poll")
    expect(model.locator('[data-c="here"]')).to_contain_text("W/P")
    expect(model.locator('[data-c="lesson"]')).to_contain_text("1,500/s: 15 per completion")

    expect(page.get_by_test_id("ch3-server")).to_contain_text("× 304", timeout=10_000)
    page.get_by_test_id("ch3-late").click()
    machine = page.get_by_test_id("ch3-machine")
    expect(machine.locator('li[data-outcome="refused"]')).to_have_count(1, timeout=30_000)
    expect(machine).to_contain_text("done → running")
    expect(page.get_by_test_id("ch3-refused")).to_contain_text("done → running refused")
    expect(machine).to_contain_text("Server history: done → running refused", timeout=10_000)
    page.get_by_test_id("ch3-panel").screenshot(path=str(shot("panel").with_name("ch3-panel.png")))


def test_ch3_receiver_fail_switch_shows_retried_webhooks(ch3: Page):
    page = ch3
    page.get_by_test_id("ch3-fails").fill("2")
    page.get_by_test_id("ch3-fail").click()
    expect(page.get_by_test_id("ch3-hook-state")).to_contain_text("failing the next 2")
    page.get_by_test_id("ch3-jobs").fill("1")
    page.get_by_test_id("ch3-start").click()
    expect(row(page, "hook").locator('[data-c="learned"]')).to_have_text("1 / 1", timeout=LONG)
    expect(row(page, "hook").locator('[data-c="requests"]')).to_have_text("3")
    expect(page.locator("#lab-widget")).to_contain_text("failed on try 1", timeout=10_000)
    arrivals = page.get_by_test_id("ch3-arrivals").locator("li")
    expect(arrivals).to_have_count(3)
    expect(arrivals.first).to_contain_text("answered 200")
    expect(page.get_by_test_id("ch3-arrivals").locator('li[data-status="500"]')).to_have_count(2)


def test_a_fail_switch_pressed_while_the_pages_own_registration_is_slow_stays_on(page: Page, stack, api):
    """The page registers the built-in receiver as it opens; a learner who presses *Fail the next 2* before that
    answer is back must still get the failures (the page's registration once came last and undid them)."""
    held: list = []  # the page's own registration, kept from the server until the learner has pressed
    answered: list[int] = []

    def hold_first_put(route):
        if route.request.method == "PUT" and not held:
            held.append(route)
        else:
            route.continue_()

    def until(what, ok) -> None:
        for _ in range(100):
            if ok():
                return
            page.wait_for_timeout(100)
        pytest.fail(f"never: {what}")

    page.route("**/api/labs/*/webhook", hold_first_put)
    page.on("response", lambda r: answered.append(r.status) if r.request.method == "PUT" and "/webhook" in r.url else 0)
    page.goto(f"{stack.url}/chapters/3?speed=50")
    expect(page.get_by_test_id("ch3-panel")).to_have_attribute("data-state", "ready", timeout=30_000)
    until("the page registers the receiver as it opens", lambda: held)
    page.get_by_test_id("ch3-fails").fill("2")
    page.get_by_test_id("ch3-fail").click()
    page.wait_for_timeout(500)  # room for a registration sent at once to be answered first
    held[0].continue_()
    until("both registrations answered", lambda: len(answered) >= 2)
    lab = page_lab(page, "ch3")
    try:
        expect(page.get_by_test_id("ch3-hook-state")).to_contain_text("failing the next 2")
        hook = api.call("GET", f"/api/labs/{lab['lab_id']}/webhook", token=lab["token"]).json()
        assert hook["fail_times"] == 2, "the page's own registration landed last and switched the failures off"
    finally:
        delete_page_labs(page, api, ["ch3"])
