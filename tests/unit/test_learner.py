"""Issue 22 without a browser: the race table, the prediction specs and the table/code scroll boxes."""

from __future__ import annotations

import pytest

import chapters
from app.routes import races
from core import settings
from core.events import COUNTERS


@pytest.mark.parametrize("race_id", list(chapters.RACES))
def test_every_race_varies_only_its_named_settings_across_two_to_four_valid_labs(race_id):
    rc = chapters.RACES[race_id]
    assert 2 <= len(rc["variants"]) <= 4 and rc["preset"] in chapters.PRESETS
    labs = [races._lab_settings(race_id, v) for v in rc["variants"]]
    for lab in labs[1:]:
        differ = {k for k in lab if lab[k] != labs[0].get(k)}
        assert differ and differ <= set(rc["vary"]), differ
    for key, _ in rc["watch"]:
        assert key in {"done", "dlq", "queued", "running", "lost", *COUNTERS}


def test_every_prediction_is_answerable_and_its_why_names_real_settings():
    import re

    for preset, buttons in chapters.BUTTONS.items():
        for b in buttons:
            p = b.get("predict")
            if not p:
                continue
            assert p["kind"] in ("number", "choice") and p["question"].endswith("?")
            kind = p["measure"].split(":")[0]
            assert kind in ("attempts", "state", "counter")
            if p["kind"] == "choice":
                assert set(p["buckets"]) == {v for v, _ in p["choices"]}
            else:
                assert p["min"] < p["max"]
            for name in re.findall(r"\{(\w+)\}", p["why"]):
                # measured and guard_that_acted are read off the run (static/js/widget/predict-model.js)
                assert name in ("measured", "guard_that_acted") or name in settings.BY_NAME, (preset, name)


def test_tables_scroll_in_a_labelled_focusable_box_and_code_blocks_take_focus():
    html = chapters.scrollable_tables(
        "<table><caption>The job mix</caption><tr><th>a</th></tr></table><pre><code>x</code></pre>"
    )
    assert html.startswith('<div class="table-scroll" role="region" tabindex="0" aria-label="Table: The job mix">')
    assert '<pre tabindex="0">' in html
