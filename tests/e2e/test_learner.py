"""Issue 22 in real Chromium on the real stack: predictions that count (alone and in a room), one input
raced through four variant labs, and the rough edges a keyboard, a phone and a projector find."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import ARTIFACTS

LONG = 90_000
SPEED = 300


@pytest.fixture
def open_page(browser: Browser, stack, api):
    """New pages in their own contexts (own storage), JavaScript errors collected; labs deleted after."""
    errors: list[str] = []
    pages: list[Page] = []

    def make(path: str = "", width: int = 1280, height: int = 900, **ctx) -> Page:
        page = browser.new_context(viewport={"width": width, "height": height}, **ctx).new_page()
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        pages.append(page)
        if path:
            page.goto(stack.url + path)
        return page

    yield make
    for page in pages:
        for key in ("ch1", "ch2", "ch4", "ch5", "ch8"):
            saved = page.evaluate(f"localStorage.getItem('awl:lab:{key}')")
            if saved:
                lab = json.loads(saved)
                api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
        page.context.close()
    assert not errors, f"JavaScript errors: {errors}"


def ready(page: Page) -> Page:
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)
    return page


def shoot(page: Page, name: str, full: bool = False) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"learner-{name}.png"), full_page=full)


# --- predictions -----------------------------------------------------------------------------------


def test_a_prediction_is_committed_before_the_run_and_shown_beside_the_measurement(open_page):
    page = ready(open_page(f"/chapters/1?speed={SPEED}"))
    # the question sits beside its scenario before anything runs
    guess = page.get_by_test_id("predict-guess-vt-too-short")
    expect(guess).to_be_visible()
    guess.fill("99")  # out of range: explained in place, nothing runs
    page.get_by_test_id("scenario-vt-too-short").click()
    expect(page.get_by_test_id("predict-error-vt-too-short")).to_contain_text("from 1 to 20")
    expect(guess).to_have_attribute("aria-invalid", "true")
    expect(guess).to_be_focused()
    expect(page.get_by_test_id("job-row-1")).to_have_count(0)
    guess.fill("1")
    page.get_by_test_id("scenario-vt-too-short").click()
    expect(page.get_by_test_id("predict-pending")).to_contain_text("Your guess: 1 attempt.")
    expect(guess).to_be_disabled()  # committed: locked until the answer is in
    result = page.get_by_test_id("predict-result")
    expect(result).to_be_visible(timeout=LONG)
    measured = int(page.get_by_test_id("predict-measured").inner_text().split()[0])
    assert measured >= 2  # a 300 s lease on a 600 s job: the lease runs out mid-job, the job is delivered again
    expect(result).to_have_attribute("data-right", "no")
    expect(page.get_by_test_id("predict-why")).to_contain_text("The lease (300 s) ran out before the job (600 s)")
    # the measurement is the lab's: the job's own attempts
    row = page.get_by_test_id("job-row-1")
    expect(row).to_have_attribute("data-state", re.compile("done|dlq"))
    stored = json.loads(page.evaluate("localStorage.getItem('awl:predictions')"))
    assert stored[-1]["id"] == "ch1-vt-too-short" and stored[-1]["guess"] == 1 and stored[-1]["measured"] == measured
    expect(page.get_by_test_id("predict-record")).to_contain_text("0 of 1 right")
    page.get_by_test_id("predict").screenshot(path=str(ARTIFACTS / "learner-prediction.png"))


def test_a_prediction_round_in_a_room_shows_the_class_spread_beside_the_measured_answer(open_page, stack):
    teacher = open_page("/rooms")
    teacher.get_by_test_id("room-start").select_option("preset:ch1")
    teacher.get_by_test_id("room-speed").fill(str(SPEED))
    teacher.get_by_test_id("room-create").click()
    teacher.wait_for_url(re.compile(r"/rooms/[A-Z2-9]+$"), timeout=30_000)
    code = teacher.url.rsplit("/", 1)[1]
    expect(teacher.get_by_test_id("room-predict")).to_be_visible(timeout=10_000)
    teacher.get_by_test_id("room-ask-q").select_option("ch1-vt-too-short")
    teacher.get_by_test_id("room-ask").click()
    expect(teacher.get_by_test_id("room-spread")).to_contain_text("0 guesses")

    # two students watch the instructor's lab and guess
    students = []
    for guess in ("1", "2"):
        s = open_page(f"/join/{code}")
        s.get_by_test_id("join-watch").click()
        ready(s)
        field = s.get_by_test_id("predict-guess")
        expect(field).to_be_visible(timeout=10_000)
        field.fill(guess)
        s.get_by_test_id("predict-commit").click()
        expect(s.get_by_test_id("predict-pending")).to_contain_text(f"Your guess: {guess} attempt")
        students.append(s)
    expect(teacher.get_by_test_id("room-spread")).to_contain_text("2 guesses", timeout=10_000)
    expect(teacher.get_by_test_id("room-spread-1").locator("td.num")).to_have_text("1")
    expect(teacher.get_by_test_id("room-spread-2").locator("td.num")).to_have_text("1")
    shoot(teacher, "room-spread-open", full=True)

    # the instructor runs the scenario in their lab: its measurement closes the round everywhere
    with teacher.expect_popup() as popup:  # the lab opens beside the dashboard, which stays in its tab
        teacher.get_by_test_id("open-lab").click()
    teacher = popup.value
    ready(teacher)
    expect(teacher.get_by_test_id("predict-class")).to_contain_text("The class is predicting", timeout=10_000)
    teacher.get_by_test_id("predict-guess-vt-too-short").fill("2")
    teacher.get_by_test_id("scenario-vt-too-short").click()
    expect(teacher.get_by_test_id("predict-result")).to_be_visible(timeout=LONG)
    measured = int(teacher.get_by_test_id("predict-measured").inner_text().split()[0])
    for s in students:
        expect(s.get_by_test_id("predict-measured")).to_contain_text(str(measured), timeout=15_000)
    expect(students[0].get_by_test_id("predict-why")).to_contain_text("lease")
    shoot(students[1], "room-student-result")
    teacher.goto(f"{stack.url}/rooms/{code}")
    spread = teacher.get_by_test_id("room-spread")
    expect(spread).to_contain_text(f"the lab measured {measured} attempt", timeout=10_000)
    expect(teacher.locator('[data-measured="yes"]')).to_contain_text("← measured")
    teacher.get_by_test_id("room-predict").screenshot(path=str(ARTIFACTS / "learner-room-spread.png"))


# --- races ----------------------------------------------------------------------------------------


def test_a_four_way_race_runs_one_input_through_four_labs_side_by_side(open_page, stack, api):
    page = open_page("/races")
    page.get_by_test_id("race-new-retry-policies").click()
    page.wait_for_url(re.compile(r"/race/[\w-]{16}$"), timeout=60_000)
    expect(page.locator(".race-grid .lw")).to_have_count(4)
    for side in "abcd":  # every lab held at exactly t = 0 until the start
        expect(page.get_by_test_id(f"race-clock-{side}")).to_have_text("t = 0 s (held)", timeout=30_000)
    start = page.get_by_test_id("race-start")
    expect(start).to_be_enabled(timeout=60_000)
    link = page.get_by_test_id("race-link").input_value()

    # the link, opened elsewhere, watches the same race read-only (no start button)
    viewer = open_page()
    viewer.goto(link + "?present=1")
    expect(viewer.get_by_test_id("race-start")).to_be_hidden()
    expect(viewer.locator("html")).to_have_class(re.compile(r"\bpresent\b"))

    start.click()
    expect(page.get_by_test_id("race")).to_have_attribute("data-state", "running", timeout=30_000)
    rid = link.rsplit("/", 1)[1]
    status = api.call("GET", f"/api/races/{rid}").json()
    policies = [lab["settings"]["retry_policy"] for lab in status["labs"]]
    assert policies == ["none", "fixed", "exponential", "full_jitter"]
    for lab in status["labs"]:  # the same input everywhere: six jobs and one outage, at the same instant
        events = api.call("GET", f"/api/labs/{lab['lab_id']}/events?after=0", token=lab["view_token"]).json()["events"]
        assert sum(e["type"] == "job.enqueued" for e in events) == 6
        faults = [e for e in events if e["type"] == "fault.started"]
        assert len(faults) == 1 and faults[0]["t_sim"] == 0
        assert {e["t_sim"] for e in events if e["type"] == "job.enqueued"} == {0}
    # the difference shows, marked in words: lab A never retries, the others do during the outage
    differs = '.race-table td:is([data-diff="up"], [data-diff="down"])'
    expect(page.locator(differs).first).to_contain_text(re.compile(r"[▲▼] [+−]\d+ vs A"), timeout=LONG)
    expect(viewer.locator(differs).first).to_be_visible(timeout=LONG)
    expect(page.get_by_test_id("race-retries_scheduled-a")).to_have_text("0")
    for side in "abcd":
        expect(viewer.locator(f"#run-{side}")).to_have_attribute("data-state", "ready")
    shoot(page, "race-four-way")
    shoot(viewer, "race-four-way-projector")
    assert api.call("POST", f"/api/races/{rid}/start", {}, token="wrong").status == 403


# --- the rough edges --------------------------------------------------------------------------------


def test_the_what_if_form_keeps_focus_and_explains_an_invalid_value_in_place(open_page):
    page = open_page("/chapters/2")
    field = page.locator("#mi-arrival_rate")
    field.focus()
    page.evaluate("window.settled = 0; document.body.addEventListener('htmx:afterSettle', () => window.settled++)")
    field.press("ArrowUp")  # one step: htmx recomputes the chapter and swaps its body
    expect(page).to_have_url(re.compile(r"arrival_rate="), timeout=10_000)
    page.wait_for_function("() => window.settled > 0", timeout=10_000)  # the swap has happened
    assert page.evaluate("document.activeElement.id") == "mi-arrival_rate"  # focus survived the swap
    field = page.locator("#mi-arrival_rate")
    field.fill("999999")
    err = page.get_by_test_id("err-arrival_rate")
    expect(err).to_contain_text("above the largest")
    expect(field).to_have_attribute("aria-invalid", "true")
    assert "err-arrival_rate" in field.get_attribute("aria-describedby")
    assert page.evaluate("document.activeElement.id") == "mi-arrival_rate"
    field.fill("120")
    expect(err).to_be_empty()
    expect(field).not_to_have_attribute("aria-invalid", "true")


def test_the_help_dialog_is_modal_and_gives_focus_back(open_page):
    page = ready(open_page(f"/chapters/1?speed={SPEED}"))
    opener = page.get_by_test_id("scenario-vt-too-short")
    opener.focus()
    page.keyboard.press("?")
    dialog = page.get_by_test_id("shortcut-help")
    expect(dialog).to_be_visible()
    assert page.evaluate("document.querySelector('[data-testid=shortcut-help]').matches(':modal')")
    page.keyboard.press("Tab")  # focus stays inside a modal dialog
    assert page.evaluate("document.activeElement.closest('dialog') !== null")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(opener).to_be_focused()


def test_worker_card_names_start_with_their_visible_text(open_page):
    page = ready(open_page(f"/chapters/1?speed={SPEED}"))
    card = page.get_by_test_id("worker-w1")
    expect(card).to_have_attribute("aria-label", re.compile(r"^w1 pid \d+ idle"))
    visible = " ".join(card.inner_text().split())
    name = card.get_attribute("aria-label")
    words = [w for w in visible.replace("\n", " ").split() if w != "inspect"]
    assert name.startswith(" ".join(words)), (name, visible)


def test_phone_tables_scroll_in_their_own_box_and_the_queue_stays_beside_the_controls(open_page):
    page = ready(open_page(f"/chapters/2?speed={SPEED}", width=390, height=844))
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # the page never scrolls sideways
    boxes = page.locator(".prose .table-scroll")
    assert boxes.count() >= 1
    assert page.evaluate("""() => [...document.querySelectorAll('.prose .table-scroll')]
        .some((b) => b.scrollWidth > b.clientWidth && b.tabIndex === 0 && b.getAttribute('role') === 'region')""")
    page.goto(page.url.replace("/chapters/2", "/chapters/1"))
    ready(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    button = page.locator("#lw-sample")
    button.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, 150)")
    queue = page.get_by_test_id("queue").locator("xpath=..")
    in_view = page.evaluate(
        """([a, b]) => [a, b].every((el) => {
        const r = el.getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight && r.bottom > 0; })""",
        [button.element_handle(), queue.element_handle()],
    )
    assert in_view, "the sample clip control and the queue panel are on screen together"
    shoot(page, "phone-controls-and-queue")


def test_dark_theme_follows_the_system_the_toggle_pins_one_and_the_projector_is_legible_in_both(open_page):
    page = ready(open_page(f"/chapters/1?speed={SPEED}", color_scheme="dark"))
    bg = lambda sel: page.evaluate(f"getComputedStyle(document.querySelector('{sel}')).backgroundColor")  # noqa: E731
    assert bg("body") == "rgb(19, 21, 25)"
    toggle = page.get_by_test_id("theme-toggle")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "false")
    assert bg("body") == "rgb(251, 250, 247)"
    page.reload()
    ready(page)
    assert bg("body") == "rgb(251, 250, 247)"  # the pin is kept
    page.get_by_test_id("theme-toggle").click()  # back to the system's dark: the pin is dropped
    assert page.evaluate("localStorage.getItem('awl:theme')") is None
    page.get_by_test_id("present-toggle").click()
    lw = "getComputedStyle(document.querySelector('#lab-widget'))"
    assert page.evaluate(f"[{lw}.color, {lw}.backgroundColor]") == ["rgb(255, 255, 255)", "rgb(0, 0, 0)"]
    shoot(page, "projector-dark")
    page.get_by_test_id("present-theme-toggle").click()  # the projector covers the header: its own switch
    expect(page.get_by_test_id("present-theme-toggle")).to_have_attribute("aria-pressed", "false")
    assert page.evaluate(f"[{lw}.color, {lw}.backgroundColor]") == ["rgb(0, 0, 0)", "rgb(255, 255, 255)"]


def test_a_kill_is_announced_at_once_not_held_for_the_batch(open_page, api):
    page = ready(open_page("/chapters/1?speed=50"))
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch1')"))
    page.evaluate("""() => { window.heard = []; const el = document.querySelector('[data-testid=announcer-urgent]');
        new MutationObserver(() => window.heard.push([performance.now(), el.textContent]))
          .observe(el, {childList: true, characterData: true, subtree: true});
        // the frame after the log first shows the kill: has the urgent region already said it?
        window.sameFrame = null; let seen = false; const log = document.querySelector('[data-testid=event-log]');
        new MutationObserver(() => {
          if (seen || !log.querySelector('[data-type~="worker.killed"]')) return;
          seen = true;
          requestAnimationFrame(() => { window.sameFrame = /killed/.test(el.textContent); });
        }).observe(log, {childList: true, subtree: true}); }""")
    assert (
        api.call(
            "POST", f"/api/labs/{lab['id']}/jobs", {"sample": "bigbuckbunny", "duration_s": 600}, lab["token"]
        ).status
        == 202
    )
    expect(
        page.get_by_test_id("worker-w1").or_(page.get_by_test_id("worker-w2")).filter(has_text="busy").first
    ).to_be_visible(timeout=30_000)
    assert api.call("POST", f"/api/labs/{lab['id']}/workers/random/kill", {}, lab["token"]).status == 200
    page.wait_for_function("window.heard.some(([, t]) => /killed/.test(t))", timeout=15_000)
    # behaviour, not a stopwatch: said by the frame the log shows it, not held for the polite batch
    page.wait_for_function("typeof window.sameFrame === 'boolean'", timeout=15_000)
    assert page.evaluate("window.sameFrame") is True, "the kill waited for the next batch"
    expect(page.get_by_test_id("announcer-urgent")).to_have_attribute("aria-live", "assertive")
