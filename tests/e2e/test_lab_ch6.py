"""The chapter 6 add-on in real Chromium: the noisy-neighbour burst runs on the widget's real lab,
and switching to round robin lets the quiet customers through (the panel shows it)."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect


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
    saved = page.evaluate("localStorage.getItem('awl:lab:ch6')")
    if saved:
        lab = json.loads(saved)
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    assert not errors, errors


def test_separate_fleets_label_each_worker_and_a_poison_storm_only_kills_free_ones(page: Page, stack, api, shot):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/6?speed=100")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    page.get_by_test_id("ch6-strategy").select_option("separate")
    expect(page.get_by_test_id("ch6-panel")).to_have_attribute("data-strategy", "separate", timeout=10_000)
    # the workers restart on their tier's queue: w1 is pro's (pro_workers 1), the others free's
    w1, w2 = page.get_by_test_id("worker-w1"), page.get_by_test_id("worker-w2")
    expect(w1).to_have_attribute("data-fleet", "pro", timeout=30_000)
    expect(w1).to_contain_text("w1 · pro")
    expect(w2).to_have_attribute("data-fleet", "free", timeout=30_000)
    deaths = []
    page.expose_function("noteDeath", lambda wid, fleet: deaths.append((wid, fleet)))
    page.evaluate("""() => new MutationObserver((ms) => ms.forEach((m) => {
        const el = m.target;
        if (el.dataset.state === 'dead') window.noteDeath(el.dataset.testid, el.dataset.fleet);
      })).observe(document.querySelector('#lab-widget'), {attributes: true, attributeFilter: ['data-state'],
                                                           subtree: true})""")
    poison = page.get_by_test_id("ch6-poison")
    poison.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("ch6-status")).to_contain_text("dead-lettered after 3 crashes")
    tier_rows = page.get_by_test_id("ch6-tiers").locator("tbody tr")
    free_dead = tier_rows.nth(1).locator("td").nth(6)  # waiting, oldest, running, started, requeued, crashes, dead
    expect(free_dead).to_have_text("3", timeout=120_000)
    expect(tier_rows.nth(1).locator("td").nth(5)).to_have_text("9")
    assert deaths and all(fleet == "free" for _, fleet in deaths), deaths
    page.get_by_test_id("ch6-panel").screenshot(path=str(shot("ch6-separate").with_name("ch6-separate-panel.png")))
    page.get_by_test_id("workers").screenshot(path=str(shot("ch6-separate").with_name("ch6-separate-workers.png")))
    saved = page.evaluate("localStorage.getItem('awl:lab:ch6')")
    if saved:
        lab = json.loads(saved)
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    assert not errors, errors
