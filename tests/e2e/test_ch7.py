"""Chapter 7's add-on in real Chromium on the real stack: four real scheduler replicas; no lock runs
every tick four times, the lock makes it once, a slow run past a 30 s TTL overlaps the next tick's
run, and killing the leader hands the lease to another."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

LONG = 60_000


@pytest.fixture
def ch7(page: Page, stack, api):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/7?speed=100")
    expect(page.get_by_test_id("ch7-panel")).to_have_attribute("data-state", "ready", timeout=30_000)
    yield page
    saved = page.evaluate("localStorage.getItem('awl:lab:ch7')")
    if saved:
        lab = json.loads(saved)
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_ch7_no_lock_runs_four_times_a_lock_once_a_short_ttl_overlaps_and_a_killed_leader_is_replaced(ch7: Page, shot):
    page = ch7
    for rid in ("r1", "r2", "r3", "r4"):
        expect(page.get_by_test_id(f"ch7-replica-{rid}")).to_have_attribute("data-state", "running", timeout=LONG)
    page.get_by_test_id("ch7-scenario-none").click()  # restart the count with every replica ticking
    expect(page.get_by_test_id("ch7-by-none").locator(".ch7-rpt")).to_have_text("4", timeout=LONG)
    expect(page.get_by_test_id("ch7-margin-lock")).to_contain_text("= 75 s")
    expect(page.get_by_test_id("ch7-shard")).to_contain_text("consistent with an even spread")

    page.get_by_test_id("ch7-scenario-lock").click()
    expect(page.get_by_test_id("ch7-strategy")).to_have_attribute("data-strategy", "lock")
    expect(page.get_by_test_id("ch7-by-lock").locator(".ch7-rpt")).to_have_text("1", timeout=LONG)
    expect(page.get_by_test_id("ch7-by-none")).to_have_count(0)  # the count restarted with the scenario
    shot("lock")
    page.locator("#lab-widget").screenshot(path=str(shot("lock").with_name("ch7-widget.png")))

    # a run slower than the interval: a 30 s TTL is gone by the next tick, whose replica runs beside it
    page.get_by_test_id("ch7-scenario-short").click()
    expect(page.get_by_test_id("ch7-margin-lock")).to_have_attribute("data-ok", "false")
    page.get_by_test_id("ch7-slow").click()
    expect(page.get_by_test_id("ch7-overlaps")).not_to_have_text("0", timeout=LONG)

    page.get_by_test_id("ch7-scenario-leader").click()
    leader = page.locator(".ch7-replica:has(.ch7-leader)")
    expect(leader).to_have_count(1, timeout=LONG)
    old = leader.get_attribute("data-testid")
    page.get_by_test_id("ch7-kill-leader").click()
    expect(page.get_by_test_id(old)).to_have_attribute("data-state", "dead", timeout=10_000)
    expect(page.locator(f".ch7-replica:has(.ch7-leader):not([data-testid='{old}'])")).to_have_count(1, timeout=LONG)
    expect(page.get_by_test_id("ch7-failover")).to_contain_text("no leader for", timeout=10_000)
    page.get_by_test_id("ch7-panel").screenshot(path=str(shot("leader").with_name("ch7-panel.png")))

    # every replica down for five ticks and more: when they are back, one run catches up, once
    page.get_by_test_id("ch7-reset").click()
    page.get_by_test_id("ch7-down").click()
    expect(page.get_by_test_id("ch7-replica-r1")).to_have_attribute("data-state", "down", timeout=10_000)
    expect(page.get_by_test_id("ch7-catch-ups")).to_have_text("1", timeout=LONG)
    expect(page.get_by_test_id("ch7-replica-r1")).to_have_attribute("data-state", "running", timeout=LONG)
    expect(page.get_by_test_id("ch7-missed")).not_to_have_text("0")  # the ticks nobody was up to run
