"""Chapter 6 on real workers: the strategy a freed worker polls by decides who waits.

Jobs are queued while the clock is paused, so every strategy starts from the same backlog.
"""

from __future__ import annotations

import pytest

from workers import fairness

SPEED = 50
JOB_S = 30


def run(api, r, strategy: str, batches: list[tuple[str, str, int]], workers: int = 3, **settings) -> list[dict]:
    """Queue `batches` (tier, customer, count) in order on a paused clock, then run them all."""
    lab = api.lab("ch6", speed=SPEED, fairness=strategy, workers=workers, fair_job_s=JOB_S, **settings)
    lid, tok = lab["lab_id"], lab["token"]
    api.workers_ready(lab, workers)
    assert api.call("POST", f"/api/labs/{lid}/clock", {"action": "pause"}, tok).status == 200
    total = 0
    for tier, customer, count in batches:
        res = api.call("POST", f"/api/labs/{lid}/fairness/jobs", {"tier": tier, "customer": customer,
                                                                  "count": count}, tok)
        assert res.status == 202, res.body
        total += count
    assert api.call("POST", f"/api/labs/{lid}/clock", {"action": "resume"}, tok).status == 200
    api.wait_for(lab, lambda _s: len(fairness.waits(r, lid)) >= total, timeout=180, every=0.3)
    summary = api.call("GET", f"/api/labs/{lid}/fairness", token=tok).json()
    assert summary["pending"] == {"pro": 0, "free": 0}
    return fairness.waits(r, lid)


def tier_waits(rows: list[dict], tier: str) -> list[float]:
    return [w["wait"] for w in rows if w["tier"] == tier]


BACKLOG = [("free", "f1", 5), ("pro", "p1", 60)]  # 60 pro jobs = 600 s of work for 3 workers


def test_strict_priority_starves_free_while_pro_has_a_backlog(api, r):
    rows = run(api, r, "strict", BACKLOG)
    free = [w["order"] for w in rows if w["tier"] == "free"]
    pro = [w["order"] for w in rows if w["tier"] == "pro"]
    assert min(free) > max(pro)  # no free job was picked until the pro queue was empty
    assert min(tier_waits(rows, "free")) > 500


def test_aging_bounds_the_free_wait_near_its_threshold(api, r):
    rows = run(api, r, "aging", BACKLOG, aging_s=300)
    free, pro = tier_waits(rows, "free"), tier_waits(rows, "pro")
    # one "round" = 3 workers each finishing a job, measured (hand-off overhead included): 60 pro jobs
    # are 20 rounds. The 5 aged free jobs need 2 rounds of workers after promotion, plus one of slack.
    round_s = max(pro) / 20
    assert max(free) <= 300 + 3 * round_s
    assert max(free) >= 300  # and not before the threshold: until then, strict priority rules


def test_weighted_polling_gives_free_a_floor_under_a_pro_backlog(api, r):
    rows = run(api, r, "weighted", BACKLOG, pro_weight=0.7)
    free = [w["order"] for w in rows if w["tier"] == "free"]
    pro = [w["order"] for w in rows if w["tier"] == "pro"]
    assert max(free) < max(pro)  # every free job got a slot before the pro backlog drained


def test_hard_split_keeps_pro_fast_and_free_slow(api, r):
    rows = run(api, r, "split", [("free", "f1", 30), ("pro", "p1", 6)], pro_workers=1)
    free, pro = tier_waits(rows, "free"), tier_waits(rows, "pro")
    # one reserved pro worker: pro never waits behind the 30 free jobs queued before it
    assert max(pro) < fairness.percentiles(free)["p50"]


NOISY = [("free", "f0", 40)] + [("free", f"f{i}", 1) for i in range(1, 10)]


@pytest.mark.parametrize("strategy", ["shared", "round_robin"])
def test_noisy_neighbour_burst_vs_nine_quiet_customers(api, r, strategy):
    rows = run(api, r, strategy, NOISY)
    burst = [w["wait"] for w in rows if w["customer"] == "f0"]
    quiet = [w["wait"] for w in rows if w["customer"] != "f0"]
    if strategy == "shared":
        order = {w["customer"]: w["order"] for w in rows if w["customer"] != "f0"}
        assert min(order.values()) > 40  # FIFO: every quiet customer is picked after the whole burst
        assert min(quiet) >= fairness.percentiles(burst)["p95"]
    else:
        assert max(quiet) < fairness.percentiles(burst)["p50"]  # round robin: they finish early


def test_fairness_api_refuses_bad_input_with_4xx(api):
    lab = api.lab("ch6", speed=SPEED)
    lid, tok = lab["lab_id"], lab["token"]
    for path, body in [("jobs", {"tier": "gold"}), ("jobs", {"count": 501}), ("jobs", {"count": "3"}),
                       ("jobs", {"customer": "../x"}), ("noisy-neighbour", {"burst": 0}),
                       ("spike", {"tier": "pro", "duration_s": -1})]:
        res = api.call("POST", f"/api/labs/{lid}/fairness/{path}", body, tok)
        assert res.status == 422, (path, body, res.body)
        assert "error" in res.json()
    assert api.call("POST", f"/api/labs/{lid}/fairness/jobs", {}, lab["view_token"]).status == 403
    res = api.call("PATCH", f"/api/labs/{lid}/settings", {"fairness": "lottery"}, tok)
    assert res.status == 422
