"""Rewind, branch and replay in real Chromium against the real stack (RQ workers, Redis, ffmpeg).

The scrubber rebuilds a past moment from the event stream; "try again from here" branches the run
(POST /api/labs with branch_of + at_event) and the compare page shows both runs side by side.
"""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from core import stream
from tests.conftest import ARTIFACTS
from tests.e2e import test_widget
from tests.e2e.test_widget import LONG, wait_readout_at_least
from tests.helpers import unfold

lab_page = test_widget.lab_page


def scrub_to(page, pattern: str, max_steps: int = 80) -> str:
    """Home, then one event at a time (arrow keys) until the readout names the moment we want."""
    unfold(page, "history")
    slider = page.get_by_test_id("scrubber")
    slider.focus()
    page.keyboard.press("Home")
    where = page.get_by_test_id("scrub-where")
    expect(where).to_contain_text("event 1 of")
    for _ in range(max_steps):
        text = where.inner_text()
        if re.search(pattern, text):
            return text
        page.keyboard.press("ArrowRight")
        expect(where).not_to_have_text(text)  # the rebuilt moment is drawn before the next key
    raise AssertionError(f"no moment matching {pattern!r}; last: {where.inner_text()}")


def test_scrub_back_then_branch_with_a_longer_vt_shows_both_runs_and_the_seeded_job_runs(lab_page, api):
    page = lab_page.open_chapter(1)
    page.get_by_test_id("scenario-vt-too-short").click()  # VT 300 s, job 600 s: redelivered mid-job
    wait_readout_at_least(page, "redelivered", 1)
    root = page.locator("#lab-widget")
    # back to the moment job 1 was first claimed: before any redelivery
    text = scrub_to(page, r"claimed job 1 \(attempt 1\)")
    assert "event" in text
    expect(root).to_have_attribute("data-view", "past")
    banner = page.get_by_test_id("past-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Viewing the past")
    expect(page.get_by_test_id("readout-redelivered")).to_have_attribute("data-value", "0")
    expect(page.get_by_test_id("lease-1")).to_be_visible()  # in flight then
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "running")
    expect(page.get_by_test_id("scrubber")).to_have_attribute("aria-valuetext", re.compile(r"t=\d+ s · event \d+"))
    # the live run carries on underneath, held: the banner counts what is waiting
    expect(page.get_by_test_id("past-banner-text")).to_contain_text(re.compile(r"\d+ live events? held"), timeout=LONG)
    lab_page.snap("past")
    # try again from here with VT 1200 s
    vt = page.get_by_test_id("branch-vt_seconds")
    expect(vt).to_have_value("300")
    vt.fill("1200")
    page.get_by_test_id("branch-submit").click()
    page.wait_for_url(re.compile(r"/compare\?"), timeout=20_000)
    a, b = page.locator("#run-a"), page.locator("#run-b")
    for run in (a, b):
        expect(run).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.get_by_test_id("diff-a-vt_seconds")).to_have_text("300 s")
    expect(page.get_by_test_id("diff-b-vt_seconds")).to_have_text("1,200 s")
    expect(page.get_by_test_id("compare-summary")).to_contain_text("branched from run A")
    # both timelines are there; the branch's seeded job runs once to done, never redelivered
    expect(a.get_by_test_id("tl-job-1")).to_be_visible()
    expect(b.get_by_test_id("tl-job-1")).to_be_visible(timeout=LONG)
    expect(b.get_by_test_id("readout-done")).to_have_attribute("data-value", "1", timeout=LONG)
    expect(b.get_by_test_id("readout-redelivered")).to_have_attribute("data-value", "0")
    assert int(a.get_by_test_id("readout-redelivered").get_attribute("data-value")) >= 1
    expect(b.get_by_test_id("tl-attempt-1-1")).to_have_attribute("data-outcome", "succeeded")
    branch = page.evaluate("""() => Object.keys(localStorage).filter(k => k.startsWith('awl:owned:'))
        .map(k => JSON.parse(localStorage.getItem(k)))""")
    assert [x["id"] for x in branch] == [b.get_attribute("data-lab-id")]
    api.created.extend({"lab_id": x["id"], "token": x["token"]} for x in branch)  # deleted after the test
    page.screenshot(path=str(ARTIFACTS / "compare-vt300-vs-vt1200.png"), full_page=True)
    # the compare URL is shareable: a fresh tab with the same link shows the same two runs
    other = page.context.new_page()
    other.goto(page.url)
    expect(other.locator("#run-b")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(other.locator("#run-b").get_by_test_id("readout-done")).to_have_attribute("data-value", "1", timeout=LONG)
    other.close()


def test_back_to_live_applies_the_held_events_in_order(lab_page):
    page = lab_page.open_chapter(1)
    page.get_by_test_id("scenario-fix-vt").click()
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "running", timeout=LONG)
    scrub_to(page, r"job 1 enqueued")
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "queued")
    expect(page.get_by_test_id("readout-done")).to_have_attribute("data-value", "0")
    expect(page.get_by_test_id("past-banner-text")).to_contain_text("held", timeout=LONG)
    page.get_by_test_id("back-to-live").click()
    root = page.locator("#lab-widget")
    expect(root).to_have_attribute("data-view", "live")
    expect(page.get_by_test_id("past-banner")).to_be_hidden()
    expect(page.get_by_test_id("readout-done")).to_have_attribute("data-value", "1", timeout=LONG)
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done")


def test_replay_a_finished_run_at_speed_shows_every_event_in_order_with_pause(lab_page, api):
    page = lab_page.open_chapter(1)
    page.get_by_test_id("scenario-fix-vt").click()
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch1')"))
    events = api.call("GET", f"/api/labs/{lab['id']}/events", token=lab["token"]).json()["events"]
    ids = [e["id"] for e in events]
    # record every moment the view passes through
    page.evaluate("""() => { const root = document.querySelector('#lab-widget'); window.seen = [];
        new MutationObserver(() => {
          const v = root.dataset.viewEvent; if (v && window.seen.at(-1) !== v) window.seen.push(v); })
          .observe(root, {attributes: true, attributeFilter: ['data-view-event']}); }""")
    unfold(page, "history")
    page.get_by_test_id("replay-speed").select_option("5")
    play = page.get_by_test_id("replay-play")
    play.click()
    expect(play).to_have_attribute("aria-pressed", "true")
    page.wait_for_function("() => window.seen.length >= 3", timeout=LONG)
    play.click()  # pause
    expect(page.get_by_test_id("replay-status")).to_contain_text("paused")
    held = page.evaluate("window.seen.length")
    # the witness: ten ticks of a 50 ms timer on the page's own event loop, in which a running replay (a 50 ms
    # interval of its own) would have stepped several times
    page.evaluate("""() => new Promise((done) => { let n = 0;
        const id = setInterval(() => { if (++n >= 10) { clearInterval(id); done(); } }, 50); })""")
    assert page.evaluate("window.seen.length") == held  # paused means paused
    play.click()
    expect(page.get_by_test_id("replay-status")).to_contain_text("finished", timeout=LONG)
    seen = page.evaluate("window.seen")
    assert seen[0] == ids[0] and seen[-1] == ids[-1]
    assert [i for i in ids if i in seen] == seen  # in stream order, never backwards
    assert len(seen) > 3  # animated through the run, not one jump
    # at the end of the replay the log shows the run newest first, as it happened
    logged = page.locator("[data-testid=log-item]").evaluate_all("els => els.map(e => e.dataset.id)")
    assert logged == sorted(logged, key=stream.order, reverse=True)
    expect(page.get_by_test_id("readout-done")).to_have_attribute("data-value", "1")
    lab_page.snap("replayed")
