"""Chapter 6, Priorities & Fairness, on real workers: the strategy a freed worker polls by decides who waits.

Jobs are queued on a paused clock so every strategy starts from the same backlog (the helpers are the
integration suite's, tests/integration/test_fairness.py). Thresholds come from the numbers model (aging
threshold) and the ch6 preset. Nothing here depends on issue 18.
"""

from __future__ import annotations

import statistics

import pytest

import chapters
from core import numbers
from tests.integration.test_fairness import BACKLOG, JOB_S, poison_storm, run, run_with_summary, tier_waits
from workers.engines import fairness

AGING_S = numbers.Inputs().aging_threshold_s  # the lesson's 300 s, the page's figure
PRESET = chapters.settings_for("ch6")


def test_the_preset_ages_at_the_lessons_threshold():
    assert PRESET["aging_s"] == AGING_S


def test_try1_shared_fifo_serves_in_arrival_order_whatever_the_tier(api, r, measured):
    batches = [("free", "f1", 6), ("pro", "p1", 6), ("free", "f2", 6)]
    rows = run(api, r, "shared", batches)
    by_customer = {c: [w["order"] for w in rows if w["customer"] == c] for c in ("f1", "p1", "f2")}
    # one queue: every f1 job before any p1 job, every p1 job before any f2 job — the tier buys nothing
    assert max(by_customer["f1"]) < min(by_customer["p1"]) and max(by_customer["p1"]) < min(by_customer["f2"])
    measured.update(
        pro_p50=statistics.median(tier_waits(rows, "pro")), free_p50=statistics.median(tier_waits(rows, "free"))
    )


NOISY = [("free", "f0", 45)] + [("free", f"f{i}", 1) for i in range(1, 10)]


def test_try2_check3_round_robin_lets_a_quiet_customer_past_the_burst(api, r, measured):
    fifo = run(api, r, "shared", NOISY)
    quiet_fifo = [w["order"] for w in fifo if w["customer"] != "f0"]
    assert min(quiet_fifo) > 45 - 1  # FIFO: behind the whole burst
    rr = run(api, r, "round_robin", NOISY)
    free_picks = sorted(w["order"] for w in rr)
    quiet_rr = [free_picks.index(w["order"]) for w in rr if w["customer"] != "f0"]
    assert max(quiet_rr) <= 2 * len(quiet_rr)  # within the first rotation or two, not after 45 jobs
    measured.update(fifo_first_quiet_pick=min(quiet_fifo), rr_last_quiet_pick=max(quiet_rr))


def test_try3_check2_strict_priority_starves_free_and_aging_caps_its_wait(api, r, measured):
    strict = run(api, r, "strict", BACKLOG)
    free = [w["order"] for w in strict if w["tier"] == "free"]
    pro = [w["order"] for w in strict if w["tier"] == "pro"]
    assert min(free) > max(pro)  # no free job until the pro queue was empty (the integration suite's check too)
    aged = run(api, r, "aging", BACKLOG, aging_s=AGING_S)
    bound = AGING_S + 3 * max(tier_waits(aged, "pro")) / 20  # promotion + two rounds of 3 workers + slack
    assert AGING_S <= max(tier_waits(aged, "free")) <= bound
    assert min(tier_waits(strict, "free")) > bound
    measured.update(
        strict_free_min_wait=min(tier_waits(strict, "free")),
        aging_free_max_wait=max(tier_waits(aged, "free")),
        aging_s=AGING_S,
    )


def test_try4_check1_hard_split_leaves_pro_workers_idle_while_free_waits(api, r, measured):
    workers, reserved = 3, 1
    rows, split_bill = run_with_summary(api, r, "split", [("free", "f1", 12)], workers=workers, pro_workers=reserved)
    weighted, shared_bill = run_with_summary(api, r, "weighted", [("free", "f1", 12)], workers=workers)
    # a hard split is a count: free never has more than workers − reserved jobs running, while the
    # reserved worker idles; weighted polling lets every worker take free work when pro has none
    assert most_at_once(rows) == workers - reserved
    assert most_at_once(weighted) == workers
    # the table's bill: the idle reservation is still paid for (its share of the pool), a shared pool bills
    # only what each tier used
    used, paid = split_bill["used_worker_s"], split_bill["paid_worker_s"]
    assert used["pro"] == 0 and used["free"] > 0
    assert paid["pro"] / (paid["pro"] + paid["free"]) == pytest.approx(reserved / workers, abs=0.01), paid
    assert shared_bill["used_worker_s"]["pro"] == 0 and shared_bill["paid_worker_s"]["pro"] == 0, shared_bill
    measured.update(
        split_free_running_at_once=most_at_once(rows),
        weighted_free_running_at_once=most_at_once(weighted),
        split_free_p50=statistics.median(tier_waits(rows, "free")),
        weighted_free_p50=statistics.median(tier_waits(weighted, "free")),
        split_paid_idle_pro_worker_s=paid["pro"],
        split_used_pro_worker_s=used["pro"],
    )


def most_at_once(rows: list[dict], job_s: float = JOB_S) -> int:
    """Most jobs running at one moment, from their start times (each runs job_s simulated seconds)."""
    starts = [w["t"] for w in rows]
    return max(sum(1 for s in starts if s <= x < s + job_s - 1) for x in starts)


def test_try5_separate_fleets_keep_a_free_poison_storm_off_pro_workers(api, r, measured):
    final, events, rows = poison_storm(api, r, "separate")
    fleets = {e["worker_id"]: e["data"]["fleet"] for e in events if e["type"] == "worker.started"}
    free_fleet = {w for w, f in fleets.items() if f == "free"}
    crashed = {e["worker_id"] for e in events if e["type"] == "fairness.crashed"}
    assert crashed and crashed <= free_fleet
    assert final["done"]["pro"] == 12
    # the integration suite's checks of the same run: fleets by worker, every crash and death on the free fleet
    assert sorted(fleets.items()) == [("w1", "pro"), ("w2", "pro"), ("w3", "free"), ("w4", "free")]
    crashes = [e["worker_id"] for e in events if e["type"] == "fairness.crashed"]
    died = {e["worker_id"] for e in events if e["type"] == "worker.died"}
    # each poison job took a worker down POISON_CRASHES times, then went to the dead-letter count
    assert len(crashes) == 3 * fairness.POISON_CRASHES == final["crashes"]["free"]
    assert died <= {"w3", "w4"}, died
    assert {w["worker"] for w in rows if w["tier"] == "pro"} <= {"w1", "w2"}
    assert final["dead"] == {"pro": 0, "free": 3} and final["running"] == {"pro": 0, "free": 0}
    assert len([e for e in events if e["type"] == "fairness.dead_lettered"]) == 3
    measured.update(crashed_workers=sorted(crashed), pro_done=final["done"]["pro"])
