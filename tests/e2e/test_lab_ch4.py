"""Chapter 4's add-on in real Chromium on the real stack: outage → retry herd, then a paced replay."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.e2e

LONG = 90_000


def test_an_outage_with_no_jitter_shows_the_whole_herd_in_one_bucket_and_replay_is_paced(page: Page, stack, api,
                                                                                        shot):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/4?speed=20")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    lab = json.loads(page.evaluate("sessionStorage.getItem('awl:lab:ch4')"))
    try:
        panel = page.get_by_test_id("lab-ch4")
        expect(panel).to_be_visible()
        page.get_by_test_id("ch4-policy").select_option("exponential")
        page.get_by_test_id("ch4-run").click()
        # 3 workers × 12 upload parts: 36 storage calls in flight, all back together at each retry
        status = page.get_by_test_id("ch4-status")
        expect(status).to_contain_text("Storage down with 3 jobs in flight, 36 storage calls", timeout=LONG)
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("no jitter: peak 36 of 36", timeout=LONG)
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("Model: no jitter puts all 36 in one bucket")
        expect(page.get_by_test_id("ch4-hist")).not_to_have_attribute("data-points", "0")
        shot("outage")
        ARTIFACTS.mkdir(exist_ok=True)
        panel.screenshot(path=str(ARTIFACTS / "lab-ch4-panel.png"))
        # a zero rate never reaches the server: the form's own validation stops it
        page.locator("#ch4-rate").fill("0")
        page.get_by_test_id("ch4-replay-paced").click()
        assert page.locator("#ch4-rate").evaluate("e => e.validity.valid") is False
        page.locator("#ch4-rate").fill("0.5")
        page.get_by_test_id("ch4-replay-paced").click()
        expect(page.get_by_test_id("ch4-status")).to_contain_text("Replaying 0 dead letters, 0.5 per simulated second")
    finally:
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    assert not errors, errors
