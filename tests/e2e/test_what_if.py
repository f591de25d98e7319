"""Issue 28 item 5 in real Chromium: every chapter's What-if form works from the keyboard.

One page per chapter: every input is valid as the page loads (one invalid input holds the whole form
back and htmx sends nothing), and ArrowUp on each input in turn sends a request, recomputes the
chapter's figures and leaves focus on that input."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Browser, Page

import chapters
from core.procs import wait

NUMBERS = [ch.number for ch in chapters.all_chapters()]
SWAP_S = 15


@pytest.fixture
def chapter_page(browser: Browser, stack, api):
    """A fresh context per chapter; JavaScript errors collected, the page's own lab deleted after."""
    errors: list[str] = []
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    labs = page.evaluate(
        "Object.keys(localStorage).filter((k) => k.startsWith('awl:lab:')).map((k) => localStorage.getItem(k))"
    )
    for raw in labs:
        lab = json.loads(raw)
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    page.context.close()
    assert not errors, f"JavaScript errors: {errors}"


def figures(page: Page) -> str:
    """The chapter's prose as rendered: every figure and table the model fills in (no input values)."""
    return page.locator("#chapter-body .prose").inner_text()


@pytest.mark.parametrize("number", NUMBERS, ids=[f"ch{n}" for n in NUMBERS])
def test_every_what_if_input_is_valid_at_load_and_arrow_up_recomputes_the_chapter(number, chapter_page, stack):
    page = chapter_page
    page.goto(f"{stack.url}/chapters/{number}")
    names = page.eval_on_selector_all(".model-inputs input[type=number]", "els => els.map((e) => e.name)")
    assert names, f"chapter {number} has no What-if inputs"
    invalid = page.eval_on_selector_all(
        ".model-inputs input[type=number]",
        """els => els
        .filter((e) => !e.checkValidity()).map((e) => `${e.name}=${e.value} (min ${e.min}, step ${e.step})`)""",
    )
    assert invalid == [], f"chapter {number}: inputs invalid as the page loads: {invalid}"
    # htmx loads as the reader nears the form (static/js/model-inputs.js), not with the page
    page.locator(".model-inputs").scroll_into_view_if_needed()
    wait(lambda: page.evaluate("window.htmx !== undefined"), SWAP_S, "htmx to load once the form is in view")
    page.evaluate("document.body.addEventListener('htmx:afterSettle', () => { window.__swaps++; })")
    for name in names:
        field = page.locator(f"#mi-{name}")
        before, value = figures(page), field.input_value()
        page.evaluate("window.__swaps = 0")
        field.focus()
        with page.expect_request(
            lambda req, name=name: req.headers.get("hx-request") == "true" and f"{name}=" in req.url,
            timeout=SWAP_S * 1000,
        ):
            field.press("ArrowUp")
        wait(lambda: page.evaluate("window.__swaps") > 0, SWAP_S, f"chapter {number}: the recompute after {name}")
        assert page.locator(f"#mi-{name}").input_value() != value, f"chapter {number}: ArrowUp did not step {name}"
        assert page.evaluate("document.activeElement && document.activeElement.id") == f"mi-{name}", (
            f"chapter {number}: focus left {name} after the recompute"
        )
        assert figures(page) != before, f"chapter {number}: no figure changed when {name} went up one step"


def test_htmx_waits_for_the_reader_and_a_change_made_before_it_arrives_is_still_sent(chapter_page, stack):
    """The first screen does not fetch htmx; focusing the form does, and an ArrowUp pressed while htmx is
    still on its way (its response held back here until after the key) recomputes the chapter all the same."""
    page = chapter_page
    held = []
    page.route("**/vendor/htmx-*.js", lambda route: held.append(route))
    page.goto(f"{stack.url}/chapters/1")
    page.wait_for_selector("#lab-widget[data-state=ready]")
    # two frames after the lab is built: the form's watcher has seen where the form is
    page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert not held, "htmx was requested with the first screen"
    name = page.eval_on_selector(".model-inputs input[type=number]", "e => e.name")
    field = page.locator(f"#mi-{name}")
    before, value = figures(page), field.input_value()
    field.focus()
    # (the sync API hands `held` its route only while it waits on the page)
    wait(lambda: page.wait_for_timeout(20) or held, SWAP_S, "focusing the form to request htmx")
    field.press("ArrowUp")
    assert page.evaluate("window.htmx === undefined")  # the change was made before htmx arrived
    page.evaluate("document.body.addEventListener('htmx:afterSettle', () => { window.__swaps = 1; })")
    with page.expect_request(
        lambda req: req.headers.get("hx-request") == "true" and f"{name}=" in req.url, timeout=SWAP_S * 1000
    ):
        held[0].continue_()
    wait(lambda: page.evaluate("window.__swaps === 1"), SWAP_S, "the recompute of the change made before htmx")
    assert page.locator(f"#mi-{name}").input_value() != value
    assert figures(page) != before
    assert page.evaluate("document.activeElement && document.activeElement.id") == f"mi-{name}"
