"""Classroom mode in real Chromium on the real stack: an instructor opens a room, a second browser
joins by code and watches the instructor's lab live; a third follows along in a copy; presenter
mode, scenario links and the export buttons work from the page."""

from __future__ import annotations

import csv
import io
import json
import re
from urllib.parse import parse_qsl, urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

import chapters
from app.routes.rooms import ALPHABET, CODE_LENGTH, pretty
from chapters import settings_for
from tests.conftest import ARTIFACTS
from tests.helpers import unfold

ROOM_URL = re.compile(rf"/rooms/[{ALPHABET}]{{{CODE_LENGTH}}}$")
"""A room's page: its join code as app/routes/rooms.py makes them (CODE_LENGTH letters of ALPHABET)."""


LONG = 45_000


@pytest.fixture
def watch_errors():
    """Collect JavaScript errors from every page handed to it; fail the test if there were any."""
    errors: list[str] = []

    def watch(page: Page) -> Page:
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        return page

    yield watch
    assert not errors, f"JavaScript errors: {errors}"


def saved_lab(page: Page, preset: str) -> dict:
    return json.loads(page.evaluate(f"localStorage.getItem('awl:lab:{preset}')"))


def widget_ready(page: Page) -> None:
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)


def create_room(page: Page, base: str, start: str = "preset:ch1", speed: int = 200) -> str:
    page.goto(f"{base}/rooms")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "rooms-start.png"), full_page=True)
    page.get_by_test_id("room-start").select_option(start)
    page.get_by_test_id("room-speed").fill(str(speed))
    page.get_by_test_id("room-create").click()
    page.wait_for_url(ROOM_URL, timeout=30_000)
    return page.url.rsplit("/", 1)[1]


def test_a_student_joins_by_code_and_watches_the_instructors_lab_live(browser: Browser, stack, api, watch_errors):
    teacher = watch_errors(browser.new_context(viewport={"width": 1280, "height": 900}).new_page())
    code = create_room(teacher, stack.url)
    expect(teacher.get_by_test_id("room-code")).to_have_text(pretty(code))
    expect(teacher.locator(".rooms")).to_have_attribute("data-state", "ready", timeout=10_000)
    lab = saved_lab(teacher, "ch1")
    api.created.append({"lab_id": lab["id"], "token": lab["token"]})
    qr = teacher.get_by_test_id("room-qr")
    expect(qr).to_be_visible()
    assert teacher.evaluate("(img) => img.complete && img.naturalWidth > 0", qr.element_handle())
    ARTIFACTS.mkdir(exist_ok=True)
    teacher.screenshot(path=str(ARTIFACTS / "rooms-dashboard.png"), full_page=True)
    qr.screenshot(path=str(ARTIFACTS / "rooms-qr.png"))

    # a second browser (no shared storage) types the code the way it reads it off the screen
    student = watch_errors(browser.new_context(viewport={"width": 1100, "height": 900}).new_page())
    student.goto(f"{stack.url}/rooms")
    student.get_by_test_id("join-code").fill(pretty(code).lower())
    student.get_by_test_id("join-submit").click()
    expect(student.get_by_test_id("join-room-code")).to_have_text(pretty(code))
    student.screenshot(path=str(ARTIFACTS / "rooms-join.png"), full_page=True)
    student.get_by_test_id("join-watch").click()
    widget_ready(student)
    assert student.locator("#lab-widget").get_attribute("data-lab-id") == lab["id"]
    expect(student.locator("#lab-widget")).to_have_class(re.compile(r"\blw-viewer\b"))
    expect(student.get_by_test_id("upload-file")).to_have_count(0)  # a viewer gets no mutate controls
    expect(student.get_by_test_id("room-from-lab")).to_be_hidden()
    expect(student.get_by_test_id("room-badge")).to_have_attribute("data-role-in-room", "viewer", timeout=10_000)
    # the chip writes the code as the projector and the join page do (the server's one formatter)
    expect(student.get_by_test_id("room-badge")).to_have_text(f"Room {pretty(code)}")

    # the dashboard counts the viewer
    expect(teacher.get_by_test_id("room-viewers")).to_have_attribute("data-value", "1", timeout=15_000)

    # the instructor presents their lab and drives it with the existing shortcuts
    teacher.get_by_test_id("open-present").click()
    widget_ready(teacher)
    expect(teacher.locator("html")).to_have_class(re.compile(r"\bpresent\b"))
    assert teacher.locator("#lab-widget").get_attribute("data-lab-id") == lab["id"]
    expect(teacher.get_by_test_id("room-badge")).to_have_attribute("data-role-in-room", "instructor", timeout=10_000)
    teacher.locator("body").press("u")  # U: enqueue the chosen sample clip
    expect(teacher.get_by_test_id("event-log")).to_contain_text("job 1 enqueued", timeout=LONG)
    # ... and the student's screen shows the same events, live, over its own socket
    expect(student.get_by_test_id("event-log")).to_contain_text("job 1 enqueued", timeout=LONG)
    expect(student.get_by_test_id("event-log")).to_contain_text("claimed job 1", timeout=LONG)
    box = teacher.locator("#lab-widget").bounding_box()
    assert box["width"] >= 1270 and box["height"] >= 890, box  # the widget fills the window
    teacher.screenshot(path=str(ARTIFACTS / "rooms-presenter.png"))
    student.screenshot(path=str(ARTIFACTS / "rooms-viewer.png"))

    # the presenter link opened in another tab (the same browser) shows the same lab, not a new idle one
    # the room never sees (issue 38)
    tab = watch_errors(teacher.context.new_page())
    tab.goto(teacher.url)
    widget_ready(tab)
    assert tab.locator("#lab-widget").get_attribute("data-lab-id") == lab["id"]
    expect(tab.get_by_test_id("room-badge")).to_have_attribute("data-role-in-room", "instructor", timeout=10_000)
    tab.close()

    teacher.get_by_test_id("present-toggle").click()
    expect(teacher.locator("html")).not_to_have_class(re.compile(r"\bpresent\b"))
    assert "present=1" not in teacher.url

    # the hand-off link moves the dashboard and the lab to another computer (a fresh browser context)
    teacher.goto(f"{stack.url}/rooms/{code}")
    handoff = teacher.get_by_test_id("room-handoff").input_value()
    assert "#instructor=" in handoff and "lab_token=" in handoff
    other = watch_errors(browser.new_context().new_page())
    other.goto(handoff)
    expect(other.locator(".rooms")).to_have_attribute("data-state", "ready", timeout=10_000)
    assert "#" not in other.url  # the tokens leave the address bar at once
    with other.expect_popup() as popup:  # the lab opens beside the dashboard, which stays in its tab
        other.get_by_test_id("open-lab").click()
    dashboard, other = other, watch_errors(popup.value)
    widget_ready(other)
    assert other.locator("#lab-widget").get_attribute("data-lab-id") == lab["id"]
    expect(other.get_by_test_id("upload-file")).to_have_count(1)  # the instructor's own controls
    assert dashboard.url.endswith(f"/rooms/{code}")
    other.context.close()
    teacher.context.close()
    student.context.close()


def test_follow_along_copies_the_lab_and_shows_on_the_dashboard(browser: Browser, stack, api, watch_errors):
    teacher = watch_errors(browser.new_context().new_page())
    code = create_room(teacher, stack.url, start="scenario:vt-too-short")
    lab = saved_lab(teacher, "ch1")
    api.created.append({"lab_id": lab["id"], "token": lab["token"]})
    # scanned from the QR code on a phone
    student = watch_errors(
        browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True).new_page()
    )
    student.goto(f"{stack.url}/join/{code}")
    student.screenshot(path=str(ARTIFACTS / "rooms-join-phone.png"), full_page=True)
    student.get_by_test_id("follow-name").fill("Ada")
    student.get_by_test_id("join-follow").click()
    widget_ready(student)
    mine = saved_lab(student, "ch1")
    api.created.append({"lab_id": mine["id"], "token": mine["token"]})
    assert mine["id"] != lab["id"]
    expect(student.get_by_test_id("upload-file")).to_have_count(1)  # their own lab: full controls
    expect(student.get_by_test_id("room-badge")).to_have_attribute("data-role-in-room", "student", timeout=10_000)
    expect(student.get_by_test_id("url-scenario")).to_have_attribute("data-scenario", "vt-too-short")
    theirs = api.call("GET", f"/api/labs/{lab['id']}", token=lab["token"]).json()["settings"]
    own = api.call("GET", f"/api/labs/{mine['id']}", token=mine["token"]).json()["settings"]
    assert own == theirs and own["vt_seconds"] == 300
    row = teacher.get_by_test_id(f"room-row-{mine['id']}")
    expect(row).to_contain_text("Ada", timeout=10_000)
    expect(row).to_have_attribute("data-state", "live")
    student.locator("#lab-widget").press("u")  # U: enqueue the chosen sample clip
    # VT too short: the student's job is redelivered while still running, and the dashboard shows it
    expect(row.locator('[data-count="redelivered"]')).to_have_attribute(
        "data-value", re.compile(r"^[1-9]"), timeout=LONG
    )
    teacher.screenshot(path=str(ARTIFACTS / "rooms-dashboard-student.png"), full_page=True)
    student.screenshot(path=str(ARTIFACTS / "rooms-follow-phone.png"))
    # the instructor opens the student's run read-only from the dashboard (to put it on the projector)
    row.get_by_role("link", name="Ada").click()
    widget_ready(teacher)
    assert teacher.locator("#lab-widget").get_attribute("data-lab-id") == mine["id"]
    expect(teacher.locator("#lab-widget")).to_have_class(re.compile(r"\blw-viewer\b"))
    teacher.context.close()
    student.context.close()


def test_a_scenario_link_applies_every_setting_and_runs(page: Page, stack, api, watch_errors):
    watch_errors(page)
    page.goto(f"{stack.url}/")
    expect(page.get_by_test_id("scenario-list")).to_contain_text("Retry storm")
    page.goto(f"{stack.url}/s/poison-pill")
    widget_ready(page)
    expect(page.locator("#lab-widget")).to_have_attribute("data-url-settings", "applied", timeout=10_000)
    lab = saved_lab(page, "ch4")
    api.created.append({"lab_id": lab["id"], "token": lab["token"]})
    got = api.call("GET", f"/api/labs/{lab['id']}", token=lab["token"]).json()["settings"]
    want = chapters.SCENARIOS["poison-pill"]["settings"]
    assert {k: got[k] for k in want} == want
    changed = [e for e in api.events({"lab_id": lab["id"], "token": lab["token"]}) if e["type"] == "settings.changed"]
    page.reload()  # the same link reloaded resumes the lab and does not send the settings again
    widget_ready(page)
    expect(page.locator("#lab-widget")).to_have_attribute("data-url-settings", "applied", timeout=10_000)
    assert saved_lab(page, "ch4")["id"] == lab["id"]
    again = [e for e in api.events({"lab_id": lab["id"], "token": lab["token"]}) if e["type"] == "settings.changed"]
    assert again == changed
    # the set-up link names every setting that differs from the chapter's preset, and none that the preset
    # already has (read from the chapter homes, chapters/chN/, so a retuned preset keeps this honest)
    preset = settings_for(chapters.SCENARIOS["poison-pill"]["preset"])
    differs = {k: _url_value(v) for k, v in want.items() if preset[k] != v}
    same = [k for k in want if preset[k] == want[k]]
    assert differs, "the scenario should change at least one of its preset's settings"
    in_any_order = "".join(rf"(?=.*[?&]{re.escape(k)}={re.escape(v)}(&|$))" for k, v in differs.items())
    expect(page.get_by_test_id("setup-url")).to_have_value(re.compile(rf"\?scenario=poison-pill{in_any_order}"))
    query = dict(parse_qsl(urlsplit(page.get_by_test_id("setup-url").input_value()).query))
    assert query == {"scenario": "poison-pill", **differs}, (query, same)
    page.get_by_test_id("url-scenario-run").click()
    expect(page.get_by_test_id("event-log")).to_contain_text("fault: poison", timeout=LONG)
    page.locator("#lab-widget").screenshot(path=str(ARTIFACTS / "rooms-scenario.png"))


def _url_value(v) -> str:
    """A setting as the set-up link writes it (JavaScript's String(value))."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def test_export_buttons_download_the_events_and_counts(page: Page, stack, api, watch_errors):
    watch_errors(page)
    page.goto(f"{stack.url}/chapters/1?speed=200")
    widget_ready(page)
    lab = saved_lab(page, "ch1")
    api.created.append({"lab_id": lab["id"], "token": lab["token"]})
    page.locator("#lab-widget").press("u")
    expect(page.get_by_test_id("event-log")).to_contain_text("job 1 enqueued", timeout=LONG)
    unfold(page, "export")
    with page.expect_download() as dl:
        page.get_by_test_id("export-jsonl").click()
    lines = [json.loads(x) for x in open(dl.value.path()).read().splitlines()]
    assert lines and lines[0]["type"] and any(e["type"] == "job.enqueued" for e in lines)
    with page.expect_download() as dl:
        page.get_by_test_id("export-csv").click()
    assert dl.value.suggested_filename == f"lab-{lab['id']}-counts.csv"
    rows = dict(list(csv.reader(io.StringIO(open(dl.value.path()).read())))[1:])
    assert int(rows["enqueued"]) == 1
    expect(page.get_by_test_id("export-status")).to_contain_text("saved the counts")

    # the lab as it is now (its job, its settings) becomes a classroom room
    page.get_by_test_id("room-from-lab").click()
    page.wait_for_url(ROOM_URL, timeout=30_000)
    expect(page.locator(".rooms")).to_have_attribute("data-state", "ready", timeout=10_000)
    code = page.url.rsplit("/", 1)[1]
    assert api.call("GET", f"/api/rooms/{code}").json()["lab_id"] == lab["id"]
    with page.expect_popup() as popup:  # the lab opens beside the dashboard
        page.get_by_test_id("open-lab").click()
    page = watch_errors(popup.value)
    widget_ready(page)
    assert page.locator("#lab-widget").get_attribute("data-lab-id") == lab["id"]
    expect(page.get_by_test_id("room-from-lab")).to_be_hidden()  # already in a room


def test_presenter_mode_from_the_url_is_large_high_contrast_and_still_motionless(page: Page, stack, api, watch_errors):
    watch_errors(page)
    page.emulate_media(reduced_motion="reduce")
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(f"{stack.url}/chapters/1?speed=200&present=1")
    widget_ready(page)
    lab = saved_lab(page, "ch1")
    api.created.append({"lab_id": lab["id"], "token": lab["token"]})
    expect(page.locator("html")).to_have_class(re.compile(r"\bpresent\b"))
    expect(page.get_by_test_id("present-toggle")).to_have_attribute("aria-pressed", "true")
    style = page.evaluate("""() => {
      const w = getComputedStyle(document.getElementById('lab-widget'));
      const tile = getComputedStyle(document.querySelector('.lw-ro'));
      return {pos: w.position, font: parseFloat(w.fontSize), color: w.color, bg: w.backgroundColor,
              transition: tile.transitionDuration};
    }""")
    assert style["pos"] == "fixed" and style["font"] >= 20
    assert style["color"] == "rgb(0, 0, 0)" and style["bg"] == "rgb(255, 255, 255)"  # black on white
    assert style["transition"] == "0s"  # prefers-reduced-motion still wins in presenter mode
    page.locator("body").press("?")  # the widget's own shortcuts work on top of presenter mode
    expect(page.get_by_test_id("shortcut-help")).to_be_visible()
    page.locator("body").press("Escape")
    expect(page.get_by_test_id("shortcut-help")).to_be_hidden()
    page.locator("body").press("u")
    expect(page.get_by_test_id("event-log")).to_contain_text("job 1 enqueued", timeout=LONG)
    page.screenshot(path=str(ARTIFACTS / "rooms-presenter-url.png"))
