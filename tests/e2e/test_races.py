"""The lease race as a watcher sees it: the VT 300 s lab's duplicate run shows in the table against the two
others, marked in words, and the clock row reads one instant for every lab."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.lesson import races


def test_the_lease_race_shows_the_vt300_duplicate_against_the_other_labs(page, stack, api, shot):
    race = races.open_race(api, "lease", 100)
    page.goto(f"{stack.url}{race['url']}")
    expect(page.get_by_test_id("race-lockstep")).to_be_visible()
    races.start(api, race)
    expect(page.get_by_test_id("race")).to_have_attribute("data-state", "running", timeout=30_000)
    expect(page.get_by_test_id("race-duplicate_completions-a")).to_have_text("1", timeout=90_000)
    for side in "bc":  # the two fixes: one run each, the difference from lab A said in words
        expect(page.get_by_test_id(f"race-duplicate_completions-{side}")).to_have_text("0 ▼ −1 vs A")
    clocks = [page.get_by_test_id(f"race-clock-{side}").inner_text() for side in "abc"]
    readings = {re.sub(r" \(.*\)", "", c) for c in clocks}
    assert len(readings) == 1, clocks  # one status read, one instant: the same t in every column
    shot("lease-race")
