"""axe-core (WCAG 2.2 A/AA) on every page in Chromium: home, chapters 0–8 with their live lab running,
the rooms page, a room's dashboard, a four-way race and the two-run compare page, in the light theme,
and the pages with most colour in the dark theme and on a phone.

axe-core is vendored (tests/vendor/axe-core, version and licence in its README): no network, no npm.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.conftest import ARTIFACTS

AXE = Path(__file__).resolve().parent.parent / "vendor" / "axe-core" / "axe.min.js"
AXE_VERSION = "4.14.1"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
RESULTS = ARTIFACTS / "axe-results.json"


@pytest.fixture(scope="module")
def axe_log():
    """Every page's result, written once for the record (test-artifacts/axe-results.json)."""
    results: dict[str, list] = {}
    yield results
    ARTIFACTS.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))


def axe(page: Page) -> list[dict]:
    page.add_script_tag(path=str(AXE))
    assert page.evaluate("axe.version") == AXE_VERSION
    return page.evaluate(
        """(tags) => axe.run(document, {runOnly: {type: 'tag', values: tags}})
        .then((r) => r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
          nodes: v.nodes.map((n) => ({target: n.target.join(' '), summary: n.failureSummary}))})))""",
        TAGS,
    )


def check(page: Page, name: str, axe_log: dict) -> None:
    found = axe(page)
    axe_log[name] = found
    assert not found, f"{name}: " + json.dumps(found, indent=1)[:4000]


@pytest.fixture
def a11y_context(browser: Browser, stack, api):
    """A context that may inject axe (bypass_csp: the page's CSP forbids inline scripts); labs deleted."""
    contexts = []

    def make(**kw):
        ctx = browser.new_context(bypass_csp=True, **kw)
        contexts.append(ctx)
        return ctx

    yield make
    for ctx in contexts:
        for page in ctx.pages:
            for key in ("ch0", "ch1", "ch2", "ch3", "ch4", "ch5", "ch6", "ch7", "ch8"):
                saved = page.evaluate(f"localStorage.getItem('awl:lab:{key}')")
                if saved:
                    lab = json.loads(saved)
                    api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
        ctx.close()


def live(page: Page) -> None:
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=45_000)
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)
    # the chapter's add-on modules fetched and their first calls answered, then two frames drawn. A panel that
    # polls every second (chapter 7's schedule) may never leave the network idle for 500 ms on a busy box;
    # ten seconds after the lab went live its first answers have long been drawn
    try:
        page.wait_for_load_state("networkidle", timeout=10_000)
    except PlaywrightTimeoutError:
        pass
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_home_rooms_and_every_chapter_with_its_live_lab_have_no_violations(a11y_context, stack, axe_log, scheme):
    page = a11y_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme).new_page()
    for path in ["/", "/rooms", "/races", *[f"/chapters/{n}" for n in range(9)]]:
        page.goto(f"{stack.url}{path}?speed=200" if "chapters" in path else stack.url + path)
        if "chapters" in path:
            live(page)
            if scheme == "light":
                page.locator("#lab-widget").press("?")  # the open help dialog is part of the page too
                expect(page.get_by_test_id("shortcut-help")).to_be_visible()
                check(page, f"{path} (help open)", axe_log)
                page.keyboard.press("Escape")
        check(page, f"{path} ({scheme})", axe_log)


def test_a_room_a_race_and_the_compare_page_have_no_violations(a11y_context, stack, api, axe_log):
    page = a11y_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(stack.url + "/rooms")
    page.get_by_test_id("room-start").select_option("preset:ch1")
    page.get_by_test_id("room-create").click()
    page.wait_for_url(re.compile(r"/rooms/[A-Z2-9]+$"), timeout=30_000)
    expect(page.locator(".rooms")).to_have_attribute("data-state", "ready", timeout=15_000)
    page.get_by_test_id("room-ask-q").select_option("ch1-vt-too-short")
    page.get_by_test_id("room-ask").click()
    expect(page.get_by_test_id("room-spread")).to_be_visible()
    check(page, "/rooms/<code> (dashboard, a question open)", axe_log)
    code = page.url.rsplit("/", 1)[1]
    page.goto(f"{stack.url}/join/{code}")
    check(page, "/join/<code>", axe_log)
    page.get_by_test_id("join-watch").click()
    live(page)
    expect(page.get_by_test_id("predict-guess")).to_be_visible(timeout=10_000)
    check(page, "chapter 1 watched in a room (question open)", axe_log)

    page.goto(stack.url + "/races")
    page.get_by_test_id("race-new-retry-policies").click()
    page.wait_for_url(re.compile(r"/race/[\w-]{16}$"), timeout=60_000)
    for side in "abcd":
        expect(page.locator(f"#run-{side}")).to_have_attribute("data-state", "ready", timeout=45_000)
    expect(page.get_by_test_id("race-start")).to_be_enabled(timeout=60_000)
    page.get_by_test_id("race-start").click()
    expect(page.locator('.race-table td[data-diff="up"]').first).to_be_visible(timeout=60_000)
    check(page, "/race/<id> (four labs running)", axe_log)

    a = api.lab("ch1", speed=200)
    b = api.lab("ch1", speed=200, vt_seconds=1200)
    page.goto(f"{stack.url}/compare?a={a['lab_id']}&av={a['view_token']}&b={b['lab_id']}&bv={b['view_token']}")
    for side in "ab":
        expect(page.locator(f"#run-{side}")).to_have_attribute("data-state", "ready", timeout=45_000)
    check(page, "/compare", axe_log)


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_dark_theme_phone_and_projector_have_no_violations(a11y_context, stack, axe_log, scheme):
    ctx = a11y_context(viewport={"width": 390, "height": 844}, color_scheme=scheme)
    page = ctx.new_page()
    page.goto(f"{stack.url}/")
    check(page, f"/ ({scheme}, phone)", axe_log)
    page.goto(f"{stack.url}/chapters/4?speed=200")
    live(page)
    page.get_by_test_id("predict-guess-outage").fill("1")
    page.get_by_test_id("scenario-outage").click()  # a fault, retries and a prediction card on screen
    expect(page.get_by_test_id("predict-pending")).to_be_visible()
    page.wait_for_function(  # the outage's first retry arrivals are on screen
        "() => [...document.querySelectorAll('[data-testid=retry-histogram] .lw-hist-bar')]"
        ".some((b) => b.dataset.n > 0)",
        timeout=90_000,
    )
    check(page, f"/chapters/4 ({scheme}, phone, outage running)", axe_log)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{stack.url}/chapters/2?present=1&speed=200")
    live(page)
    check(page, f"/chapters/2 ({scheme}, projector)", axe_log)


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_a_paused_guided_step_with_its_bar_and_a_lost_connection_have_no_violations(
    a11y_context, stack, axe_log, scheme
):
    """The step bar docked at a pause (on a phone and a laptop) and the notice over a lost connection."""
    ctx = a11y_context(viewport={"width": 390, "height": 844}, color_scheme=scheme)
    page = ctx.new_page()
    page.goto(f"{stack.url}/chapters/1?speed=200")
    live(page)
    page.get_by_test_id("stepper-run").click()
    expect(page.get_by_test_id("stepper-mount")).to_have_attribute("data-docked", "yes", timeout=90_000)
    check(page, f"/chapters/1 ({scheme}, phone, step paused)", axe_log)
    page.set_viewport_size({"width": 1280, "height": 800})
    check(page, f"/chapters/1 ({scheme}, step paused)", axe_log)
    page.route_web_socket(re.compile(r"/ws/labs/"), lambda ws: ws.close(code=1011))  # new sockets refused
    stack.restart_web()
    expect(page.get_by_test_id("conn-lost")).to_be_visible(timeout=30_000)
    check(page, f"/chapters/1 ({scheme}, connection lost)", axe_log)
