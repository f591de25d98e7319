"""The lab's first screen (issue 28): what a reader sees at load without scrolling, what is folded and
loaded only on first use, what a chapter shows of later chapters (nothing), shortcuts that act only where
the lab is, a reset that asks, the projector at 1080p and a phone with nothing pinned over the cards.

Real Chromium on the real stack; positions are read from the rendered page (getBoundingClientRect).
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import ARTIFACTS
from tests.helpers import page_lab, unfold

LONG = 45_000
SPEED = 200
LAZY = ("history.", "scrubber.", "branch.", "inspect.", "job-detail.")  # widget/index.js LATER
# words chapter 0's lab must not show: chapter 1 introduces leases and redelivery, chapter 4 the DLQ
LATER_TERMS = re.compile(r"redeliver|lease|dlq|dead.letter|duplicate|storage|lost", re.IGNORECASE)

BOX = """(sel) => { const e = document.querySelector(sel); if (!e) return null;
  const b = e.getBoundingClientRect(); return {top: b.top, bottom: b.bottom, h: b.height, w: b.width}; }"""


def open_lab(page: Page, base: str, path: str, job: bool = False) -> None:
    """Open a chapter's lab at `path`; with `job`, send the sample clip and wait until it is in flight."""
    page.goto(f"{base}{path}")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)
    if job:
        page.get_by_test_id("sample-submit").click()
        expect(page.locator("#lab-widget [data-testid^='lease-']").first).to_be_visible(timeout=LONG)


def drop_lab(page: Page, api) -> None:
    preset = page.locator("#lab-widget").get_attribute("data-preset")
    saved = page.evaluate(f"localStorage.getItem('awl:lab:{preset}')")
    if saved:
        lab = json.loads(saved)
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])


def on_screen(page: Page, sel: str, height: int) -> dict:
    box = page.evaluate(BOX, sel)
    assert box and box["h"] > 0, f"{sel} is not rendered"
    assert 0 <= box["top"] and box["bottom"] <= height, f"{sel} is not within the first {height} px: {box}"
    return box


def loaded_lazy(page: Page) -> list[str]:
    names = page.evaluate("() => performance.getEntriesByType('resource').map((r) => r.name)")
    return [n for n in names if any(f"/widget/{m}" in n for m in LAZY)]


def test_every_chapter_shows_its_title_and_pipeline_at_1280x800_with_the_rest_folded(page: Page, stack, api):
    page.set_viewport_size({"width": 1280, "height": 800})
    for n in range(9):
        open_lab(page, stack.url, f"/chapters/{n}")
        on_screen(page, "article.chapter h1", 800)
        on_screen(page, "#lab-widget [data-testid=stepper-form]", 800)  # the guided step asks on the first screen
        if page.locator("#lab-widget").get_attribute("data-pipeline") == "none":
            # chapter 7: schedulers, no job queue; its own panel takes the pipeline's place, above the settings
            on_screen(page, "#lab-widget [data-testid=ch7-panel] h2", 800)
        else:
            # the cards come with the workers' first heartbeat, which may follow the socket's first frame
            page.locator("#lab-widget .lw-workers .lw-worker").first.wait_for(state="attached", timeout=30_000)
            for sel in (".lw-queue", ".lw-inflight", ".lw-workers-panel h3", ".lw-workers .lw-worker"):
                on_screen(page, f"#lab-widget {sel}", 800)
            # every worker of the first row of cards (a pool of four or more wraps to a second row)
            tops = page.evaluate(
                "() => [...document.querySelectorAll('#lab-widget .lw-workers .lw-worker')]"
                ".map((c) => c.getBoundingClientRect())"
                ".filter((r, _, all) => r.top === all[0].top).map((r) => r.bottom)"
            )
            assert tops and max(tops) <= 800, f"chapter {n}: the first row of workers is cut by the fold: {tops}"
        folds = page.locator("#lab-widget details.lw-fold")
        assert folds.count() >= 3, f"chapter {n}: no folded panels"
        assert folds.evaluate_all("(ds) => ds.filter((d) => d.open).length") == 0, f"chapter {n}: a fold is open"
        assert not loaded_lazy(page), f"chapter {n} loaded a first-use module at load: {loaded_lazy(page)}"
        drop_lab(page, api)
    # a fold's code arrives when it is opened: the history bar on chapter 8's page (still open)
    unfold(page, "history")
    expect(page.get_by_test_id("scrubber")).to_be_visible(timeout=10_000)
    assert any("/widget/scrubber." in n for n in loaded_lazy(page))
    drop_lab(page, api)


def test_chapter_0_shows_nothing_a_later_chapter_introduces(page: Page, stack, api):
    page.set_viewport_size({"width": 1280, "height": 800})
    open_lab(page, stack.url, f"/chapters/0?speed={SPEED}", job=True)  # in flight: where a lease countdown would be
    text = page.locator("#lab-widget").inner_text()
    assert not LATER_TERMS.findall(text), f"chapter 0 shows later terms {LATER_TERMS.findall(text)}: {text[:1500]}"
    for tile in ("readout-queued", "readout-active", "readout-done"):
        expect(page.get_by_test_id(tile)).to_be_visible()
    # the same widget on chapter 1 does show them: the check above can fail
    drop_lab(page, api)
    open_lab(page, stack.url, "/chapters/1")
    expect(page.get_by_test_id("readout-redelivered")).to_be_visible()
    assert LATER_TERMS.search(page.locator("#lab-widget").inner_text())
    drop_lab(page, api)


def test_space_on_the_prose_scrolls_and_leaves_the_lab_running_r_asks_before_resetting(page: Page, stack, api):
    page.set_viewport_size({"width": 1280, "height": 800})
    open_lab(page, stack.url, "/chapters/1")
    clock = page.get_by_test_id("readout-clock")
    # reading: a click on a paragraph of the prose, then Space
    para = page.locator("#chapter-body .prose p").first
    para.scroll_into_view_if_needed()
    para.click()
    y0 = page.evaluate("scrollY")
    t0 = int(clock.get_attribute("data-value"))
    page.keyboard.press("Space")
    page.wait_for_function(f"() => scrollY > {y0}", timeout=10_000)
    expect(clock).to_have_attribute("data-paused", "no")
    page.wait_for_function(
        "(t0) => Number(document.querySelector('[data-testid=readout-clock]').dataset.value) > t0",
        arg=t0,
        timeout=15_000,
    )
    # in the lab, Space is the lab's: it pauses the clock
    page.locator("#lab-widget .lw-head").click()
    page.keyboard.press("Space")
    expect(clock).to_have_attribute("data-paused", "yes", timeout=10_000)
    # R asks first, in the page; "Keep this lab" keeps it
    lab_id = page.locator("#lab-widget").get_attribute("data-lab-id")
    page.keyboard.press("r")
    dialog = page.get_by_test_id("reset-confirm")
    expect(dialog).to_be_visible()
    expect(page.get_by_test_id("reset-cancel")).to_be_focused()
    page.get_by_test_id("reset-cancel").click()
    expect(dialog).to_be_hidden()
    assert page.locator("#lab-widget").get_attribute("data-lab-id") == lab_id
    page.keyboard.press("r")
    page.get_by_test_id("reset-confirm-yes").click()
    expect(page.locator("#lab-widget")).not_to_have_attribute("data-lab-id", lab_id, timeout=30_000)
    drop_lab(page, api)


def test_presenter_mode_at_1080p_shows_queue_in_flight_workers_and_timeline(page: Page, stack, api):
    page.set_viewport_size({"width": 1920, "height": 1080})
    open_lab(page, stack.url, f"/chapters/1?present=1&speed={SPEED}", job=True)
    on_screen(page, "#lab-widget .lw-queue", 1080)
    on_screen(page, "#lab-widget [data-testid^='lease-']", 1080)
    on_screen(page, "#lab-widget .lw-workers-panel", 1080)
    on_screen(page, "#lab-widget [data-testid='timeline'] .lw-tl-row", 1080)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "presenter-1080p.png"))  # the screen as the room sees it
    drop_lab(page, api)


def test_on_a_phone_nothing_is_pinned_over_the_worker_cards(page: Page, stack, api):
    page.set_viewport_size({"width": 390, "height": 844})
    open_lab(page, stack.url, "/chapters/2")
    cards = page.locator("#lab-widget .lw-worker")
    expect(cards.first).to_be_visible()
    # what stays pinned is a small strip (queue → in flight), never the worker cards
    pinned = page.evaluate("""() => [...document.querySelectorAll('#lab-widget *')]
        .filter((e) => getComputedStyle(e).position === 'sticky').map((e) => e.getBoundingClientRect().height)""")
    assert all(h <= 844 / 4 for h in pinned), f"a pinned part takes more than a quarter of the phone: {pinned}"
    assert not page.locator("#lab-widget .lw-flow-top .lw-worker").count()
    for i in range(cards.count()):
        # each card at the top of the screen, where a pinned panel would sit over it
        cards.nth(i).evaluate("(c) => c.scrollIntoView({block: 'start'})")
        covered = cards.nth(i).evaluate("""(c) => { const b = c.getBoundingClientRect();
            const hit = document.elementFromPoint(b.left + b.width / 2, Math.max(1, b.top + 4));
            return hit && !c.contains(hit) ? hit.className || hit.tagName : null; }""")
        assert covered is None, f"worker card {i} is covered at the top of the screen by {covered}"
    drop_lab(page, api)


# what the steps of chapters 2, 7 and 8 talk about, each whole or (a tall panel) its heading and first row
FIRST_SCREEN = {
    2: ["#lab-widget .lw-queue", "#lab-widget .lw-inflight", "#lab-widget .lw-workers-panel h3"],
    7: [
        "[data-testid=ch7-panel] h2",
        "[data-testid=ch7-replicas-box] h3",
        "[data-testid=ch7-counts-box] h3",
        "[data-testid=ch7-replica-r1]",
    ],
    8: ["#lab-widget .lw-queue", "#lab-widget .lw-inflight", "#lab-widget .lw-workers-panel h3"],
}


@pytest.mark.parametrize("number", sorted(FIRST_SCREEN))
def test_first_screens_of_chapters_2_7_and_8_show_what_their_steps_are_about(page: Page, stack, api, number):
    page.set_viewport_size({"width": 1280, "height": 800})
    open_lab(page, stack.url, f"/chapters/{number}")
    if number == 7:
        expect(page.get_by_test_id("ch7-replica-r1")).to_be_attached(timeout=30_000)
    else:  # every worker card of the pool whole, with its "inspect" (chapter 2's pool is four)
        n = api.snapshot(page_lab(page, f"ch{number}"))["settings"]["workers"]
        expect(page.locator("#lab-widget .lw-workers > li")).to_have_count(n, timeout=60_000)
        for i in range(1, n + 1):
            on_screen(page, f"#lab-widget .lw-workers > li:nth-child({i})", 800)
            on_screen(page, f"#lab-widget .lw-workers > li:nth-child({i}) .lw-w-inspect", 800)
    for sel in FIRST_SCREEN[number]:
        on_screen(page, sel, 800)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"first-screen-ch{number}.png"))
    drop_lab(page, api)
