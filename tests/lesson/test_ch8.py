"""Chapter 8, Assembling the Pipeline: the dashboard the page builds from the numbers model.

TODO, provable once issue 18 lands (not skipped tests):
- Try this 1: at 20× a 600 s transcode finishes in 30 real seconds — needs the honest clock (a job
  finishes within 5% of its simulated duration, or the widget says the clock slowed).
- Try this 2 / Check yourself 1: kill the busy worker — with the heartbeat on the job returns within one
  reset window of the kill; one output per rendition and one email (guard `claim`).
- Try this 3 / Check yourself 5: rapid successive kills — the redelivery rate over a window shows a spike
  that decays, beside the ever-rising total.
- Try this 4 / Check yourself 2–4: which dashboard rows move — with the kills above.
"""

from __future__ import annotations

import pytest

from core import numbers
from tests.lesson.helpers import page_text

pytestmark = pytest.mark.lesson


def test_the_dashboard_has_one_row_per_chapter(api, measured):
    rows = numbers.derive()["ch8"]["dashboard"]
    assert [r["chapter"] for r in rows] == list(range(9))
    text = page_text(api, 8)
    assert all(r["metric"] in text for r in rows)
    measured.update(rows=len(rows))
