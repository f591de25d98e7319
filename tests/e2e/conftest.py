"""What the browser tests share: chapter pages opened at test speed, each page's lab deleted afterwards."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import failed
from tests.helpers import delete_page_labs, page_lab

SPEED = 200


def open_chapter(page: Page, base: str, path: str) -> tuple[dict, str]:
    """Open a chapter page at test speed and wait for its live lab: the lab (as `page_lab`) and its preset."""
    page.goto(f"{base}{path}{'&' if '?' in path else '?'}speed={SPEED}")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(page.get_by_test_id("conn-status")).to_have_attribute("data-conn", "live", timeout=15_000)
    preset = page.locator("#lab-widget").get_attribute("data-preset")
    return page_lab(page, preset), preset


@pytest.fixture
def lab(page: Page, stack, api, request):
    """Open chapter pages at test speed; each page's lab is deleted afterwards."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    opened: list[str] = []

    def open_page(path: str) -> dict:
        lab, preset = open_chapter(page, stack.url, path)
        opened.append(preset)
        return lab

    yield open_page
    delete_page_labs(page, api, opened, failed(request))
    assert not errors, f"JavaScript errors on the page: {errors}"
