"""The chapter engines on the honest clock, beside two CPU hogs: a busy box costs real time, never simulated.

Chapter 6's releases and chapter 2's arrivals pass through the supervisor's pass and a real RQ hand-off (a
dequeue, a fork). On a loaded box those take real seconds; at 50× or 200× that is minutes of simulated time
unless the clock waits for them, as it does for a job's own delivery. Each test runs its lab beside two
busy-loop processes (as many as the box has cores, at the lab's own priority) and checks a figure the
chapter plots against what the same lab would show on an idle machine: a burst that reaches idle workers
starts at once, aging caps a free job's wait, and chapter 2's mean wait is an ideal c-server queue's fed the
lab's own arrivals and job times.
"""

from __future__ import annotations

import heapq
import json

import pytest

import chapters
from core import numbers
from core.engines import fairness, loadgen
from core.keys import job, key
from tests.integration.test_fairness import BACKLOG, JOB_S, run, tier_waits
from tests.lesson.races import cpu_hogs

HOGS = 2


def test_a_burst_that_reaches_idle_workers_starts_at_its_arrival_on_a_busy_box(api, r):
    """Three idle workers, three jobs queued on a running clock: each starts at the moment it was queued (the
    meta's `t0`, the first submit's clock reading), within a second of simulated time, not after the pass,
    the release and the fork that got it there."""
    workers = 3
    lab = api.lab("ch6", speed=50, fairness="shared", workers=workers, fair_job_s=JOB_S)
    lid, tok = lab["lab_id"], lab["token"]
    api.workers_ready(lab, workers)
    with cpu_hogs(HOGS):
        res = api.call(
            "POST", f"/api/labs/{lid}/fairness/jobs", {"tier": "pro", "customer": "p1", "count": workers}, tok
        )
        assert res.status == 202, res.body
        api.wait_for(lab, lambda _s: len(fairness.waits(r, lid)) >= workers, timeout=120, every=0.2)
    queued = float(r.hget(key(lid, "fair", "meta"), "t0"))
    starts = sorted(w["t"] for w in fairness.waits(r, lid))
    assert starts[0] - queued <= 1.0, f"the first job started {starts[0] - queued:.1f} s after it was queued"
    assert starts[-1] - queued <= 1.0, f"the last idle worker's job started {starts[-1] - queued:.1f} s late"


def test_aging_caps_the_free_wait_at_its_threshold_on_a_busy_box(api, r):
    """Strict priority with aging at 300 s over 60 pro jobs and 5 free ones on 3 workers, at 200×: the 3
    workers finish together every JOB_S, so a free job is promoted at the first round past 300 s and the
    5 take two rounds (3, then 2). A hand-off that counted as simulated time stretches every round, and the
    free jobs' promotion and second round with it. The bound is the configured threshold's."""
    aging_s = 300
    with cpu_hogs(HOGS):
        rows = run(api, r, "aging", BACKLOG, speed=200, aging_s=aging_s)
    free = tier_waits(rows, "free")
    assert aging_s <= max(free) <= aging_s + 2 * JOB_S + 0.1 * JOB_S, sorted(free)


JOBS = 120


@pytest.mark.timeout(600)
def test_ch2_mean_wait_is_an_ideal_queues_fed_the_same_arrivals_on_a_busy_box(api, r):
    """Chapter 2's try-this at ρ = 0.8 (even job times, 200×): the lab's measured mean wait against an ideal
    FIFO queue with the lab's workers (computed here, not by the product), fed the arrivals the lab's seeded
    generator drew (from its recorded start and seed) and the job times the lab recorded. An arrival enqueued
    only when a late pass came is bunched with others and waits behind them: a wait the ideal queue lacks."""
    c = chapters.settings_for("ch2")["workers"]
    lam = numbers.Inputs().target_utilisation * c / loadgen.MIX_W
    lab = api.lab("ch2", speed=200, workers=c)
    lid, tok = lab["lab_id"], lab["token"]
    api.workers_ready(lab, c)

    def generated() -> int:
        return api.call("GET", f"/api/labs/{lid}/loadgen", token=tok).json()["state"]["generated"]

    with cpu_hogs(HOGS):
        res = api.call(
            "POST", f"/api/labs/{lid}/loadgen", {"action": "start", "rate": lam, "seed": 3, "mix": "even"}, tok
        )
        assert res.status == 200, res.body
        try:
            api.wait_for(lab, lambda _s: generated() >= JOBS, timeout=300, every=0.5)
        finally:
            assert api.call("POST", f"/api/labs/{lid}/loadgen", {"action": "stop"}, tok).status == 200
        total = generated()
        snap = api.wait_for(lab, lambda s: s["counts"]["done"] == total, timeout=300, every=0.5)
    assert snap["counts"]["redelivered"] == 0 and snap["counts"]["lost"] == 0
    report = api.call("GET", f"/api/labs/{lid}/loadgen?window=86400", token=tok).json()
    measured, state = report["measured"], report["state"]
    ids = sorted(r.zrange(loadgen.arrivals_key(lid), 0, -1), key=int)
    assert len(ids) == total == measured["arrivals"] and state["shed"] == 0
    # the moments the seeded generator drew (the k-th gap from Random(f"{seed}:{k}"), from its start)
    due, at = [], state["started_t"]
    for k in range(total):
        at += loadgen.draw(state["seed"], k, lam)[0]
        due.append(at)
    jobs = []
    for i in ids:
        attempts = [json.loads(a) for a in r.hvals(job(lid, i) + ":attempts")]
        ran = next(a for a in attempts if a.get("outcome") == "succeeded")
        jobs.append((float(r.hget(job(lid, i), "created_at")), ran["end"] - ran["start"]))
    late = max(created - t for (created, _s), t in zip(jobs, due, strict=True))
    wait = measured["queue_wait"]
    ideal = ideal_mean_wait([(t, service) for (_created, service), t in zip(jobs, due, strict=True)], c)
    assert abs(wait - ideal) <= 0.1 * ideal + 0.5, (
        f"measured mean wait {wait:.1f} s, ideal queue {ideal:.1f} s (arrivals up to {late:.1f} s late)"
    )
    assert late <= 0.5, f"an arrival was enqueued {late:.1f} s after the moment the generator drew for it"


def ideal_mean_wait(jobs: list[tuple[float, float]], servers: int) -> float:
    """Mean wait of a FIFO queue with `servers` servers and no hand-off time, fed (arrival, service) pairs."""
    free = [0.0] * servers
    waits = []
    for arrival, service in sorted(jobs):
        start = max(arrival, heapq.heappop(free))
        waits.append(start - arrival)
        heapq.heappush(free, start + service)
    return sum(waits) / len(waits)
