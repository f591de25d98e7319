"""Chapter 4's add-on in real Chromium on the real stack: outage → retry herd, then a paced replay."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.conftest import ARTIFACTS

LONG = 90_000


def test_an_outage_with_no_jitter_shows_the_whole_herd_in_one_bucket_and_replay_is_paced(page: Page, stack, api, shot):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/4?speed=20")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch4')"))
    try:
        panel = page.get_by_test_id("lab-ch4")
        expect(panel).to_be_visible()
        page.get_by_test_id("ch4-policy").select_option("exponential")
        page.get_by_test_id("ch4-run").click()
        # 3 workers × 12 upload parts: 36 storage calls in flight, all back together at each retry
        status = page.get_by_test_id("ch4-status")
        expect(status).to_contain_text("Storage down with 3 jobs in flight, 36 storage calls", timeout=LONG)
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("no jitter: peak 36 of 36", timeout=LONG)
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("Model: no jitter puts all 36 in one bar")
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


def test_the_outage_button_sends_the_jobs_first_and_storage_goes_down_with_their_calls_in_flight(
    page: Page, stack, api
):
    """The lesson's scenario: three jobs stream their upload parts, then storage goes down under them (the
    button used to start the outage first, so every job's parts failed at its own start)."""
    page.goto(f"{stack.url}/chapters/4?speed=20")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    saved = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch4')"))
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
        assert sum(e["type"] == "storage.called" for e in before) >= 3 * parts, (
            "every upload part had called storage before it went down"
        )
    finally:
        api.call("DELETE", f"/api/labs/{saved['id']}", token=saved["token"])


def test_two_policies_runs_stay_overlaid_on_one_scale_in_the_panel(page: Page, stack, api):
    """Fixed, then full jitter, pressed in the panel as the learner does (the second pressed while the first run
    still goes): each run its own colour on one scale, never summed, so the lower peak is drawn lower (the fixed
    policy's tallest bar at least twice full jitter's, in pixels); the second outage waits for its own jobs."""
    page.goto(f"{stack.url}/chapters/4?speed=20")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    saved = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch4')"))
    lab = {"lab_id": saved["id"], "token": saved["token"]}
    try:
        api.ok("PATCH", f"/api/labs/{saved['id']}/settings", {"breaker": False, "jitter_seed": 7}, lab["token"])
        api.workers_ready(lab, 3)
        # 60 s: inside the 8 tries a fixed 10 s wait allows, so no attempt fails (no job retries)
        page.locator("#ch4-outage-s").fill("60")
        for policy in ("fixed", "full_jitter"):
            page.get_by_test_id("ch4-policy").select_option(policy)  # the panel's control sets the lab
            api.wait_for(
                lab, lambda s, p=policy: s["settings"]["retry_policy"] == p, timeout=20, what=f"the lab to run {policy}"
            )
            page.get_by_test_id("ch4-run").click()
            expect(page.get_by_test_id("ch4-status")).to_contain_text(
                f"Storage down with 3 jobs in flight, 36 storage calls ({policy.replace('_', ' ')})", timeout=LONG
            )
        api.wait_for(lab, lambda s: s["counts"]["done"] == 6, timeout=180, what="both runs' jobs")
        ev = api.events(lab)
        second = [e["t_sim"] for e in ev if e["type"] == "fault.started"][-1]
        # the second outage waited for its own jobs: every part of theirs had called storage, none of the first's
        # was still in flight (a run still going finished first)
        assert sum(e["type"] == "job.enqueued" for e in ev) == 6
        busy_then = {e["job_id"] for e in ev if e["type"] == "storage.called" and e["t_sim"] >= second}
        assert len(busy_then) == 3, busy_then
        chart = page.get_by_test_id("ch4-hist")
        expect(chart).to_have_attribute("data-policies", "fixed full_jitter", timeout=30_000)
        expect(chart).to_have_attribute("data-bucket", "1")  # the server's bar: a tenth of the 10 s base
        # one run per colour, each its own bars (run 1 la-d, run 2 la-c): never two runs summed into one bar
        tallest = page.evaluate("""() => Object.fromEntries(['la-d', 'la-c'].map((c) => [c, Math.max(0,
            ...[...document.querySelectorAll(`[data-testid=ch4-hist] rect.la-bar.${c}`)]
              .map((r) => r.getBBox().height))]))""")
        assert tallest["la-d"] >= 2 * tallest["la-c"] > 0, tallest  # fixed (la-d) vs full jitter (la-c), one scale
        legend = page.locator("[data-testid=ch4-hist] .la-legend").inner_text()
        assert "run 1, fixed" in legend and "run 2, full jitter" in legend, legend
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("run 1, fixed: peak")
        expect(page.get_by_test_id("ch4-peaks")).to_contain_text("run 2, full jitter: peak")
        # the widget's own histogram shows the second run only: its bars start at the second outage
        outages = [e["t_sim"] for e in api.events(lab) if e["type"] == "fault.started"]
        hist = page.get_by_test_id("retry-histogram")
        assert float(hist.get_attribute("data-from")) >= outages[-1] > outages[0], (
            hist.get_attribute("data-from"),
            outages,
        )
        chart.screenshot(path=str(ARTIFACTS / "lab-ch4-two-runs.png"))
        hist.screenshot(path=str(ARTIFACTS / "lab-ch4-widget-hist.png"))
    finally:
        api.call("DELETE", f"/api/labs/{saved['id']}", token=saved["token"])
