"""The chapter widget in real Chromium against the real stack (RQ workers, Redis, ffmpeg).

Each test opens a chapter page with `?speed=200`, which the widget passes to POST /api/labs, so
a 600 s transcode takes about 3 real seconds. Assertions are about what the learner sees (the
readouts, worker cards, timeline and log, found by data-testid), never about wall-clock time.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import Page, expect

from core import media
from core.procs import wait
from tests.conftest import ARTIFACTS, failed
from tests.helpers import delete_page_labs, unfold

SPEED = 200
LONG = 45_000  # ms; generous upper bound for a few simulated transcodes at 200x


@pytest.fixture
def lab_page(page: Page, stack, api, shot, request):
    """Open a chapter's widget on a fresh lab; delete that lab afterwards (workers, keys, files)."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    opened: list[str] = []

    def open_chapter(number: int, speed: int = SPEED) -> Page:
        page.goto(f"{stack.url}/chapters/{number}?speed={speed}")
        expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
        expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)
        opened.append(preset_of(page))
        return page

    def snap(label: str) -> None:
        """The full page (the `shot` fixture) plus a crop of just the widget, for review."""
        shot(label)
        page.locator("#lab-widget").screenshot(path=str(ARTIFACTS / f"{request.node.name}-{label}-widget.png"))

    page.open_chapter = open_chapter
    page.snap = snap
    yield page
    delete_page_labs(page, api, opened, failed(request))
    assert not errors, f"JavaScript errors on the page: {errors}"


def preset_of(page: Page) -> str:
    return page.locator("#lab-widget").get_attribute("data-preset")


def readout(page: Page, name: str) -> int:
    return int(page.get_by_test_id(f"readout-{name}").get_attribute("data-value"))


def expect_readout(page: Page, name: str, value: int, timeout: int = LONG) -> None:
    expect(page.get_by_test_id(f"readout-{name}")).to_have_attribute("data-value", str(value), timeout=timeout)


def wait_readout_at_least(page: Page, name: str, value: int, timeout: int = LONG) -> None:
    page.wait_for_function(
        "([name, v]) => Number(document.querySelector(`[data-testid=readout-${name}]`).dataset.value) >= v",
        arg=[name, value],
        timeout=timeout,
    )


def busy_worker(page: Page):
    card = page.locator("[data-testid^=worker-][data-state=busy]").first
    expect(card).to_be_visible(timeout=LONG)
    return card


KILLED = """([id, pid]) => {
  const card = document.querySelector(`[data-testid=worker-${id}]`);
  return !!card && (['dead', 'respawning'].includes(card.dataset.state)
    || card.querySelector('.lw-w-pid').textContent !== pid);
}"""


def expect_killed(page: Page, worker: str, pid: str) -> None:
    """The worker's card shows it dead (for the respawn delay, 0.3 real s at 100×: looked at every frame, where an
    expectation's retries a second apart can miss it), or already the new process that replaced it."""
    page.wait_for_function(KILLED, arg=[worker, pid], timeout=10_000)


def all_readouts(page: Page) -> dict[str, str]:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
        '[data-testid^=readout-]')].map(e => [e.dataset.testid, e.dataset.value]))""")


# ---------------------------------------------------------------------------------------------


def test_upload_goes_queued_running_done_and_the_rendition_plays(lab_page):
    page = lab_page.open_chapter(0)  # ch0: one worker, so a second job has to wait its turn
    page.snap("ready")
    # a real multipart upload through the file picker
    page.get_by_test_id("upload-file").set_input_files(str(media.sample_clip("bikes")))
    expect(page.get_by_test_id("upload-status")).to_contain_text("202 Accepted", timeout=20_000)
    expect(page.get_by_test_id("upload-status")).to_contain_text("job 1")
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "running", timeout=LONG)
    # a sample clip while the only worker is busy: visibly queued
    page.get_by_test_id("sample-select").select_option("bigbuckbunny")
    page.get_by_test_id("sample-submit").click()
    expect(page.get_by_test_id("job-row-2")).to_have_attribute("data-state", "queued", timeout=10_000)
    expect(page.get_by_test_id("queued-2")).to_be_visible()
    expect_readout(page, "queued", 1, timeout=10_000)
    page.snap("queued")
    expect(page.get_by_test_id("job-row-2")).to_have_attribute("data-state", "running", timeout=LONG)
    expect(page.get_by_test_id("lease-2")).to_be_visible()
    page.snap("running")
    expect(page.get_by_test_id("job-row-2")).to_have_attribute("data-state", "done", timeout=LONG)
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done")
    expect_readout(page, "done", 2)
    expect_readout(page, "queued", 0)
    expect(page.get_by_test_id("tl-attempt-2-1")).to_have_attribute("data-outcome", "succeeded")
    # the log narrates it in plain words, newest first
    log = page.get_by_test_id("event-log")
    expect(log).to_contain_text("job 2 done by worker w1 (attempt 1)")
    expect(log.get_by_test_id("log-item").first).to_contain_text("job 2")
    # the real rendition plays
    unfold(page, "jobs")
    play = page.get_by_test_id("play-2-240p")
    expect(play).to_be_visible(timeout=10_000)
    page.snap("done")
    play.click()
    duration = page.evaluate("""async () => {
        const v = document.querySelector('[data-testid=player]');
        if (v.readyState < 1) await new Promise((ok, bad) => {
            v.addEventListener('loadedmetadata', ok, {once: true});
            v.addEventListener('error', () => bad(new Error('video error ' + (v.error && v.error.code))), {once: true});
        });
        return v.duration;
    }""")
    assert duration > 0
    expect(page.get_by_test_id("player")).to_have_attribute("src", re.compile(r"/jobs/2/outputs/240p\.mp4$"))
    page.snap("playing")


def test_killing_the_busy_worker_redelivers_once_after_the_vt_and_loses_nothing(lab_page):
    # 100x, not 200x: on a busy host ffmpeg can outlast a 3 s attempt and (no heartbeat while it
    # waits for ffmpeg) overrun even a 1200 s lease, which would add a redelivery the kill did not cause
    page = lab_page.open_chapter(1, speed=100)
    # VT 1200 s covers the 600 s job, so the only redelivery is the one the kill causes
    page.get_by_test_id("scenario-fix-vt").click()
    expect(page.get_by_test_id("setting-vt_seconds-number")).to_have_value("1200", timeout=10_000)
    card = busy_worker(page)
    worker = card.get_attribute("data-testid").removeprefix("worker-")
    pid = card.locator(".lw-w-pid").inner_text()
    page.get_by_test_id(f"worker-{worker}").click()  # at once: the 600 s job takes ~3 real seconds
    expect_killed(page, worker, pid)
    expect(page.get_by_test_id("kill-status")).to_contain_text(f"SIGKILL → {worker}")
    # the broker cannot tell a dead worker from a slow one: the job stays leased until the VT
    expect(page.get_by_test_id("lease-1")).to_have_attribute("data-orphan", "yes", timeout=10_000)
    expect_readout(page, "redelivered", 0, timeout=1000)
    page.snap("killed")
    expect_readout(page, "redelivered", 1)
    expect_readout(page, "lost", 0)
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
    expect_readout(page, "redelivered", 1)
    expect_readout(page, "lost", 0)
    expect_readout(page, "done", 1)
    expect(page.get_by_test_id("tl-attempt-1-1")).to_have_attribute("data-outcome", "killed")
    expect(page.get_by_test_id("tl-attempt-1-2")).to_have_attribute("data-outcome", "succeeded")
    log = page.get_by_test_id("event-log")
    expect(log).to_contain_text(
        re.compile(r"lease on job 1 expired at t=[\d,]+ s; visible again: redelivered as attempt 2")
    )
    # filter the log to one event type
    unfold(page, "log")
    page.get_by_test_id("log-filter-type").select_option("worker.killed")
    expect(log.get_by_test_id("log-item")).to_have_count(1)
    expect(log.get_by_test_id("log-item")).to_contain_text(f"worker {worker} killed (SIGKILL pid")
    page.get_by_test_id("log-filter-type").select_option("default")
    expect(page.get_by_test_id("announcer")).not_to_be_empty()
    page.snap("redelivered")


def test_cutting_a_lease_short_in_the_in_flight_panel_redelivers_while_its_worker_keeps_going(lab_page):
    page = lab_page.open_chapter(1, speed=50)  # 600 s job: 12 real seconds to click in
    page.get_by_test_id("scenario-fix-vt").click()  # VT 1200 s: without the cut nothing comes back
    expect(page.get_by_test_id("setting-vt_seconds-number")).to_have_value("1200", timeout=10_000)
    first = busy_worker(page).get_attribute("data-testid")
    button = page.get_by_test_id("lease-expire-1")
    expect(button).to_be_visible(timeout=10_000)
    button.focus()
    page.keyboard.press("Enter")  # a button like any other: keyboard works
    expect(page.get_by_test_id("lease-status")).to_contain_text("Lease on job 1 cut short")
    expect_readout(page, "redelivered", 1)
    # attempt 2 runs elsewhere while the first worker, told nothing, is still busy with attempt 1
    expect(page.get_by_test_id(first)).to_have_attribute("data-state", "busy")
    expect(page.get_by_test_id("tl-attempt-1-2")).to_be_visible()
    expect(page.get_by_test_id("event-log")).to_contain_text("you cut job 1's lease short (attempt 1)")
    page.snap("lease-cut")
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
    expect_readout(page, "done", 1)


def test_vt_below_the_job_duration_shows_the_duplicate_overlap_and_the_second_completion(lab_page):
    page = lab_page.open_chapter(1)  # ch1: VT 300 s, 600 s job
    page.get_by_test_id("scenario-vt-too-short").click()
    expect(page.get_by_test_id("vt-hint")).to_contain_text("runs out mid-job")
    expect(page.get_by_test_id("tl-attempt-1-1")).to_be_visible(timeout=LONG)
    # attempt 2 starts while attempt 1 still runs: the overlap is hatched on job 1's row
    overlap = page.get_by_test_id("tl-job-1").get_by_test_id("tl-overlap").first
    expect(overlap).to_be_visible(timeout=LONG)
    expect(page.get_by_test_id("tl-job-1")).to_have_attribute("data-overlap", "yes")
    expect(page.get_by_test_id("tl-job-1").get_by_test_id("tl-lease-expired").first).to_be_visible()
    expect(page.get_by_test_id("tl-attempt-1-2")).to_be_visible()
    page.snap("overlap")
    # chapter 1's world (guard off): the first attempt finishes at 600 s and the job is done once; the
    # copy started at 300 s runs on and completes again, a counted duplicate
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
    wait_readout_at_least(page, "redelivered", 1)
    expect(page.get_by_test_id("event-log")).to_contain_text("job 1 completed AGAIN", timeout=LONG)
    page.snap("blocked")


def test_three_rapid_kills_make_three_redeliveries_and_the_rate_shows_the_burst(lab_page):
    # ch8: three workers, heartbeat on, VT 300 s. 50x keeps three parallel transcodes inside their
    # paced 600 s on a small host, so every redelivery counted is one the kills caused.
    page = lab_page.open_chapter(8, speed=50)
    page.get_by_test_id("scenario-load").click()
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid^=worker-][data-state=busy]').length === 3", timeout=LONG
    )
    for w in ("w1", "w2", "w3"):  # three clicks, back to back, while all three are busy
        page.get_by_test_id(f"worker-{w}").click()
    expect_readout(page, "redelivered", 0, timeout=500)  # nothing yet: each lease has to run out
    log = page.get_by_test_id("event-log")
    expect(log.locator("[data-type~='worker.killed']")).to_have_count(3, timeout=10_000)
    for w in ("w1", "w2", "w3"):
        expect(log.locator("[data-type~='worker.killed']", has_text=f"worker {w} killed")).to_have_count(1)
    page.snap("killed")
    expect_readout(page, "redelivered", 3)
    expect(page.get_by_test_id("readout-redelivery-rate")).to_have_attribute("data-value", "3")
    expect(page.get_by_test_id("readout-redelivery-rate")).to_contain_text("3 in the last 600 s")
    spark = page.evaluate("""() => [...document.querySelectorAll('.lw-spark-bar')].map(b => Number(b.dataset.n))""")
    assert sum(spark) == 3, spark
    expect_readout(page, "lost", 0)
    page.snap("burst")
    # the window moves on: the rate falls back to 0 while the total stays 3
    expect(page.get_by_test_id("readout-redelivery-rate")).to_have_attribute("data-value", "0", timeout=LONG)
    expect_readout(page, "redelivered", 3, timeout=1000)
    expect_readout(page, "done", 3)
    page.snap("after-window")


def test_a_reload_mid_run_resumes_the_same_lab_with_the_same_counts(lab_page, api):
    page = lab_page.open_chapter(1)
    page.get_by_test_id("scenario-vt-too-short").click()
    wait_readout_at_least(page, "redelivered", 1)
    # pause with the keyboard shortcut (Space while the lab has focus)
    page.locator("#lab-widget").focus()
    page.keyboard.press("Space")
    expect(page.get_by_test_id("readout-clock")).to_have_attribute("data-paused", "yes", timeout=10_000)
    expect(page.get_by_test_id("clock-pause")).to_have_attribute("aria-pressed", "true")
    lab = lab_of(page)
    assert page.locator("#lab-widget").get_attribute("data-lab-id") == lab["lab_id"]
    for _ in range(4):
        # A paused clock stops pacing, but a worker already past it may still be finishing ffmpeg;
        # compare only across a reload during which the lab's event stream did not move.
        quiet_id = quiet_event_id(api, lab)
        expect(page.locator("#lab-widget")).to_have_attribute("data-last-event", quiet_id, timeout=10_000)
        before = all_readouts(page)
        bars = page.locator("[data-testid^=tl-attempt-]").count()
        assert int(before["readout-redelivered"]) >= 1 and bars >= 2
        page.snap("before-reload")
        page.reload()
        expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
        assert page.locator("#lab-widget").get_attribute("data-lab-id") == lab["lab_id"]  # resumed
        snap = api.snapshot(lab)
        if snap["last_event_id"] != quiet_id:
            continue  # something finished during the reload; try again from the new quiet point
        expect(page.locator("#lab-widget")).to_have_attribute("data-last-event", quiet_id, timeout=10_000)
        expect(page.locator("[data-testid^=tl-attempt-]")).to_have_count(bars, timeout=10_000)
        after = all_readouts(page)
        assert after == before
        c = snap["counts"]
        # the readouts chapter 1 shows (its DLQ comes in chapter 4: its home's `shows`)
        count_of = {
            "redelivered": "redelivered",
            "duplicates": "duplicates_blocked",
            "lost": "lost",
            "done": "done",
            "queued": "queued",
            "dlq": "dlq",
        }
        shown = [k for k in count_of if f"readout-{k}" in after]
        assert shown == ["redelivered", "duplicates", "lost", "done", "queued"]
        assert [after[f"readout-{k}"] for k in shown] == [str(c[count_of[k]]) for k in shown]
        break
    else:
        pytest.fail("the lab never held still across a reload")
    expect(page.get_by_test_id("clock-pause")).to_have_text("Resume")
    page.snap("after-reload")
    page.get_by_test_id("clock-pause").click()
    expect(page.get_by_test_id("readout-clock")).to_have_attribute("data-paused", "no", timeout=10_000)


def test_clock_actions_reach_the_server_in_the_order_asked_even_when_an_answer_is_slow(lab_page, api):
    """Space twice: pause, then resume. The first request is held at the network until the second press has
    had time to go out; the second must wait for it and read the state it left, not race it with a second
    pause (the guided steps' own resume and the pause at a step's moment were such a pair)."""
    page = lab_page.open_chapter(1)
    sent: list[str] = []
    held = []

    def hold_first(route):
        sent.append(json.loads(route.request.post_data or "{}").get("action", ""))
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(re.compile(r".*/api/labs/[^/]+/clock$"), hold_first)
    page.locator("#lab-widget").focus()
    page.keyboard.press("Space")
    wait(lambda: page.wait_for_timeout(20) or held, 10, "the pause never left the page")
    page.keyboard.press("Space")
    page.wait_for_timeout(700)  # the time an eager second request needs to leave
    assert sent == ["pause"], f"a clock action went out before the one asked first was answered: {sent}"
    held[0].continue_()
    expect(page.get_by_test_id("readout-clock")).to_have_attribute("data-paused", "no", timeout=10_000)
    wait(lambda: page.wait_for_timeout(20) or len(sent) == 2, 10, "the second press sent nothing")
    assert sent == ["pause", "resume"]
    assert api.snapshot(lab_of(page))["clock"]["paused"] is False, "the server's clock stayed paused"


def lab_of(page: Page) -> dict:
    saved = json.loads(page.evaluate(f"localStorage.getItem('awl:lab:{preset_of(page)}')"))
    return {"lab_id": saved["id"], "token": saved["token"]}


def quiet_event_id(api, lab: dict, quiet_s: float = 1.5, timeout: float = 30) -> str:
    """The lab's last event id once it has not changed for quiet_s seconds."""
    deadline = time.monotonic() + timeout
    last, since = api.snapshot(lab)["last_event_id"], time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        cur = api.snapshot(lab)["last_event_id"]
        if cur != last:
            last, since = cur, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return cur
    raise AssertionError("the paused lab kept emitting events")


def test_bad_input_shows_the_servers_message_next_to_the_control(lab_page, tmp_path):
    page = lab_page.open_chapter(1)
    vt = page.get_by_test_id("setting-vt_seconds-number")
    vt.fill("5")
    vt.press("Enter")
    expect(page.get_by_test_id("error-vt_seconds")).to_contain_text("must be between 10 and 7200 s")
    expect(vt).to_have_attribute("aria-invalid", "true")
    page.snap("vt-error")
    vt.fill("900")
    vt.press("Enter")
    expect(page.get_by_test_id("error-vt_seconds")).to_be_empty()
    expect(page.get_by_test_id("vt-hint")).to_contain_text("Lease 900 s")
    fake = tmp_path / "holiday.mp4"
    fake.write_text("this is not a video, whatever its name says")
    page.get_by_test_id("upload-file").set_input_files(str(fake))
    expect(page.get_by_test_id("upload-error")).to_contain_text("415")
    expect(page.get_by_test_id("upload-error")).to_contain_text("not an MP4, WebM or AVI")
    page.snap("upload-error")


def test_dropping_a_file_uploads_it_and_shows_the_servers_verdict(lab_page):
    page = lab_page.open_chapter(1)
    page.evaluate("""() => {
        const dt = new DataTransfer();
        dt.items.add(new File(['plain text, not a container'], 'cat.mp4', {type: 'video/mp4'}));
        const zone = document.querySelector('[data-testid=drop-zone]');
        zone.dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));
        zone.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""")
    expect(page.get_by_test_id("upload-error")).to_contain_text("415", timeout=10_000)
    expect(page.get_by_test_id("upload-error")).to_contain_text("filename is not trusted")
    expect(page.get_by_test_id("jobs").locator("li")).to_have_count(0)


def test_speed_is_a_log_slider_and_step_advances_a_paused_clock(lab_page, api):
    page = lab_page.open_chapter(1)
    lab = lab_of(page)
    slider = page.get_by_test_id("speed-slider")
    expect(page.get_by_test_id("speed-value")).to_have_text("200×")
    slider.focus()
    page.keyboard.press("ArrowLeft")  # one notch down the 1-2-5 ladder
    expect(page.get_by_test_id("speed-value")).to_have_text("100×")
    expect(slider).to_have_attribute("aria-valuetext", "100 times")
    api.wait_for(lab, lambda s: s["clock"]["speed"] == 100, timeout=10)
    page.get_by_test_id("clock-pause").click()
    expect(page.get_by_test_id("readout-clock")).to_have_attribute("data-paused", "yes", timeout=10_000)
    t0 = int(page.get_by_test_id("readout-clock").get_attribute("data-value"))
    page.get_by_test_id("clock-step-size").select_option("300")
    page.get_by_test_id("clock-step").click()
    expect(page.get_by_test_id("readout-clock")).to_have_attribute("data-value", str(t0 + 300), timeout=10_000)
    expect(page.get_by_test_id("event-log")).to_contain_text(f"clock stepped to t={t0 + 300:,} s")
    page.snap("stepped")


def test_a_read_only_link_shows_the_same_lab_live_on_another_screen(lab_page, browser, stack):
    page = lab_page.open_chapter(1)
    page.get_by_text("Show this lab on other screens").click()
    url = page.get_by_test_id("share-url").input_value()
    assert "view=" in url and page.locator("#lab-widget").get_attribute("data-lab-id") in url
    viewer_ctx = browser.new_context()  # another machine: no cookie, no stored lab
    try:
        viewer = viewer_ctx.new_page()
        viewer.goto(url)
        expect(viewer.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
        expect(viewer.locator("[data-role=banner]")).to_contain_text("Read-only")
        expect(viewer.get_by_test_id("kill-random")).to_have_count(0)
        expect(viewer.get_by_test_id("scenario-vt-too-short")).to_have_count(0)
        page.get_by_test_id("scenario-fix-vt").click()
        unfold(viewer, "jobs")
        expect(viewer.get_by_test_id("job-row-1")).to_be_visible(timeout=LONG)
        expect(viewer.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
        expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
        assert all_readouts(viewer)["readout-done"] == all_readouts(page)["readout-done"] == "1"
        viewer.get_by_test_id("play-1-240p").click()  # no lab cookie here: fetched with the view token
        expect(viewer.get_by_test_id("player")).to_have_attribute("src", re.compile("^blob:"), timeout=10_000)
        viewer.locator("#lab-widget").screenshot(path=str(ARTIFACTS / "read-only-viewer-widget.png"))
    finally:
        viewer_ctx.close()


def test_reset_starts_a_fresh_lab(lab_page, api):
    page = lab_page.open_chapter(1)
    old = lab_of(page)
    page.get_by_test_id("scenario-vt-too-short").click()
    unfold(page, "jobs")
    expect(page.get_by_test_id("job-row-1")).to_be_visible(timeout=LONG)
    page.get_by_test_id("reset-lab").click()
    # it asks first, in the page: the lab is deleted only on "Reset now"
    expect(page.get_by_test_id("reset-confirm")).to_be_visible()
    assert lab_of(page)["lab_id"] == old["lab_id"]
    page.get_by_test_id("reset-confirm-yes").click()
    expect(page.get_by_test_id("reset-status")).to_have_text("fresh lab started", timeout=30_000)
    new = lab_of(page)
    assert new["lab_id"] != old["lab_id"]
    assert api.call("GET", f"/api/labs/{old['lab_id']}", token=old["token"]).status == 404
    expect(page.get_by_test_id("jobs").locator("li")).to_have_count(0)
    unfold(page, "log")
    expect(page.get_by_test_id("event-log").get_by_test_id("log-item").first).to_be_visible(timeout=LONG)
    expect_readout(page, "redelivered", 0)
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)


def test_chapter_0_times_an_inline_handler_against_enqueue(lab_page):
    page = lab_page.open_chapter(0)
    page.get_by_test_id("inline-submit").click()
    # on the lab clock the inline request is held until the gateway's 60 s (simulated) timeout: a 504
    expect(page.get_by_test_id("compare-inline")).to_contain_text(
        "504 Gateway Timeout after 60 s simulated", timeout=60_000
    )
    expect(page.get_by_test_id("compare-status")).to_contain_text("for nobody")
    page.get_by_test_id("enqueue-submit").click()
    expect(page.get_by_test_id("compare-queue")).to_contain_text("ms until the 202 (job 1)", timeout=20_000)
    expect(page.get_by_test_id("compare-status")).to_contain_text("carries on in a worker")
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG)
    page.snap("compared")


def test_a_job_post_whose_answer_is_lost_is_resent_with_its_key_and_makes_one_job(lab_page, api):
    """The connection drops after the server made the job (the page never sees the 202): the widget resends the
    POST under the same Idempotency-Key and the server replays the job it made. One click, one job."""
    page = lab_page.open_chapter(0)
    seen: list[tuple[str, int, str | None]] = []  # (key, status, Idempotent-Replayed) of each POST

    def drop_the_first_answer(route):
        if route.request.method != "POST":
            return route.continue_()
        res = route.fetch()
        seen.append(
            (route.request.headers.get("idempotency-key", ""), res.status, res.headers.get("idempotent-replayed"))
        )
        if len(seen) == 1:
            return route.abort("connectionreset")
        return route.fulfill(response=res)

    page.route(re.compile(r".*/api/labs/[^/]+/jobs$"), drop_the_first_answer)
    page.get_by_test_id("sample-select").select_option("carphone_pristine")
    page.get_by_test_id("sample-submit").click()
    expect(page.get_by_test_id("upload-status")).to_contain_text("202 Accepted", timeout=20_000)
    expect(page.get_by_test_id("upload-status")).to_contain_text("job 1")
    assert len(seen) == 2 and seen[0][0] and seen[0][0] == seen[1][0], seen
    assert [s[1] for s in seen] == [202, 202] and seen[1][2] == "true", "the resend was a replay"
    assert api.snapshot(lab_of(page))["counts"]["enqueued"] == 1, "a second job was made"


def test_a_run_stopped_by_a_park_is_drawn_stopped_and_its_resend_is_no_redelivery(lab_page, api):
    """A lab parked mid-job stops the job's run with its workers; when the lab resumes, the job is sent again at
    once. The timeline draws the stopped attempt as stopped by the park (not running on, not killed), marks the
    resend as a resume, not a redelivery, and the redelivered readout stays 0: what the counters say."""
    page = lab_page.open_chapter(1, speed=50)  # a 600 s transcode takes 12 real s: parked inside it
    lab = lab_of(page)
    api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"vt_seconds": 1200}, lab["token"])  # no lease runs out
    page.get_by_test_id("sample-submit").click()
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "running", timeout=LONG)
    page.wait_for_function("() => Number(document.querySelector('[data-testid=readout-clock]').dataset.value) >= 150")
    parked = api.call("POST", f"/api/labs/{lab['lab_id']}/park", token=lab["token"])
    assert parked.status == 200 and parked.data["parked"], parked.body
    api.snapshot(lab)  # its owner calls: it resumes
    expect(page.get_by_test_id("tl-attempt-1-1")).to_have_attribute("data-outcome", "parked", timeout=LONG)
    expect(page.get_by_test_id("tl-attempt-1-2")).to_be_visible(timeout=LONG)
    expect(page.get_by_test_id("tl-mark-resume")).to_have_count(1)
    expect(page.get_by_test_id("tl-mark-redeliver")).to_have_count(0)
    expect(page.get_by_test_id("timeline")).to_contain_text("stopped by a park")
    page.snap("resumed")
    expect(page.get_by_test_id("job-row-1")).to_have_attribute("data-state", "done", timeout=LONG * 2)
    expect_readout(page, "redelivered", 0)
    assert api.snapshot(lab)["counts"]["redelivered"] == 0
