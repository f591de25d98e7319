"""Chapter 4 on real workers: an outage's retry herd, jitter's spread, paced DLQ replay.

Histograms are of simulated arrival times from the event stream; the jitter draws use a fixed
seed (jitter_seed) and the lab's sequential job ids, so every run draws the same delays.
"""

from tests.helpers import enqueue

# The outage's retry herd at the storage dependency, no jitter vs full jitter, in either order of
# outage and jobs: tests/integration/test_semantics.py (test_without_jitter_…, test_full_jitter_…).


def test_paced_replay_releases_dead_letters_one_per_interval_in_order(api):
    lab = api.lab("ch4", speed=20, workers=2, max_attempts=3, vt_seconds=3600, dlq_alert_depth=3, classify_errors=True)
    api.workers_ready(lab, 2)  # exactly: the preset's third worker has drained, so no job lands on it
    base = f"/api/labs/{lab['lab_id']}"
    jobs = [enqueue(api, lab, sample="poison") for _ in range(4)]
    api.wait_for(lab, lambda s: s["counts"]["dlq"] == 4, timeout=90)
    health = api.call("GET", base + "/retries", token=lab["token"]).json()["dlq"]
    assert health["depth"] == 4 and health["depth_alert"] and health["rate_alert"], health

    assert api.call("POST", base + "/dlq/replay", {"rate": 0}, lab["token"]).status == 422
    assert api.call("POST", base + "/dlq/replay", {"rate": "fast"}, lab["token"]).status == 422
    dead_at = {
        d["job_id"]: d["dead_at"] for d in api.call("GET", base + "/dlq", token=lab["token"]).json()["dead_letters"]
    }
    res = api.call("POST", base + "/dlq/replay", {"reason": "non_retryable", "rate": 0.1}, lab["token"])
    assert res.status == 200, res.body
    # oldest dead letter first: the (simulated) time each reached the DLQ, which two workers need not reach in
    # job order; two that arrived at the same simulated instant (the clock holds at a barrier) may go either way
    replayed = res.json()["replayed"]
    assert sorted(replayed) == sorted(jobs)
    assert [dead_at[j] for j in replayed] == sorted(dead_at[j] for j in replayed)

    api.wait_for(lab, lambda s: s["counts"]["replayed"] == 4 and s["counts"]["dlq"] == 4, timeout=90)
    ev = api.events(lab)
    due = {e["job_id"]: e["data"]["due"] for e in ev if e["type"] == "job.replayed"}
    started = [e for e in ev if e["type"] == "job.retry_started"]
    assert [e["job_id"] for e in started] == replayed  # released in the order they were replayed
    dues = [due[j] for j in replayed]
    assert [round(b - a, 3) for a, b in zip(dues, dues[1:], strict=False)] == [10.0, 10.0, 10.0]  # 1 / rate apart
    for e in started:
        assert e["t_sim"] >= due[e["job_id"]]  # never released before its slot
