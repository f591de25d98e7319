"""Chapter 4's add-on in real Chromium on the real stack: outage → retry herd, then a paced replay."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.conftest import ARTIFACTS
from tests.helpers import enqueue

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


def test_the_outage_button_sends_the_jobs_first_and_storage_goes_down_with_their_calls_in_flight(page: Page,
                                                                                                 stack, api):
    """The lesson's scenario: three jobs stream their upload parts, then storage goes down under them (the
    button used to start the outage first, so every job's parts failed at its own start)."""
    page.goto(f"{stack.url}/chapters/4?speed=20")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    saved = json.loads(page.evaluate("sessionStorage.getItem('awl:lab:ch4')"))
    lab = {"lab_id": saved["id"], "token": saved["token"]}
    try:
        api.workers_ready(lab, 3)
        page.get_by_test_id("predict-guess-outage").fill("0")
        page.get_by_test_id("scenario-outage").click()
        expect(page.get_by_test_id("predict-pending")).to_be_visible(timeout=LONG)

        def started() -> list[dict]:
            return [e for e in api.events(lab) if e["type"] == "fault.started"]
        api.wait_for(lab, lambda _s: started(), timeout=90, what="the scenario's outage to start")
        events = api.events(lab)
        fault_at = next(i for i, e in enumerate(events) if e["type"] == "fault.started")
        before = events[:fault_at]
        parts = api.snapshot(lab)["settings"]["upload_parts"]
        assert sum(e["type"] == "job.enqueued" for e in before) == 3, "the jobs went in before the outage"
        assert sum(e["type"] == "storage.called" for e in before) >= 3 * parts, \
            "every upload part had called storage before it went down"
    finally:
        api.call("DELETE", f"/api/labs/{saved['id']}", token=saved["token"])


def test_two_policies_runs_stay_overlaid_on_one_scale_in_the_panel(page: Page, stack, api):
    """Fixed, then full jitter, on the widget's own lab: the panel keeps both runs on one chart, so the
    lower peak is drawn lower (the fixed policy's tallest bar at least twice full jitter's, in pixels)."""
    page.goto(f"{stack.url}/chapters/4?speed=20")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    saved = json.loads(page.evaluate("sessionStorage.getItem('awl:lab:ch4')"))
    lab = {"lab_id": saved["id"], "token": saved["token"]}
    try:
        api.ok("PATCH", f"/api/labs/{saved['id']}/settings", {"retry_base": 10, "retry_cap": 300, "max_attempts": 8,
                                                             "breaker": False, "jitter_seed": 7}, lab["token"])
        workers = api.workers_ready(lab, 3)["settings"]
        for n, policy in enumerate(("fixed", "full_jitter"), 1):
            page.get_by_test_id("ch4-policy").select_option(policy)  # the panel's control sets the lab
            api.wait_for(lab, lambda s, p=policy: s["settings"]["retry_policy"] == p, timeout=20,
                         what=f"the lab to run {policy}")
            calls0 = api.snapshot(lab)["counts"].get("storage_calls", 0)
            for _ in range(3):
                enqueue(api, lab, job_type="thumbnail", duration_s=200)
            api.wait_for(lab, lambda s, c=calls0: s["counts"]["storage_calls"] >= c + 3 * workers["upload_parts"],
                         timeout=60, every=0.05, what="every part's first storage call")
            api.ok("POST", f"/api/labs/{saved['id']}/faults", {"type": "storage_outage", "duration_s": 60},
                   lab["token"])
            api.wait_for(lab, lambda s, k=n: s["counts"]["done"] == 3 * k, timeout=180, what=f"{policy}'s jobs")
        chart = page.get_by_test_id("ch4-hist")
        expect(chart).to_have_attribute("data-policies", "fixed full_jitter", timeout=30_000)
        tallest = page.evaluate("""() => Object.fromEntries(['la-d', 'la-c'].map((c) => [c, Math.max(0,
            ...[...document.querySelectorAll(`[data-testid=ch4-hist] rect.la-bar.${c}`)]
              .map((r) => r.getBBox().height))]))""")
        assert tallest["la-d"] >= 2 * tallest["la-c"] > 0, tallest  # fixed (la-d) vs full jitter (la-c), one scale
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("fixed: peak")
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("full jitter: peak")
    finally:
        api.call("DELETE", f"/api/labs/{saved['id']}", token=saved["token"])
