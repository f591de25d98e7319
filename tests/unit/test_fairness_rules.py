"""When the chapter 6 sweep gives a released tier job up for lost (workers.engines.fairness.lost_reason).

A job taken back too early runs twice; one never taken back holds its tier's slot for ever. The
integration test kills a real worker; these pin the rule for every case the sweep can meet.
"""

from __future__ import annotations

import time

from workers.engines.fairness import START_GRACE_S, lost_reason

LABEL = "pro-7"


def rec(worker: str | None = None, age: float = 0.0) -> dict:
    out = {"tier": "pro", "enq": 10.0, "rq": "rq-1", "released": time.time() - age}
    return {**out, "worker": worker} if worker else out


def never_waiting(_rq_id: str) -> bool:
    return False


def test_a_running_job_on_a_live_worker_is_left_alone():
    rows = {"w1": {"state": "busy", "job_id": LABEL}}
    assert lost_reason(rec("w1"), LABEL, "started", rows, never_waiting) is None


def test_a_killed_worker_or_a_respawned_one_that_moved_on_loses_the_job():
    assert lost_reason(rec("w1"), LABEL, "started", {"w1": {"state": "dead"}}, never_waiting) == "its worker died"
    moved = {"w1": {"state": "idle", "job_id": None}}
    assert "moved on" in lost_reason(rec("w1"), LABEL, "started", moved, never_waiting)


def test_a_failed_horse_loses_the_job_even_before_it_claimed_it():
    assert lost_reason(rec(), LABEL, "failed", {}, never_waiting) == "its work horse failed"


def test_an_unclaimed_job_gets_a_grace_period_then_is_taken_back_unless_still_queued():
    assert lost_reason(rec(age=START_GRACE_S / 2), LABEL, "started", {}, never_waiting) is None
    assert lost_reason(rec(age=START_GRACE_S + 1), LABEL, "started", {}, never_waiting) is not None
    assert lost_reason(rec(age=START_GRACE_S + 1), LABEL, "queued", {}, lambda _i: True) is None
