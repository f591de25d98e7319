"""Delivery semantics on real RQ workers, real ffmpeg, a real Redis-protocol server.

Each test reads like the lesson's claim it checks. Labs run at 200× so a 600 s transcode takes
3 real seconds (well above ffmpeg's real floor); all timing assertions are in simulated seconds from the event stream.
"""

import random

import pytest
import redis

from core import blobs, media
from tests.helpers import enqueue, types


def output_names(stack, lab, job) -> list[str]:
    """The job's output files: blobs in the server (core/blobs.py), not files on any host's disk."""
    r = redis.Redis.from_url(stack.redis_url)
    return sorted(n.rsplit("/", 1)[1] for n in blobs.names(r, lab["lab_id"], f"transcoded/{job}/"))


def output_file(stack, lab, job, name):
    r = redis.Redis.from_url(stack.redis_url)
    return blobs.save(
        r, lab["lab_id"], f"transcoded/{job}/{name}", stack.var_dir / "probe" / lab["lab_id"] / job / name
    )


def kill(api, lab, worker):
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/workers/{worker}/kill", {}, lab["token"])
    assert res.status == 200, res.body
    return res.json()


def busy_worker(api, lab, job_id):
    snap = api.wait_for(
        lab,
        lambda s: any(w.get("job_id") == job_id and w["state"] == "busy" for w in s["workers"]),
        timeout=30,
        every=0.02,
    )
    return next(w for w in snap["workers"] if w.get("job_id") == job_id)


# VT shorter than the job, under each guard (off / claim / fence): tests/integration/test_semantics.py


def test_vt_longer_than_the_job_completes_once_with_no_redelivery(api, stack):
    lab = api.lab("ch1", speed=200, vt_seconds=1200, job_duration=600, workers=2)
    api.workers_ready(lab, 2)
    job = enqueue(api, lab)
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    assert snap["counts"]["redelivered"] == 0 and snap["counts"]["duplicates_blocked"] == 0
    j = api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job}", token=lab["token"]).json()
    assert j["state"] == "done" and [a["outcome"] for a in j["attempts"]] == ["succeeded"]
    out = output_file(stack, lab, job, "240p.mp4")
    media.probe(out)
    assert abs(media.duration_of(out) - media.duration_of(media.sample_clip())) < 0.2, "the rendition is cut short"


def test_a_killed_workers_job_comes_back_after_the_visibility_timeout(api):
    lab = api.lab("ch1", speed=200, vt_seconds=1200, job_duration=600, workers=2, respawn_delay=10)
    api.workers_ready(lab, 2)
    job = enqueue(api, lab)
    w = busy_worker(api, lab, job)
    killed = kill(api, lab, w["id"])
    assert killed["job_id"] == job
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    assert snap["counts"]["redelivered"] == 1 and snap["counts"]["lost"] == 0
    ev = api.events(lab)
    claimed = types(ev, "job.claimed")[0]
    expired = types(ev, "lease.expired")[0]
    # nothing happens until the lease deadline: redelivery comes at claim + VT, not at the kill
    assert expired["data"]["deadline"] == pytest.approx(claimed["t_sim"] + 1200, abs=1)
    assert expired["t_sim"] >= expired["data"]["deadline"] - 1e-3
    assert types(ev, "job.succeeded")[0]["attempt"] == 2
    # the job's record says what became of the killed attempt (issue 38): it does not stay "running"
    j = api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job}", token=lab["token"]).json()
    assert [a["outcome"] for a in j["attempts"]] == ["killed", "succeeded"], j["attempts"]
    killed_at = types(ev, "worker.killed")[0]["t_sim"]
    assert j["attempts"][0]["end"] == pytest.approx(killed_at, abs=1e-3)


def test_a_lease_cut_short_comes_back_while_its_worker_still_runs_and_the_guard_keeps_one_result(api):
    lab = api.lab("ch1", speed=200, vt_seconds=1200, job_duration=600, workers=2, heartbeat=False, guard="claim")
    api.workers_ready(lab, 2)
    path = f"/api/labs/{lab['lab_id']}/jobs"
    job = enqueue(api, lab)
    first = busy_worker(api, lab, job)
    cut = api.call("POST", f"{path}/{job}/lease/expire", {}, lab["token"])
    assert cut.status == 200, cut.body
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1 and all(w["state"] == "idle" for w in s["workers"]))
    c = snap["counts"]
    assert c["leases_cut"] == 1 and c["leases_expired"] == 1 and c["redelivered"] == 1
    ev = api.events(lab)
    claims = types(ev, "job.claimed")
    cut_ev = types(ev, "lease.cut")[0]
    # the cut moved the deadline from claim + VT to the moment of the click; the reaper did the rest
    assert cut_ev["data"]["was"] == pytest.approx(claims[0]["t_sim"] + 1200, abs=1)
    assert types(ev, "lease.expired")[0]["data"]["deadline"] == pytest.approx(cut_ev["t_sim"], abs=0.01)
    # delivery 2 reached the other worker while attempt 1 was still going: it found the record running
    # and backed off (claim guard); attempt 1 finished and kept the one result
    assert [e["attempt"] for e in claims] == [1]
    blocked = types(ev, "job.duplicate_blocked")
    assert [e["attempt"] for e in blocked] == [2] and blocked[0]["worker_id"] != first["id"]
    assert [e["attempt"] for e in types(ev, "job.succeeded")] == [1]
    # nothing to cut now, and bad targets are told apart
    again = api.call("POST", f"{path}/{job}/lease/expire", {}, lab["token"])
    assert again.status == 409 and again.json()["error"] == "no_lease"
    assert api.call("POST", f"{path}/999/lease/expire", {}, lab["token"]).status == 404
    assert api.call("POST", f"{path}/{job}/lease/expire", {}, "not-the-token").status in (401, 403)


def test_ack_early_loses_the_job_when_its_worker_dies(api):
    lab = api.lab("ch1", speed=200, vt_seconds=1200, job_duration=600, workers=2, ack_mode="early")
    api.workers_ready(lab, 2)
    job = enqueue(api, lab)
    w = busy_worker(api, lab, job)
    kill(api, lab, w["id"])
    snap = api.wait_for(lab, lambda s: s["counts"]["lost"] == 1)
    j = next(x for x in snap["jobs"] if x["id"] == job)
    assert j["state"] == "lost" and snap["counts"]["redelivered"] == 0


def test_heartbeat_keeps_a_long_job_on_a_short_lease(api):
    lab = api.lab(
        "ch1-heartbeat",
        speed=200,
        vt_seconds=120,
        job_duration=600,
        workers=2,
        heartbeat=True,
        heartbeat_interval=30,
        heartbeat_extend=120,
    )
    api.workers_ready(lab, 2)
    enqueue(api, lab)
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    assert snap["counts"]["redelivered"] == 0
    assert snap["counts"]["leases_extended"] >= 10


def test_heartbeat_lets_a_crash_be_noticed_within_the_extension(api):
    lab = api.lab(
        "ch1-heartbeat",
        speed=200,
        vt_seconds=120,
        job_duration=600,
        workers=2,
        heartbeat=True,
        heartbeat_interval=30,
        heartbeat_extend=120,
    )
    api.workers_ready(lab, 2)
    job = enqueue(api, lab)
    w = busy_worker(api, lab, job)
    api.wait_for(lab, lambda s: s["counts"]["leases_extended"] >= 2, every=0.02)
    kill(api, lab, w["id"])
    # (a reaper that waits past the deadline while its own barrier holds the clock there stalls the lab)
    api.wait_for(
        lab,
        lambda s: s["counts"]["redelivered"] == 1,
        timeout=30,
        what="the dead worker's job redelivered: the reaper never acted at the lease's deadline",
    )
    ev = api.events(lab)
    killed = types(ev, "worker.killed")[0]
    expired = types(ev, "lease.expired")[0]
    # the last heartbeat before the crash set the deadline: that beat + one extension (120 s), ±1 s
    beats = [e["t_sim"] for e in types(ev, "lease.extended") if e["attempt"] == expired["attempt"]]
    deadline = expired["data"]["deadline"]
    assert beats and beats[-1] <= killed["t_sim"], (beats, killed["t_sim"])
    assert deadline == pytest.approx(beats[-1] + 120, abs=1), (
        f"the lease ran out at {deadline}, not at the last beat ({beats[-1]}) + the 120 s extension"
    )
    # redelivered at the deadline: never before it (event times are rounded to the millisecond), and within a
    # fraction of a simulated second after it — the clock waits at the reaper's barrier, so a busy host delays
    # the redelivery in real time only (1 s at 200× is 5 real ms: no scheduling slack is needed, or granted)
    redelivered = types(ev, "job.redelivered")[0]
    late = redelivered["t_sim"] - deadline
    assert -0.001 <= late < 0.25, f"redelivered {late:.3f} simulated s after the lease's deadline {deadline}"
    # the reaper reports how long after the clock reached the deadline it acted, in real time (bench
    # redelivery reports its spread): a scan cannot act before the clock got there
    assert redelivered["data"]["late_real_ms"] >= 0


def test_a_crashing_pill_is_received_max_receives_times_then_redriven_to_the_dlq(api):
    lab = api.lab(
        "ch4", speed=200, vt_seconds=120, max_receives=3, workers=2, job_duration=60, heartbeat=False, guard="off"
    )
    api.workers_ready(lab, 2)
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/faults", {"type": "poison_crash"}, lab["token"])
    assert res.status == 202
    job = res.json()["job_id"]
    snap = api.wait_for(lab, lambda s: s["counts"]["dlq"] == 1 and any(x.get("dlq_reason") for x in s["jobs"]))
    j = next(x for x in snap["jobs"] if x["id"] == job)
    assert len(j["attempts"]) == 3 and "max receives" in j["dlq_reason"], j
    # the pool survived the pill: each crash was only a work horse
    assert all(w["state"] in ("idle", "busy") for w in snap["workers"])


def test_a_corrupt_upload_is_not_retried_and_lands_in_the_dlq_with_its_reason(api):
    lab = api.lab("ch4", speed=200, max_attempts=4, workers=2, vt_seconds=3600, classify_errors=True)
    api.workers_ready(lab, 2)  # exactly: the preset's third worker has drained, so no job lands on it
    job = enqueue(api, lab, sample="poison")
    snap = api.wait_for(lab, lambda s: s["counts"]["dlq"] == 1)
    j = next(x for x in snap["jobs"] if x["id"] == job)
    assert j.get("dlq_reason", "").startswith("non_retryable"), j
    assert [a["outcome"] for a in j["attempts"]] == ["failed"], j["attempts"]
    dead = api.call("GET", f"/api/labs/{lab['lab_id']}/dlq", token=lab["token"]).json()["dead_letters"]
    assert dead[0]["job_id"] == job and "moov" in dead[0]["last_error"]


def test_with_classification_off_a_corrupt_file_burns_exactly_max_attempts(api):
    lab = api.lab(
        "ch4",
        speed=200,
        max_attempts=3,
        workers=2,
        classify_errors=False,
        vt_seconds=3600,
        retry_policy="fixed",
        retry_base=1,
    )
    api.workers_ready(lab, 2)  # exactly: the preset's third worker has drained, so no job lands on it
    job = enqueue(api, lab, sample="poison")
    snap = api.wait_for(lab, lambda s: any(x["id"] == job and x["state"] == "dlq" for x in s["jobs"]))
    j = next(x for x in snap["jobs"] if x["id"] == job)
    assert len(j["attempts"]) == 3 and "max_attempts" in j.get("dlq_reason", ""), j


def test_dlq_replay_filters_by_reason_and_resets_attempts(api):
    lab = api.lab("ch4", speed=200, max_attempts=2, workers=2, vt_seconds=3600, classify_errors=True)
    api.workers_ready(lab, 2)  # exactly: the preset's third worker has drained, so no job lands on it
    corrupt = enqueue(api, lab, sample="poison")
    api.wait_for(lab, lambda s: s["counts"]["dlq"] == 1)
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/dlq/replay", {"reason": "no such reason"}, lab["token"])
    assert res.json()["replayed"] == []
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/dlq/replay", {"reason": "non_retryable"}, lab["token"])
    assert res.json()["replayed"] == [corrupt]
    snap = api.wait_for(lab, lambda s: s["counts"]["dlq"] == 1 and s["counts"]["replayed"] == 1)
    j = next(x for x in snap["jobs"] if x["id"] == corrupt)
    assert [a["attempt"] for a in j["attempts"]] == [1, 2]  # fence keeps counting; budget reset


def test_storage_outage_retries_then_recovers(api):
    # the outage (1,500 s ≈ 7.5 s real) outlasts any scheduling delay, so every job hits it; the upload
    # parts retry their storage calls inside the attempt, so the jobs recover without a job-level retry
    lab = api.lab(
        "ch4",
        speed=200,
        workers=3,
        job_duration=30,
        retry_policy="full_jitter",
        upload_parts=2,
        retry_base=100,
        retry_cap=1000,
        max_attempts=10,
        vt_seconds=3600,
    )
    api.workers_ready(lab, 3)
    res = api.call(
        "POST", f"/api/labs/{lab['lab_id']}/faults", {"type": "storage_outage", "duration_s": 1500}, lab["token"]
    )
    assert res.status == 202
    for _ in range(3):
        enqueue(api, lab, job_type="thumbnail", duration_s=30)
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 3, timeout=120)
    ev = api.events(lab)
    failed_calls = [e for e in ev if e["type"] == "storage.called" and not e["data"]["ok"]]
    assert len(failed_calls) >= 6 and snap["counts"]["storage_calls"] > len(failed_calls)
    assert snap["counts"]["failed"] == 0 and snap["counts"]["dlq"] == 0


def test_kill_storm_loses_nothing_and_every_output_is_valid(api, stack):
    lab = api.lab(
        "ch8",
        speed=200,
        workers=4,
        vt_seconds=300,
        heartbeat=True,
        heartbeat_interval=30,
        heartbeat_extend=120,
        job_duration=120,
        respawn_delay=20,
    )
    api.workers_ready(lab, 4)
    jobs = [enqueue(api, lab, sample=random.Random(i).choice(["bigbuckbunny", "bikes"])) for i in range(10)]
    rng = random.Random(7)
    kills = 0
    for _ in range(8):
        snap = api.snapshot(lab)
        busy = [w["id"] for w in snap["workers"] if w["state"] == "busy"]
        if busy:
            res = api.call("POST", f"/api/labs/{lab['lab_id']}/workers/{rng.choice(busy)}/kill", {}, lab["token"])
            kills += res.status == 200
        __import__("time").sleep(0.3)
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] + s["counts"]["dlq"] == len(jobs), timeout=120)
    assert kills >= 3
    assert snap["counts"]["lost"] == 0
    for j in jobs:
        state = next(x for x in snap["jobs"] if x["id"] == j)["state"]
        if state == "done":
            for name in ("240p.mp4", "144p.mp4"):
                media.probe(output_file(stack, lab, j, name))
