"""Chapter 5's add-on in real Chromium on the real stack: forced redelivery with the guards on
sends one email to the outbox; the flaky client's resends make one job with a key, one per send
without."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

LONG = 60_000


@pytest.fixture
def ch5(page: Page, stack, api, shot):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/5?speed=200")
    expect(page.get_by_test_id("ch5-panel")).to_have_attribute("data-state", "ready", timeout=30_000)
    yield page
    saved = page.evaluate("localStorage.getItem('awl:lab:ch5')")
    if saved:
        lab = json.loads(saved)
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_ch5_guards_send_one_email_and_a_keyed_client_makes_one_job(ch5: Page, shot):
    page = ch5
    expect(page.get_by_test_id("ch5-window")).to_contain_text("3,600 s")
    page.get_by_test_id("ch5-redeliver").click()
    # the handler runs to the end twice (lease ran out mid-job), the notified flag lets one email out
    expect(page.get_by_test_id("ch5-runs")).to_have_text("2", timeout=LONG)
    expect(page.get_by_test_id("ch5-emails")).to_have_text("1")
    expect(page.get_by_test_id("ch5-outbox-list")).to_have_attribute("data-count", "1", timeout=10_000)
    page.get_by_test_id("ch5-drops").fill("2")
    page.get_by_test_id("ch5-send-key").click()
    result = page.get_by_test_id("ch5-client-result")
    expect(result).to_have_attribute("data-jobs", "1", timeout=20_000)
    expect(page.get_by_test_id("ch5-client-log").locator("li")).to_have_count(3)
    expect(page.get_by_test_id("ch5-client-log")).to_contain_text("Idempotent-Replayed: true")
    expect(page.get_by_test_id("ch5-held")).to_contain_text("1 key,", timeout=10_000)
    shot("keyed")
    page.locator("#lab-widget").screenshot(path=str(shot("keyed").with_name("ch5-widget.png")))
    page.get_by_test_id("ch5-send-nokey").click()
    expect(result).to_have_attribute("data-jobs", "3", timeout=20_000)
    page.get_by_test_id("ch5-panel").screenshot(path=str(shot("nokey").with_name("ch5-panel.png")))


def test_an_add_on_that_loads_after_the_lab_opened_still_starts(page: Page, stack, api):
    """A slow script fetch must not leave the add-on waiting for a `lab:ready` that has passed."""
    held = []
    page.route(re.compile(r"/js/lab-idempotency[^/]*\.js"), lambda route: held.append(route))
    page.goto(f"{stack.url}/chapters/5?speed=200", wait_until="commit")  # "load" would wait for the held script
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    assert held, "the add-on's script was not requested"
    expect(page.get_by_test_id("ch5-panel")).not_to_have_attribute("data-state", "ready")
    for route in held:
        route.continue_()
    expect(page.get_by_test_id("ch5-panel")).to_have_attribute("data-state", "ready", timeout=10_000)
    expect(page.get_by_test_id("ch5-redeliver")).to_be_enabled()
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch5')"))
    api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])


def test_the_why_of_ch5s_prediction_names_the_guard_the_lab_saw_acting(ch5: Page):
    """Both guards on: the claim guard blocks the redelivered copy before it runs, so the notified flag is never
    asked. The why must name the guard whose counter moved (it credited the notified guard)."""
    page = ch5
    page.get_by_test_id("predict-guess-vt-too-short").fill("0")  # at least one email goes out: a miss, so a why
    page.get_by_test_id("scenario-vt-too-short").click()
    expect(page.get_by_test_id("predict-result")).to_be_visible(timeout=LONG)
    why = page.get_by_test_id("predict-why")
    expect(why).to_contain_text("The guard that acted: the claim guard")
    blocked = page.get_by_test_id("readout-duplicates")
    expect(blocked).not_to_have_attribute("data-value", "0")  # the counter the why was read from
