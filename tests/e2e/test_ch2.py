"""Chapter 2's load-generator panel in real Chromium on the real stack: start load at λ, watch the
measured L and λW fill in beside the model, step to the peak, see a timeout-ordering violation."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from tests.conftest import ARTIFACTS


def test_ch2_load_generator_main_path(page: Page, stack, api, shot):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{stack.url}/chapters/2?speed=50")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    panel = page.get_by_test_id("ch2-panel")
    expect(panel).to_have_attribute("data-state", "stopped", timeout=15_000)
    lab = json.loads(page.evaluate("localStorage.getItem('awl:lab:ch2')"))
    try:
        expect(page.get_by_test_id("ch2-ordering")).to_have_attribute("data-ok", "true")
        page.get_by_label("Lab load λ").fill("0.1")
        page.get_by_test_id("ch2-start").click()
        expect(panel).to_have_attribute("data-state", "running", timeout=10_000)
        # the real run's arrivals show up as measured L and λW, beside the model's L = λW = 3
        expect(page.get_by_test_id("ch2-L")).not_to_have_text("–", timeout=30_000)
        expect(page.get_by_test_id("ch2-lambdaW")).not_to_have_text("–", timeout=30_000)
        expect(page.locator('[data-x="L2"]')).to_contain_text("3 (= 0.1/s × 30 s)")
        expect(page.get_by_test_id("ch2-chart-L")).not_to_have_attribute("data-points", "0", timeout=10_000)
        expect(page.get_by_test_id("ch2-summary")).to_contain_text("arrivals measured: L =", timeout=15_000)
        page.get_by_test_id("ch2-peak").click()
        expect(page.get_by_test_id("ch2-peak")).to_have_attribute("aria-pressed", "true")
        expect(page.locator('[data-x="lambda"]')).to_have_text("0.18/s")
        expect(page.locator('[data-x="rho"]')).to_have_text("1.35")  # 0.18 × 30 / 4 workers: past the wall
        expect(panel).to_have_attribute("data-generated", re.compile(r"^(?:[89]|\d{2,})$"), timeout=60_000)
        # an execution timeout longer than the VT breaks the ordering, and the panel says so
        res = api.call("PATCH", f"/api/labs/{lab['id']}/settings", {"exec_timeout": 1300}, lab["token"])
        assert res.status == 200
        ordering = page.get_by_test_id("ch2-ordering")
        expect(ordering).to_have_attribute("data-ok", "false", timeout=10_000)
        expect(ordering.locator('li[data-ok="false"]')).to_contain_text("exec_timeout < vt_seconds violated")
        shot("running")
        panel.screenshot(path=str(ARTIFACTS / "ch2-panel-running.png"))
        page.get_by_test_id("ch2-stop").click()
        expect(panel).to_have_attribute("data-state", "stopped", timeout=10_000)
    finally:
        api.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"])
    assert not errors, errors
