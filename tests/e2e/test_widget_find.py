"""Inspect workers and leases, filter the log and timeline, find old jobs, calm announcements, 2,000 jobs.

Real Chromium against the real stack; assertions are about what the learner sees.
"""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from tests.conftest import ARTIFACTS
from tests.e2e import test_widget
from tests.e2e.test_widget import LONG, busy_worker, wait_readout_at_least
from tests.helpers import unfold

lab_page = test_widget.lab_page


def test_inspect_opens_from_a_worker_and_from_a_lease(lab_page):
    page = lab_page.open_chapter(1, speed=100)
    page.get_by_test_id("scenario-fix-vt").click()  # VT 1200 s, one 600 s job
    card = busy_worker(page)
    worker = card.get_attribute("data-testid").removeprefix("worker-")
    pid = re.search(r"pid (\d+)", card.inner_text()).group(1)
    page.get_by_test_id(f"worker-inspect-{worker}").click()
    panel = page.get_by_test_id("worker-detail")
    expect(panel).to_be_visible()
    expect(panel.get_by_test_id("worker-detail-pid")).to_have_text(pid)
    expect(panel.get_by_test_id("worker-detail-state")).to_contain_text("busy: job 1")
    expect(panel.get_by_test_id("worker-detail-current")).to_contain_text("job 1 · attempt 1")
    expect(card).to_have_attribute("data-state", "busy")  # inspecting is not killing
    # the lease of that job: holder, fence, the deadline counting down
    page.get_by_test_id("lease-open-1").click()
    lease = page.get_by_test_id("lease-detail")
    expect(lease).to_be_visible()
    expect(panel).to_be_hidden()  # one inspect panel at a time
    expect(lease.get_by_test_id("lease-detail-worker")).to_have_text(f"{worker}, attempt 1")
    expect(lease.get_by_test_id("lease-detail-fence")).to_contain_text("1: a write carrying an older attempt")
    countdown = lease.get_by_test_id("lease-detail-countdown")
    expect(countdown).to_contain_text(re.compile(r"\d+ s left"))
    first = int(re.search(r"(\d+) s left", countdown.inner_text()).group(1))
    page.wait_for_function(
        "(n) => { const m = /(\\d+) s left/.exec(document.querySelector("
        "'[data-testid=lease-detail-countdown]').textContent); return m && Number(m[1]) < n; }",
        arg=first,
        timeout=LONG,
    )
    lab_page.snap("lease-inspect")
    page.keyboard.press("Escape")
    expect(lease).to_be_hidden()
    # once the job is done, the worker's panel lists it among its last jobs
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
    page.get_by_test_id(f"worker-inspect-{worker}").click()
    expect(panel.get_by_test_id("worker-run-1-1")).to_contain_text("succeeded")
    expect(panel.get_by_test_id("worker-detail-current")).to_have_text("none")
    lab_page.snap("worker-inspect")
    page.get_by_test_id("worker-detail-close").click()
    expect(panel).to_be_hidden()


def test_filter_by_type_and_worker_narrows_the_log_and_the_timeline(lab_page):
    page = lab_page.open_chapter(1)
    page.get_by_test_id("scenario-fix-vt").click()  # job 1: VT 1200 s covers it, no lease expires
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
    page.get_by_test_id("scenario-vt-too-short").click()  # job 2: VT 300 s, its lease runs out
    wait_readout_at_least(page, "redelivered", 1)
    log = page.get_by_test_id("event-log")
    unfold(page, "log")
    page.get_by_test_id("log-filter-type").select_option("lease.expired")
    items = log.get_by_test_id("log-item")
    # the log re-renders on the next frame (later on a busy machine): wait for the filter to take, then check
    page.wait_for_function(
        """() => { const els = [...document.querySelectorAll('[data-testid="log-item"]')];
        return els.length > 0 && els.every((e) => e.dataset.type.includes('lease.expired')); }""",
        timeout=LONG,
    )
    types = items.evaluate_all("els => els.map(e => e.dataset.type)")
    assert types and all("lease.expired" in t for t in types)
    assert set(items.evaluate_all("els => els.map(e => e.dataset.job)")) == {"2"}
    expect(page.get_by_test_id("tl-job-2")).to_be_visible()
    expect(page.get_by_test_id("tl-job-1")).to_have_count(0)
    expect(page.get_by_test_id("tl-filter")).to_contain_text("events of type lease.expired")
    lab_page.snap("filtered")
    # by worker: only that worker's events, only the jobs it ran
    page.get_by_test_id("log-filter-type").select_option("all")
    claimed_by = page.get_by_test_id("tl-attempt-1-1").get_attribute("title").split(" ")[0]
    page.get_by_test_id("log-filter-worker").select_option(claimed_by)
    # the log re-renders on the next frame: wait for the filter to take, then check every item
    page.wait_for_function(
        """(w) => { const els = [...document.querySelectorAll('[data-testid="log-item"]')];
        return els.length > 0 && els.every((e) => e.dataset.worker === w); }""",
        arg=claimed_by,
        timeout=LONG,
    )
    assert set(items.evaluate_all("els => els.map(e => e.dataset.worker)")) == {claimed_by}
    expect(page.get_by_test_id("tl-job-1")).to_be_visible()
    page.get_by_test_id("tl-filter-clear").click()
    expect(page.get_by_test_id("tl-filter")).to_be_hidden()
    expect(page.get_by_test_id("tl-job-1")).to_be_visible()
    expect(page.get_by_test_id("tl-job-2")).to_be_visible()


def test_screen_reader_announcements_are_batched_and_focus_stays_put(lab_page, api):
    page = lab_page.open_chapter(1)
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch1')"))
    # a lease far longer than any attempt on a busy host: six plain jobs, no redelivery
    assert api.call("PATCH", f"/api/labs/{lab['id']}/settings", {"vt_seconds": 7200}, lab["token"]).status == 200
    page.evaluate("""() => { window.said = [];
        new MutationObserver(() => window.said.push([performance.now(),
          document.querySelector('[data-testid=announcer]').textContent]))
          .observe(document.querySelector('[data-testid=announcer]'),
                   {childList: true, characterData: true, subtree: true});
    }""")
    unfold(page, "jobs")
    find = page.get_by_test_id("job-find")
    find.focus()
    for _ in range(6):
        assert (
            api.call(
                "POST", f"/api/labs/{lab['id']}/jobs", {"sample": "bigbuckbunny", "duration_s": 60}, lab["token"]
            ).status
            == 202
        )
    expect(page.get_by_test_id("job-row-6")).to_have_attribute("data-state", "done", timeout=LONG)
    # the last batch: the summary that names the last job's completion
    page.wait_for_function("() => window.said.some(([, text]) => text.includes('job 6 done'))", timeout=LONG)
    said = page.evaluate("window.said")
    events = api.events({"lab_id": lab["id"], "token": lab["token"]})
    announced = [e for e in events if e["type"] in ("job.enqueued", "job.claimed", "job.succeeded")]
    assert len(announced) >= 18
    assert 1 <= len(said) < len(announced) / 2  # summaries, not one announcement per event
    gaps = [b[0] - a[0] for a, b in zip(said, said[1:], strict=False)]
    assert all(g >= 1500 for g in gaps), gaps  # at most one summary per ~2 s
    assert any("updates" in text or "done" in text for _, text in said)
    assert page.evaluate("document.activeElement.dataset.testid") == "job-find"  # never stole focus


def test_2000_jobs_with_the_scrubber_old_prefixes_found_and_render_times_recorded(lab_page, api):
    page = lab_page.open_chapter(1)
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch1')"))
    path = f"/api/labs/{lab['id']}"
    assert api.call("POST", f"{path}/clock", {"action": "pause"}, lab["token"]).status == 200
    widget = "document.querySelector('#lab-widget')"
    page.evaluate(f"{widget}.lwRenderStats.reset()")
    for _ in range(2000):
        assert api.call("POST", f"{path}/jobs", {"sample": "bigbuckbunny"}, lab["token"]).status == 202
    unfold(page, "jobs")
    unfold(page, "history")
    expect(page.get_by_test_id("job-row-2000")).to_be_visible(timeout=60_000)
    while_arriving = page.evaluate(f"{widget}.lwRenderStats()")
    # a prefix older than the newest 200 the live model holds: asked of the API, newest first
    page.get_by_test_id("job-find").fill("12")
    expect(page.get_by_test_id("job-row-1299")).to_be_visible(timeout=10_000)
    rows = page.locator("[data-testid^=job-row-]")
    expect(rows).to_have_count(25)
    ids = [int(t.removeprefix("job-row-")) for t in rows.evaluate_all("els => els.map(e => e.dataset.testid)")]
    assert ids == list(range(1299, 1274, -1))
    page.get_by_test_id("job-find").fill("")
    expect(page.get_by_test_id("scrub-where")).to_contain_text("live")
    # with the scrubber present: idle frames, then a drag back through the history
    page.evaluate(f"{widget}.lwRenderStats.reset()")
    gaps = page.evaluate("""() => new Promise((done) => {
        const gaps = []; let last = performance.now(); const end = last + 3000;
        const step = (t) => {
          gaps.push(t - last); last = t; if (t < end) requestAnimationFrame(step); else done(gaps); };
        requestAnimationFrame(step); })""")
    idle = page.evaluate(f"{widget}.lwRenderStats()")
    page.evaluate(f"{widget}.lwRenderStats.reset()")
    seek = page.evaluate("""async () => {
        const s = document.querySelector('[data-testid=scrubber]'); const n = Number(s.max); const ms = [];
        for (let k = 0; k < 20; k++) {
          const i = Math.floor(n * (20 - k) / 21);
          const t0 = performance.now();
          s.value = String(i); s.dispatchEvent(new Event('input'));
          await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
          ms.push(performance.now() - t0);
        }
        return ms; }""")
    scrubbing = page.evaluate(f"{widget}.lwRenderStats()")
    expect(page.locator("#lab-widget")).to_have_attribute("data-view", "past")
    lab_page.snap("2000-jobs-scrubbed")
    # a seek backwards starts from the nearest of the model's checkpoints; the same moment folded from
    # the first event (the first seek from live) must read the same
    seek_to = """async (i) => { const s = document.querySelector('[data-testid=scrubber]');
        s.value = String(i); s.dispatchEvent(new Event('input'));
        await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
        return [...document.querySelectorAll('#lab-widget [data-testid^=readout-]')].map((e) => e.dataset.value); }"""
    n = int(page.get_by_test_id("scrubber").get_attribute("max"))
    page.evaluate(seek_to, n)
    mid = n // 2 + 7  # between two checkpoints
    via_checkpoints = page.evaluate(seek_to, mid)
    page.get_by_test_id("back-to-live").click()
    expect(page.get_by_test_id("job-row-2000")).to_be_visible()
    folded = page.evaluate(seek_to, mid)
    assert folded == via_checkpoints, (folded, via_checkpoints)
    assert page.evaluate(seek_to, 0) != folded, "the moment compared is no different from the first event"
    page.get_by_test_id("back-to-live").click()
    expect(page.get_by_test_id("job-row-2000")).to_be_visible()

    def summary(xs):
        xs = sorted(xs)
        return {
            "n": len(xs),
            "p50": round(xs[len(xs) // 2], 2),
            "p95": round(xs[int(len(xs) * 0.95)], 2),
            "max": round(xs[-1], 2),
        }

    report = {
        "jobs": 2000,
        "render_ms_while_2000_arrive": while_arriving,
        "render_ms_idle_with_scrubber": idle,
        "frame_gap_ms_idle_with_scrubber": summary(gaps),
        "render_ms_while_scrubbing": scrubbing,
        "seek_to_frame_ms": summary(seek),
    }
    (ARTIFACTS / "render-2000-jobs-scrubber.json").write_text(json.dumps(report, indent=2))
    print(report)
    assert idle["frames"] > 0 and scrubbing["frames"] > 0 and len(seek) == 20


def test_a_history_past_the_streams_cap_says_the_oldest_events_are_gone(lab_page, r):
    from core import stream

    page = lab_page.open_chapter(1)
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch1')"))
    unfold(page, "history")
    expect(page.get_by_test_id("scrub-where")).not_to_contain_text("trimmed")
    # more events than the stream keeps, through the append every event takes, pushed live to the page
    for start in range(0, stream.MAXLEN + 1000, 1000):
        with r.pipeline(transaction=False) as pipe:
            for i in range(start, start + 1000):
                stream.append(pipe, lab["id"], "clock.stepped", float(i))
            pipe.execute()
    page.reload()  # a fresh page learns it from the snapshot, not from having watched the events go
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    unfold(page, "history")
    expect(page.get_by_test_id("scrub-where")).to_contain_text("older ones were trimmed", timeout=LONG)
    page.get_by_test_id("scrubber").focus()
    page.keyboard.press("Home")
    expect(page.get_by_test_id("past-banner-text")).to_contain_text("jobs and counts from before then are missing")
