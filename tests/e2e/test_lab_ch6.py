"""The chapter 6 add-on in real Chromium: the noisy-neighbour burst runs on the widget's real lab,
and switching to round robin lets the quiet customers through (the panel shows it)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e


def test_ch6_panel_runs_a_noisy_neighbour_burst_and_switches_strategy_live(page: Page, stack, api, shot):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/6?speed=100")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    panel = page.get_by_test_id("ch6-panel")
    expect(panel).to_be_visible()
    page.get_by_test_id("ch6-strategy").select_option("round_robin")
    expect(page.get_by_test_id("ch6-status")).to_contain_text("Round robin", timeout=10_000)
    expect(panel).to_have_attribute("data-strategy", "round_robin", timeout=10_000)
    page.get_by_test_id("ch6-noisy").click()
    expect(page.get_by_test_id("ch6-status")).to_contain_text("60 jobs")
    # all nine quiet customers get a row (their job started) while the burst is still waiting
    customers = page.get_by_test_id("ch6-customers").locator("tbody tr")
    expect(customers).to_have_count(10, timeout=60_000)
    tier_rows = page.get_by_test_id("ch6-tiers").locator("tbody tr")
    free_waiting = int(tier_rows.nth(1).locator("td").nth(0).inner_text())
    assert free_waiting > 0, "the burst should still be queued when the quiet customers are served"
    expect(page.get_by_test_id("ch6-chart")).not_to_have_attribute("data-points", "0", timeout=10_000)
    expect(page.get_by_test_id("ch6-cost")).to_contain_text("Cost per tier")
    expect(page.get_by_test_id("ch6-cost")).to_contain_text("of pro revenue")
    page.get_by_role("button", name="2× free spike").click()
    expect(page.get_by_test_id("ch6-status")).to_contain_text("Free traffic doubled")
    page.get_by_test_id("ch6-strategy").focus()  # the controls are reachable by keyboard
    panel.screenshot(path=str(shot("ch6-page").with_name("ch6-panel.png")))  # cropped, for review
    saved = page.evaluate("sessionStorage.getItem('awl:lab:ch6')")
    if saved:
        lab = json.loads(saved)
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    assert not errors, errors
