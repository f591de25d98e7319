"""Races as a watcher sees them: the lease race's VT 300 s duplicate run in the table against the two others,
marked in words, the clock row one instant for every lab; the jitter race's retry histograms on one scale."""

from __future__ import annotations

import re

from playwright.sync_api import expect

import chapters
from tests.conftest import ARTIFACTS
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


# the drawn bars of every lane's retry histogram, as the watcher sees them: count, pixel height, and its y max
_LANE_BARS = """() => Object.fromEntries([...document.querySelectorAll('[data-testid=race] section.lw')].map((lane) => {
  const hist = lane.querySelector('[data-testid=retry-histogram]');
  const bars = [...hist.querySelectorAll('.lw-hist-bar')];
  return [lane.id, {n: bars.map((b) => Number(b.dataset.n)), px: bars.map((b) => b.getBoundingClientRect().height),
                    ymax: Number(hist.dataset.ymax), bucket: Number(hist.dataset.bucket),
                    caption: hist.querySelector('[data-testid=retry-hist-caption]').textContent}];
}))"""


def test_the_jitter_race_draws_the_fixed_herd_at_least_twice_as_tall_on_one_scale(page, stack, api, shot):
    """The jitter race's two lanes as the watcher sees them: each lane's retry histogram in bars narrow enough
    to show the fixed policy's synchronised waves (a tenth of the 20 s first-retry window), one y scale for
    both lanes, and the fixed lane's tallest drawn bar at least twice full jitter's."""
    race = races.open_race(api, "jitter", 100)
    page.goto(f"{stack.url}{race['url']}")
    races.start(api, race)
    expect(page.get_by_test_id("race")).to_have_attribute("data-state", "running", timeout=30_000)
    n = chapters.RACES["jitter"]["count"]
    for side in "ab":  # every job of both lanes done (or dead-lettered): the runs are over
        expect(page.get_by_test_id(f"race-done-{side}")).to_have_text(re.compile(rf"^{n}\b"), timeout=300_000)
    # the widgets have drawn every retry the lanes' streams hold
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid=race] section.lw')].every((lane) =>
        Number(lane.querySelector('[data-testid=retry-histogram]').dataset.ymax) > 1)""",
        timeout=30_000,
    )
    page.wait_for_timeout(1500)  # a few more ticks: the last events in, every lane handed the shared scale
    lanes = page.evaluate(_LANE_BARS)
    fixed, jitter = lanes["run-a"], lanes["run-b"]  # the race's variants: fixed 20 s, then full jitter
    shot("jitter-race")
    page.locator("#run-a [data-testid=retry-histogram]").screenshot(path=str(ARTIFACTS / "race-hist-fixed.png"))
    page.locator("#run-b [data-testid=retry-histogram]").screenshot(path=str(ARTIFACTS / "race-hist-jitter.png"))
    assert fixed["bucket"] == jitter["bucket"] == 2, lanes  # 20 s base: 2 s bars, from the lab's snapshot
    assert fixed["ymax"] == jitter["ymax"] == max(max(fixed["n"]), max(jitter["n"])), lanes  # one y scale
    assert max(jitter["n"]) > 0, lanes
    assert max(fixed["n"]) >= 2 * max(jitter["n"]), lanes  # the counts behind the bars
    assert max(fixed["px"]) >= 2 * max(jitter["px"]), lanes  # and the bars as drawn
    for lane in (fixed, jitter):  # the caption names both kinds of retry
        assert "storage calls retried inside attempts" in lane["caption"] and "job retr" in lane["caption"], lane
