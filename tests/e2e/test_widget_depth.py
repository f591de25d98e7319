"""Widget depth in real Chromium: inspect a job's internals, find it by id, keyboard shortcuts.

Same real stack as test_widget.py (RQ workers, Redis, ffmpeg); assertions are about what the
learner sees, never about wall-clock time.
"""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from tests.conftest import ARTIFACTS
from tests.e2e import test_widget
from tests.e2e.test_stream import clock_value
from tests.e2e.test_widget import LONG, busy_worker, expect_killed
from tests.helpers import unfold

lab_page = test_widget.lab_page  # the same fixture: a fresh chapter lab, deleted afterwards


def test_inspect_shows_each_attempt_with_its_fence_and_the_lease_deadline_counting_down(lab_page):
    page = lab_page.open_chapter(1, speed=100)
    page.get_by_test_id("scenario-fix-vt").click()  # VT 1200 s: the only redelivery is the kill's
    expect(page.get_by_test_id("setting-vt_seconds-number")).to_have_value("1200", timeout=10_000)
    card = busy_worker(page)
    worker = card.get_attribute("data-testid").removeprefix("worker-")
    pid = card.locator(".lw-w-pid").inner_text()
    page.locator("#lab-widget").press("k")  # K kills a busy worker
    expect_killed(page, worker, pid)
    # focus + Enter opens the internals panel
    unfold(page, "jobs")
    page.get_by_test_id("job-open-1").focus()
    page.keyboard.press("Enter")
    detail = page.get_by_test_id("job-detail")
    expect(detail).to_be_visible()
    # the dead worker's lease still runs: the broker cannot tell dead from slow
    countdown = page.get_by_test_id("lease-countdown")
    expect(countdown).to_contain_text(re.compile(r"\d+ s left"), timeout=10_000)
    first = int(re.search(r"(\d+) s left", countdown.inner_text()).group(1))
    deadline = clock_value(page) + first  # the dead worker's lease deadline, on the lab's clock
    page.wait_for_function(
        "(n) => { const m = /(\\d+) s left/.exec(document.querySelector("
        "'[data-testid=lease-countdown]').textContent); return m && Number(m[1]) < n; }",
        arg=first,
        timeout=LONG,
    )
    expect(detail.get_by_test_id("attempt-1")).to_contain_text(worker)
    page.snap("inspect-leased")
    # the witness is the lab's own clock, not real time: by the deadline plus one 600 s run (and a minute more)
    # the lease has brought the job back and its second attempt has ended, however slowly the host ran meanwhile
    page.wait_for_function(
        "(t) => Number(document.querySelector('[data-testid=readout-clock]').dataset.value) >= t",
        arg=deadline + 600 + 60,
        timeout=180_000,
    )
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=10_000)
    a1, a2 = detail.get_by_test_id("attempt-1"), detail.get_by_test_id("attempt-2")
    expect(a1).to_contain_text("lease expired", timeout=10_000)
    expect(a1.locator("td").nth(5)).to_have_text("1")  # fence
    expect(a2).to_contain_text("succeeded")
    expect(a2.locator("td").nth(5)).to_have_text("2")
    expect(page.get_by_test_id("detail-files")).to_contain_text("240p.mp4")
    expect(page.get_by_test_id("detail-cas")).to_contain_text("CAS refused nothing")
    expect(countdown).to_have_text("no lease held")
    page.snap("inspect-done")
    page.keyboard.press("Escape")
    expect(detail).to_be_hidden()


def test_pause_while_inspecting_pauses_on_open_and_resumes_on_close(lab_page):
    page = lab_page.open_chapter(1)
    unfold(page, "jobs")
    page.get_by_test_id("pause-while-inspecting").check()
    page.locator("#lab-widget").press("u")  # U enqueues the chosen sample
    expect(page.get_by_test_id("job-row-1")).to_be_visible(timeout=LONG)
    pause = page.get_by_test_id("clock-pause")
    expect(pause).to_have_attribute("aria-pressed", "false")
    page.get_by_test_id("job-open-1").click()
    expect(pause).to_have_attribute("aria-pressed", "true", timeout=10_000)
    page.get_by_test_id("detail-close").click()
    expect(pause).to_have_attribute("aria-pressed", "false", timeout=10_000)


def test_shortcuts_enqueue_pause_and_help_but_not_while_typing_and_find_by_id(lab_page):
    page = lab_page.open_chapter(1)
    body = page.locator("#lab-widget")  # the lab has focus: its shortcuts act
    for _ in range(3):
        body.press("u")
    unfold(page, "jobs")
    expect(page.get_by_test_id("job-row-3")).to_be_visible(timeout=10_000)
    # typing in the find box is text, not shortcuts: no job 4, no kill, no help
    find = page.get_by_test_id("job-find")
    find.fill("")
    find.press_sequentially("2u?k")
    expect(page.get_by_test_id("shortcut-help")).to_be_hidden()
    find.fill("2")
    expect(page.get_by_test_id("job-row-2")).to_be_visible()
    expect(page.locator("[data-testid^=job-row-]")).to_have_count(1)
    find.fill("")
    expect(page.locator("[data-testid^=job-row-]")).to_have_count(3)
    find.blur()  # out of the text box, keys are shortcuts again
    body.press("?")
    help_ = page.get_by_test_id("shortcut-help")
    expect(help_).to_be_visible()
    expect(help_).to_contain_text("kill a busy worker")
    page.snap("help")
    page.keyboard.press("Escape")
    expect(help_).to_be_hidden()
    pause = page.get_by_test_id("clock-pause")
    body.press(" ")
    expect(pause).to_have_attribute("aria-pressed", "true", timeout=10_000)
    t = page.get_by_test_id("readout-clock").get_attribute("data-value")
    body.press("s")
    expect(page.get_by_test_id("readout-clock")).not_to_have_attribute("data-value", t, timeout=10_000)
    body.press(" ")
    expect(pause).to_have_attribute("aria-pressed", "false", timeout=10_000)


def test_2000_jobs_stay_findable_and_paged_and_the_render_cost_is_recorded(lab_page, api):
    page = lab_page.open_chapter(1)
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch1')"))
    path = f"/api/labs/{lab['id']}"
    assert api.call("POST", f"{path}/clock", {"action": "pause"}, lab["token"]).status == 200
    page.evaluate("document.querySelector('#lab-widget').lwRenderStats.reset()")
    for _ in range(2000):
        res = api.call("POST", f"{path}/jobs", {"sample": "bigbuckbunny"}, lab["token"])
        assert res.status == 202, res.body
    unfold(page, "jobs")
    expect(page.get_by_test_id("job-row-2000")).to_be_visible(timeout=60_000)
    while_arriving = page.evaluate("document.querySelector('#lab-widget').lwRenderStats()")
    # the list is paged: newest first, 25 rows in the DOM, not 2,000
    expect(page.locator("[data-testid^=job-row-]")).to_have_count(25)
    expect(page.locator("[data-testid^=job-row-]").first).to_have_attribute("data-testid", "job-row-2000")
    page.get_by_test_id("job-find").fill("1234")
    expect(page.locator("[data-testid^=job-row-]")).to_have_count(1)
    expect(page.get_by_test_id("job-row-1234")).to_be_visible()
    page.get_by_test_id("job-find").fill("")
    # the cost of a frame's render work and the gaps between animation frames, at 2,000 jobs
    page.evaluate("document.querySelector('#lab-widget').lwRenderStats.reset()")
    frames = page.evaluate("""() => new Promise((done) => {
        const gaps = []; let last = performance.now();
        const end = last + 3000;
        const step = (t) => {
          gaps.push(t - last); last = t;
          if (t < end) requestAnimationFrame(step); else done(gaps);
        };
        requestAnimationFrame(step); })""")
    stats = page.evaluate("document.querySelector('#lab-widget').lwRenderStats()")
    gaps = sorted(frames)
    frame_gaps = {"frames": len(gaps), "p50": gaps[len(gaps) // 2], "p95": gaps[int(len(gaps) * 0.95)], "max": gaps[-1]}
    report = {
        "jobs": 2000,
        "render_ms_while_2000_arrive": while_arriving,
        "render_ms_after": stats,
        "frame_gap_ms_after": frame_gaps,
    }
    (ARTIFACTS / "render-2000-jobs.json").write_text(json.dumps(report, indent=2))
    print(report)
    assert while_arriving["frames"] > 0 and stats["frames"] > 0  # renders happened while we measured
    page.snap("2000-jobs")
