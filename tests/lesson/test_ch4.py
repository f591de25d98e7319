"""Chapter 4, Retries & Backoff: the lesson note on the poison pill's backoff total.

TODO, provable once issue 18 lands (not skipped tests; everything in this chapter's lab is delivery
semantics):
- Try this 1 / Check yourself 1: exponential backoff, storage outage — synchronised waves at the schedule's
  times (1, 3, 7, 15 s scaled), tens of callers per wave.
- Try this 2 / Check yourself 2: full jitter flattens the peak by about the model's factor.
- Try this 3: a poison pill that *fails* makes exactly max_attempts (5) attempts with the policy's delays
  between them, then the DLQ; policy `none` changes its timing.
- Try this 4: DLQ replay with a reason filter brings back only the outage failures.
- Check yourself 3–5 are reasoning questions (uncapped poison pills, retry budget, breaker) — model rows.
"""

from __future__ import annotations

import pytest

from core import numbers
from tests.lesson.helpers import num, page_text

pytestmark = pytest.mark.lesson

C4 = numbers.derive()["ch4"]


def test_lesson_note_poison_backoff_is_on_the_page(api, measured):
    note = next(n for n in C4["lesson_notes"] if n["id"] == "poison_backoff_total")
    text = page_text(api, 4)
    assert note["ours"] in text and f"{num(C4['backoff_schedule_total_s'])} s" in text
    assert C4["backoff_between_attempts_s"] < C4["backoff_schedule_total_s"]
    measured.update(lesson=note["values"]["lesson"], ours=note["values"]["ours"])
