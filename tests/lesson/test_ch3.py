"""Chapter 3, Status Delivery, on the real API and the running lab: ETag and long-poll, the claim-time
compare-and-swap (a late delivery of a finished job refused; a redelivered copy backing off; a crashed
holder freed by the sweeper or the heartbeat). Times are the lab's simulated event times.
"""

from __future__ import annotations

import pytest

from core import numbers, presets
from tests.lesson.helpers import busy_worker, enqueue, kill, num, of_type, page_text, settled, wait_event

pytestmark = pytest.mark.lesson


def job_path(lab: dict, job_id: str) -> str:
    return f"/api/labs/{lab['lab_id']}/jobs/{job_id}"


def test_try2_check2_an_unchanged_job_answers_304_to_its_etag(api, measured):
    lab = api.lab("ch3", speed=200, workers=0)  # nobody will run it: its status cannot change
    job = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "bigbuckbunny"}, lab["token"]).json()
    first = api.call("GET", job_path(lab, job["job_id"]), token=lab["token"])
    tag = first.headers["ETag"]
    again = api.call("GET", job_path(lab, job["job_id"]), token=lab["token"], headers={"If-None-Match": tag})
    assert again.status == 304 and again.body == b""
    measured.update(first=first.status, first_bytes=len(first.body), unchanged=again.status, unchanged_bytes=0)


def test_try1_a_long_poll_returns_when_the_job_changes(api, measured):
    lab = api.lab("ch3", speed=200)
    api.workers_ready(lab, 2)
    lid, tok = lab["lab_id"], lab["token"]
    api.call("POST", f"/api/labs/{lid}/clock", {"action": "pause"}, tok)
    job = api.call("POST", f"/api/labs/{lid}/jobs", {"sample": "bigbuckbunny"}, tok).json()
    tag = api.call("GET", job_path(lab, job["job_id"]), token=tok).headers["ETag"]
    api.call("POST", f"/api/labs/{lid}/clock", {"action": "resume"}, tok)
    held = api.call("GET", job_path(lab, job["job_id"]) + "?wait=25", token=tok, headers={"If-None-Match": tag})
    # a 200 with a new tag: the hold ended because the job changed (a hold that runs out answers 304)
    assert held.status == 200 and held.headers["ETag"] != tag
    measured.update(status=held.status, state=held.json()["state"])


C3 = numbers.derive()["ch3"]
C1 = numbers.derive()["ch1"]
PRESET = presets.settings_for("ch3")
SPEED = 200
TOL = 0.4 * SPEED


def test_try4_check4_a_late_delivery_of_a_finished_job_is_refused(api, measured):
    lab = api.lab("ch3", speed=SPEED)
    api.workers_ready(lab, PRESET["workers"])
    job_id = enqueue(api, lab)
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs/{job_id}/late-delivery", {}, lab["token"])
    assert res.status == 202, res.body
    refused = wait_event(api, lab, "job.claim_refused", timeout=60)[0]
    assert refused["data"]["state"] == "done"  # done → running refused
    snap = api.snapshot(lab)
    assert snap["counts"]["done"] == 1 and snap["counts"]["claims_refused"] >= 1
    assert len(of_type(api.events(lab), "job.succeeded")) == 1
    measured.update(refused_state=refused["data"]["state"], claims_refused=snap["counts"]["claims_refused"])


def test_try5_check5_a_short_vt_copy_backs_off_and_a_crashed_holder_is_freed(api, measured):
    dur = PRESET["job_duration"]
    vt = dur / 2  # "set the VT below the job's duration"
    lab = api.lab("ch3", speed=SPEED, vt_seconds=vt, heartbeat=False)
    api.workers_ready(lab, PRESET["workers"])
    enqueue(api, lab)
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    assert snap["counts"]["duplicates_blocked"] == 1 and len(of_type(api.events(lab), "job.claimed")) == 1
    # kill the holder: every copy backs off until the sweeper puts the record back to queued
    stale = PRESET["stale_after"]
    lab2 = api.lab("ch3", speed=SPEED, vt_seconds=vt, heartbeat=False, respawn_delay=5)
    api.workers_ready(lab2, PRESET["workers"])
    job2 = enqueue(api, lab2)
    kill(api, lab2, busy_worker(api, lab2, job2)["id"])
    api.wait_for(lab2, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=180)
    ev = api.events(lab2)
    claim1, freed = of_type(ev, "job.claimed")[0], of_type(ev, "job.stale_freed")
    assert len(freed) == 1 and "sweeper" in freed[0]["data"]["reason"]
    assert [e for e in of_type(ev, "job.duplicate_blocked") if e["t_sim"] < freed[0]["t_sim"]]
    assert freed[0]["t_sim"] - claim1["t_sim"] == pytest.approx(stale, abs=TOL)
    # the heartbeat on: freed one reset window after the crash
    extend = C1["heartbeat_extend_s"]
    lab3 = api.lab("ch3", speed=SPEED, vt_seconds=vt, heartbeat=True, heartbeat_extend=extend, respawn_delay=5)
    api.workers_ready(lab3, PRESET["workers"])
    job3 = enqueue(api, lab3)
    kill(api, lab3, busy_worker(api, lab3, job3)["id"])
    api.wait_for(lab3, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    ev3 = api.events(lab3)
    kill_t = of_type(ev3, "worker.killed")[0]["t_sim"]
    freed3 = of_type(ev3, "job.stale_freed")[0]
    assert "heartbeat" in freed3["data"]["reason"] and freed3["t_sim"] - kill_t <= extend + TOL
    measured.update(vt_s=vt, job_s=dur, duplicates_blocked=snap["counts"]["duplicates_blocked"],
                    sweeper_freed_after_claim_s=round(freed[0]["t_sim"] - claim1["t_sim"], 1), stale_after_s=stale,
                    heartbeat_freed_after_kill_s=round(freed3["t_sim"] - kill_t, 1), extension_s=extend)


def test_check1_halving_the_poll_interval_doubles_requests_and_halves_the_delay(api, measured):
    assert C3["halved_interval_polls_per_s"] == pytest.approx(2 * C3["polls_per_s"])
    text = page_text(api, 3)
    assert f"Requests double to {num(C3['halved_interval_polls_per_s'])} a second" in text
    measured.update(polls_per_s=C3["halved_interval_polls_per_s"], mean_delay_s=C3["halved_interval_mean_delay_s"])
