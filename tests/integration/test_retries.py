"""Chapter 4 on real workers: an outage's retry herd, jitter's spread, paced DLQ replay.

Histograms are of simulated arrival times from the event stream; the jitter draws use a fixed
seed (jitter_seed) and the lab's sequential job ids, so every run draws the same delays.
"""

import pytest

pytestmark = pytest.mark.integration

IN_FLIGHT = 6


def enqueue(api, lab, **body):
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", body, lab["token"])
    assert res.status == 202, res.body
    return res.json()["job_id"]


def outage_first_wave(api, policy: str) -> dict:
    """IN_FLIGHT long jobs all mid-upload when storage goes down; the retries they schedule."""
    lab = api.lab("ch4", speed=20, workers=IN_FLIGHT, retry_policy=policy, retry_base=100, retry_cap=1000,
                  max_attempts=10, vt_seconds=7200, jitter_seed=7)
    api.workers_ready(lab, IN_FLIGHT)
    for _ in range(IN_FLIGHT):
        enqueue(api, lab, job_type="thumbnail", duration_s=3000)
    api.wait_for(lab, lambda s: s["counts"]["running"] == IN_FLIGHT, timeout=90)
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/faults", {"type": "storage_outage", "duration_s": 1000},
                   lab["token"])
    assert res.status == 202, res.body
    api.wait_for(lab, lambda s: s["counts"]["retries_scheduled"] >= IN_FLIGHT, timeout=60)
    res = api.call("GET", f"/api/labs/{lab['lab_id']}/retries?bucket_s=10", token=lab["token"])
    assert res.status == 200, res.body
    out = res.json()
    api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])  # free the pool for the next run
    return out


def test_an_outage_fails_every_in_flight_job_at_once_and_only_jitter_spreads_the_retries(api):
    runs = {p: outage_first_wave(api, p) for p in ("exponential", "linear", "full_jitter")}
    peaks = {p: run["policies"][p]["first_wave_peak"] for p, run in runs.items()}
    print("measured first-wave peak per 10 s bucket:", peaks,
          "model:", {k: runs["full_jitter"]["model"][k] for k in
                     ("no_jitter_peak_per_bucket", "full_jitter_peak_per_bucket", "jitter_peak_reduction_x")})
    for p in ("exponential", "linear"):
        assert runs[p]["policies"][p]["first_wave"] == IN_FLIGHT
        # no jitter: the whole herd comes back in one bucket, exactly as the model says
        assert peaks[p] == IN_FLIGHT == runs[p]["model"]["no_jitter_peak_per_bucket"]
    jitter = runs["full_jitter"]
    assert jitter["policies"]["full_jitter"]["first_wave"] == IN_FLIGHT
    assert peaks["full_jitter"] <= IN_FLIGHT // 2 < peaks["exponential"]
    assert len(jitter["policies"]["full_jitter"]["histogram"]) >= 3  # spread over the window
    assert all(0 <= b < jitter["window_s"] for b, _n in jitter["policies"]["full_jitter"]["histogram"])
    assert jitter["model"]["jitter_peak_reduction_x"] == 10


def test_paced_replay_releases_dead_letters_one_per_interval_in_order(api):
    lab = api.lab("ch4", speed=20, workers=2, max_attempts=3, vt_seconds=3600, dlq_alert_depth=3)
    base = f"/api/labs/{lab['lab_id']}"
    jobs = [enqueue(api, lab, sample="poison") for _ in range(4)]
    api.wait_for(lab, lambda s: s["counts"]["dlq"] == 4, timeout=90)
    health = api.call("GET", base + "/retries", token=lab["token"]).json()["dlq"]
    assert health["depth"] == 4 and health["depth_alert"] and health["rate_alert"], health

    assert api.call("POST", base + "/dlq/replay", {"rate": 0}, lab["token"]).status == 422
    assert api.call("POST", base + "/dlq/replay", {"rate": "fast"}, lab["token"]).status == 422
    res = api.call("POST", base + "/dlq/replay", {"reason": "non_retryable", "rate": 0.1}, lab["token"])
    assert res.status == 200, res.body
    # oldest dead letter first: the order they reached the DLQ, which two workers need not finish in job order
    dead_order = [e["job_id"] for e in api.events(lab) if e["type"] == "job.dead_lettered"]
    assert sorted(dead_order) == sorted(jobs)
    assert res.json()["replayed"] == dead_order

    api.wait_for(lab, lambda s: s["counts"]["replayed"] == 4 and s["counts"]["dlq"] == 4, timeout=90)
    ev = api.events(lab)
    due = {e["job_id"]: e["data"]["due"] for e in ev if e["type"] == "job.replayed"}
    started = [e for e in ev if e["type"] == "job.retry_started"]
    assert [e["job_id"] for e in started] == dead_order
    dues = [due[j] for j in dead_order]
    assert [round(b - a, 3) for a, b in zip(dues, dues[1:], strict=False)] == [10.0, 10.0, 10.0]  # 1 / rate apart
    for e in started:
        assert e["t_sim"] >= due[e["job_id"]]  # never released before its slot
