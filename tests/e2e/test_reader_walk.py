"""Issue 27's reader: one tab walks every chapter, a race and back, on a stack started with the
default limits (4 running labs per client, 20 lab openings a minute, 128 processes, parking after 60 s).
Every lab goes live and none says "could not start": labs the reader left are parked to make room, and
the first chapter's lab, opened again, resumes with its history."""

from __future__ import annotations

import re

import pytest
import redis
from playwright.sync_api import Browser, Page, expect

from core import parking, slots
from runtime.harness.stack import UNLIMITED, Stack
from tests.conftest import ARTIFACTS


@pytest.fixture
def default_stack(redis_server, tmp_path_factory):
    """A stack of each test's own (a reader's lab openings per minute are limited too) with every limit at
    its default ("" reads as the default in core.config), on its own database of the session's
    server."""
    db = redis_server.url.rsplit("/", 1)[0] + "/8"
    redis.Redis.from_url(db).flushdb()
    defaults = {name: "" for name in (*UNLIMITED, "MAX_LABS", "LAB_IDLE_TTL")}
    with Stack("reader", root=tmp_path_factory.mktemp("reader"), redis_url=db, env=defaults) as s:
        yield s


def live(page: Page, widget: str = "#lab-widget") -> None:
    """The widget opened its lab, its socket is live, and the lab's events reached its log."""
    root = page.locator(widget)
    expect(root).to_have_attribute("data-state", "ready", timeout=60_000)
    expect(root.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=30_000)
    expect(root.get_by_test_id("log-item").first).to_be_attached(timeout=30_000)
    expect(root).not_to_contain_text("could not start")


def test_one_tab_walks_every_chapter_a_race_and_back_without_a_lab_that_cannot_start(browser: Browser, default_stack):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
    base = default_stack.url
    r = default_stack.redis_client()
    first_lab, first_log = "", 0
    widget = page.locator("#lab-widget")
    log = widget.get_by_test_id("log-item")
    for ch in range(9):
        page.goto(f"{base}/chapters/{ch}")
        live(page)
        if ch == 0:
            first_lab, first_log = widget.get_attribute("data-lab-id"), log.count()
    # a race of four labs: four more running labs for one reader, each one counted
    page.goto(f"{base}/races")
    page.get_by_test_id("race-new-retry-policies").click()
    page.wait_for_url(re.compile(r"/race/[\w-]{16}$"), timeout=60_000)
    expect(page.locator(".race-grid .lw")).to_have_count(4)
    for i in range(4):
        live(page, f".race-grid .lw >> nth={i}")
    page.goto(f"{base}/chapters/0")
    live(page)
    assert widget.get_attribute("data-lab-id") == first_lab  # the same lab, not a fresh one
    assert not r.sismember(parking.PARKED, first_lab)
    # its earlier history, and what happened to it meanwhile, in plain words
    expect(log.filter(has_text="lab parked")).not_to_have_count(0)
    expect(log.filter(has_text="lab resumed")).not_to_have_count(0)
    assert log.count() > first_log
    page.goto(f"{base}/chapters/1")
    live(page)
    # thirteen labs opened (nine chapters, a race of four), and this one client runs at most its cap
    assert r.scard("labs") == 13 and len(slots.entries(r)) <= 4 and r.scard(parking.PARKED) >= 9
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "reader-walk-ch0-again.png"), full_page=False)
    assert not errors, f"JavaScript errors: {errors}"
    page.context.close()


def test_at_the_cap_with_every_lab_on_a_page_the_widget_offers_to_park_or_close_the_oldest(
    browser: Browser, default_stack
):
    """Four tabs keep four labs watched; a fifth chapter says why it cannot open and offers the way out in
    place: parking the oldest lab opens this one, live."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    base = default_stack.url
    tabs = []
    for ch in range(4):
        tab = context.new_page()
        tab.goto(f"{base}/chapters/{ch}")
        live(tab)
        tabs.append(tab)
    oldest = tabs[0].locator("#lab-widget").get_attribute("data-lab-id")
    page = context.new_page()
    page.goto(f"{base}/chapters/4")
    banner = page.locator("#lab-widget [data-role='banner']")
    expect(banner).to_contain_text("You already run 4 labs", timeout=30_000)
    expect(banner).not_to_contain_text("could not start")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "reader-cap-offer.png"), full_page=False)
    page.get_by_test_id("park-oldest").click()
    live(page)
    r = default_stack.redis_client()
    assert r.sismember(parking.PARKED, oldest)
    expect(
        tabs[0].locator("#lab-widget").get_by_test_id("log-item").filter(has_text="you parked it")
    ).not_to_have_count(0)
    context.close()


def test_at_the_cap_on_labs_kept_the_widget_offers_to_close_the_oldest(
    browser: Browser, redis_server, tmp_path_factory
):
    """A reader who keeps MAX_CLIENT_LIVE_LABS labs (parked ones too): the next chapter says so and offers to close
    the oldest in place; closing it opens this one, live, and the oldest is gone with its keys."""
    db = redis_server.url.rsplit("/", 1)[0] + "/8"
    redis.Redis.from_url(db).flushdb()
    env = {**{name: "" for name in (*UNLIMITED, "MAX_LABS", "LAB_IDLE_TTL")}, "MAX_CLIENT_LIVE_LABS": "2"}
    with Stack("kept", root=tmp_path_factory.mktemp("kept"), redis_url=db, env=env) as stack:
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.goto(f"{stack.url}/chapters/0")
        live(page)
        oldest = page.locator("#lab-widget").get_attribute("data-lab-id")
        page.goto(f"{stack.url}/chapters/1")
        live(page)
        page.goto(f"{stack.url}/chapters/2")
        banner = page.locator("#lab-widget [data-role='banner']")
        expect(banner).to_contain_text("You keep 2 labs on this server", timeout=30_000)
        expect(page.get_by_test_id("park-oldest")).to_have_count(0)  # parking would keep it: only closing helps
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "reader-kept-offer.png"), full_page=False)
        page.get_by_test_id("close-oldest").click()
        live(page)
        r = stack.redis_client()
        assert not r.sismember("labs", oldest) and r.hlen(slots.OWNERS) == 2
        page.context.close()
