"""Issue 28 item 5 in real Chromium: every chapter's What-if form works from the keyboard.

One page per chapter: every input is valid as the page loads (one invalid input holds the whole form
back and htmx sends nothing), and ArrowUp on each input in turn sends a request, recomputes the
chapter's figures and leaves focus on that input."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Browser, Page

from app import chapters
from runtime.procs import wait

pytestmark = pytest.mark.e2e

NUMBERS = [ch.number for ch in chapters.all_chapters()]
SWAP_S = 15


@pytest.fixture
def chapter_page(browser: Browser, stack, api):
    """A fresh context per chapter; JavaScript errors collected, the page's own lab deleted after."""
    errors: list[str] = []
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    labs = page.evaluate("Object.keys(sessionStorage).filter((k) => k.startsWith('awl:lab:'))"
                         ".map((k) => sessionStorage.getItem(k))")
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
    invalid = page.eval_on_selector_all(".model-inputs input[type=number]", """els => els
        .filter((e) => !e.checkValidity()).map((e) => `${e.name}=${e.value} (min ${e.min}, step ${e.step})`)""")
    assert invalid == [], f"chapter {number}: inputs invalid as the page loads: {invalid}"
    wait(lambda: page.evaluate("window.htmx !== undefined"), SWAP_S, "htmx to load")
    page.evaluate("document.body.addEventListener('htmx:afterSettle', () => { window.__swaps++; })")
    for name in names:
        field = page.locator(f"#mi-{name}")
        before, value = figures(page), field.input_value()
        page.evaluate("window.__swaps = 0")
        field.focus()
        with page.expect_request(lambda req, name=name: req.headers.get("hx-request") == "true"
                                 and f"{name}=" in req.url, timeout=SWAP_S * 1000):
            field.press("ArrowUp")
        wait(lambda: page.evaluate("window.__swaps") > 0, SWAP_S, f"chapter {number}: the recompute after {name}")
        assert page.locator(f"#mi-{name}").input_value() != value, f"chapter {number}: ArrowUp did not step {name}"
        assert page.evaluate("document.activeElement && document.activeElement.id") == f"mi-{name}", \
            f"chapter {number}: focus left {name} after the recompute"
        assert figures(page) != before, f"chapter {number}: no figure changed when {name} went up one step"
