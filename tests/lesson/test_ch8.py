"""Chapter 8, Assembling the Pipeline, on the running lab with everything on (the ch8 preset: late acks,
heartbeat, claim guard, both idempotency guards): the demo's transcode time, a killed worker's job back one
reset window after its last beat with one output per rendition and one email, and rapid kills as a spike in
the redelivery rate. Times are the lab's simulated event times; figures come from the numbers model.
"""

from __future__ import annotations

import pytest

import chapters
from core import numbers
from tests.lesson.helpers import REL, busy_worker, button, enqueue, job, kill, num, of_type, page_text, press, settled

FIG = chapters.derive()
C1, C8 = FIG["ch1"], FIG["ch8"]
PRESET = chapters.settings_for("ch8")
SPEED = 200
RATE_WINDOW_S = 600  # the widget's redelivery-rate readout (static/js/widget/readouts.js), 10 buckets


def test_the_dashboard_has_one_row_per_chapter(api, measured):
    rows = FIG["ch8"]["dashboard"]
    assert [r["chapter"] for r in rows] == list(range(9))
    text = page_text(api, 8)
    assert all(r["metric"] in text for r in rows)
    measured.update(rows=len(rows))


def test_try1_a_transcode_takes_its_simulated_duration_so_real_time_is_duration_over_speed(api, measured):
    dur = C1["transcode_mean_s"]
    # the page's prediction is the numbers model's figure (the model's arithmetic is not re-checked here)
    assert f"finishes in {num(C8['demo_transcode_real_s'], 1)} real seconds" in page_text(api, 8)
    lab = api.lab("ch8", speed=SPEED, job_duration=dur)
    api.workers_ready(lab, PRESET["workers"])
    job_id = enqueue(api, lab)
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1, timeout=120)
    a = job(api, lab, job_id)["attempts"][0]
    took = a["end"] - a["start"]
    assert took == pytest.approx(dur, rel=0.05)  # the honest clock: simulated duration holds, so real = dur/speed
    ev = [e for e in api.events(lab) if e.get("job_id") == job_id]
    real = of_type(ev, "job.succeeded")[0]["t_real"] - of_type(ev, "job.claimed")[0]["t_real"]
    # never faster than the asked speed (a busy box may only slow the clock, and the lab then says so)
    assert real >= 0.95 * dur / SPEED, (real, dur / SPEED)
    measured.update(
        simulated_s=round(took, 1),
        real_s=round(real, 2),
        real_s_model_at_this_speed=dur / SPEED,
        model_real_s_at_demo_speed=C8["demo_transcode_real_s"],
    )


def test_try2_a_killed_busy_workers_job_is_freed_one_reset_window_after_its_last_beat(api, stack, measured):
    extend = C1["heartbeat_extend_s"]
    assert PRESET["heartbeat"] and PRESET["guard"] == "claim" and PRESET["heartbeat_extend"] == extend
    lab = api.lab("ch8", speed=SPEED, respawn_delay=5, job_duration=C1["transcode_mean_s"])
    api.workers_ready(lab, PRESET["workers"])
    job_id = enqueue(api, lab)
    w = busy_worker(api, lab, job_id)
    api.wait_for(lab, lambda s: s["counts"]["leases_extended"] >= 1, every=0.01)
    kill(api, lab, w["id"])
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    ev = api.events(lab)
    kill_t = of_type(ev, "worker.killed")[0]["t_sim"]
    beats = [e["t_sim"] for e in of_type(ev, "lease.extended") if e["t_sim"] <= kill_t]
    freed = of_type(ev, "job.stale_freed")[0]
    assert "heartbeat" in freed["data"]["reason"]
    assert freed["t_sim"] - beats[-1] == pytest.approx(extend, rel=REL)  # one reset window after the last beat
    paths = {e["data"]["path"] for e in ev if e["type"] == "output.written" and e.get("job_id") == job_id}
    assert len(paths) == 2  # one output per rendition
    emails = api.call("GET", f"/api/labs/{lab['lab_id']}/outbox", token=lab["token"]).json()["emails"]
    assert len(emails) == 1 and snap["counts"]["succeeded"] == 1
    measured.update(
        last_beat_to_freed_s=round(freed["t_sim"] - beats[-1], 1),
        kill_to_freed_s=round(freed["t_sim"] - kill_t, 1),
        outputs=len(paths),
        emails=len(emails),
    )


def test_try3_check1_check5_rapid_kills_are_a_spike_in_the_redelivery_rate(api, measured):
    lab = api.lab("ch8", speed=SPEED, respawn_delay=5, job_duration=C1["transcode_mean_s"])
    n = PRESET["workers"]
    api.workers_ready(lab, n)
    jobs = press(api, lab, "ch8", "load")
    assert len(jobs) == n
    api.wait_for(lab, lambda s: s["counts"]["leases_extended"] >= n, timeout=60, every=0.02)
    kills_n = button("ch8", "rapid-kills")["kills"]
    assert kills_n == n  # the button kills every busy worker: one per job of "Steady load"
    for job_id in jobs:  # "Three rapid kills": every busy worker, in quick succession
        kill(api, lab, busy_worker(api, lab, job_id)["id"])
    snap = api.wait_for(lab, lambda s: s["counts"]["redelivered"] >= n, timeout=120)
    # the prediction's why: late acks, so every killed job comes back and finishes; none is lost
    assert PRESET["ack_mode"] == "late"
    api.wait_for(
        lab,
        lambda s: s["counts"]["done"] + s["counts"]["lost"] >= n and settled(s),
        timeout=180,
        what="the killed jobs finished or were lost",
    )
    states = {j: job(api, lab, j)["state"] for j in jobs}
    ev = api.events(lab)
    assert of_type(ev, "job.lost") == [] and states == dict.fromkeys(jobs, "done"), states
    kills = [e["t_sim"] for e in of_type(ev, "worker.killed")]
    red = [e["t_sim"] for e in of_type(ev, "job.redelivered")][:n]
    assert len(kills) == n == len(red)  # every redelivery matches a kill (check 5)
    # each comes back one reset window after its own last beat, at most one beat interval before its kill: they
    # come back as close together as the kills, give or take a beat's phase — all inside one rate window, a spike
    beat = PRESET["heartbeat_interval"]
    assert max(red) - min(red) <= max(kills) - min(kills) + beat * (1 + REL), (red, kills, beat)
    assert max(red) - min(kills) <= RATE_WINDOW_S, (red, kills)
    assert all(0 < r - k <= C1["heartbeat_extend_s"] * (1 + REL) for r, k in zip(red, sorted(kills), strict=True))
    measured.update(
        redelivered=snap["counts"]["redelivered"],
        kills_spread_s=round(max(kills) - min(kills), 1),
        redeliveries_spread_s=round(max(red) - min(red), 1),
        rate_window_s=RATE_WINDOW_S,
        lost=len(of_type(ev, "job.lost")),
        done=sum(st == "done" for st in states.values()),
    )


def test_check3_doubled_traffic_doubles_the_pool(api, measured):
    d = C8["doubled_traffic"]
    assert (
        d["workers"]
        == chapters.derive(numbers.Inputs(arrival_rate=2 * numbers.Inputs().arrival_rate))["ch2"]["workers_at_target"]
    )
    assert f"{d['workers']:,} workers (twice the jobs in flight" in page_text(api, 8)
    measured.update(workers=d["workers"], pool_usd_per_month=d["pool_usd_per_month"])
