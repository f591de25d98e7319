"""Chapter 0, The Hand-off, against the running lab: inline on the lab clock ends in the gateway's 504,
enqueue answers 202 at once and the job carries on in a worker.

Every number asserted is read from the numbers model (`chapters.derive()["ch0"]`, what the page
renders) or the ch0 preset. Nothing here depends on issue 18.
"""

from __future__ import annotations

import time

import pytest

import chapters
from core import settings
from tests.helpers import sim_time_passes
from tests.lesson.helpers import REL, events_of, num, page_text, wait_event
from tests.lesson.races import cpu_hogs

C0 = chapters.derive()["ch0"]
PRESET = chapters.settings_for("ch0")
# A worker runs real ffmpeg (about a second of real time) paced to the job's 600 simulated s: at 200× that
# is 3 real s, well inside the 1,200 s VT, so the job is not redelivered while the clock outruns ffmpeg.
JOB_SPEED = 200


def inline(api, lab, **body):
    return api.call(
        "POST", f"/api/labs/{lab['lab_id']}/inline", {"sample": "bigbuckbunny", **body}, lab["token"], timeout=120
    )


def test_the_preset_is_the_pages_numbers():
    # the lab's gateway and transcode are the page's: 60 s and 600 s, so the inline request must 504
    assert PRESET["gateway_timeout"] == C0["gateway_timeout_s"]
    assert PRESET["job_duration"] == C0["inline_transcode_s"]
    assert C0["inline_gets_504"]


def test_try2_inline_request_ends_in_a_504_at_the_gateway_timeout(api, measured):
    lab = api.lab("ch0", speed=1000)
    res = inline(api, lab)
    assert res.status == 504, res.body
    body = res.json()
    assert body["error"] == "gateway_timeout"
    started = events_of(api, lab, "inline.started")[0]
    gave_up = wait_event(api, lab, "inline.gateway_timeout", by=started["t_sim"] + 2 * C0["gateway_timeout_s"])[0]
    waited = gave_up["t_sim"] - started["t_sim"]
    assert waited == pytest.approx(C0["gateway_timeout_s"])
    assert body["simulated_s"] == pytest.approx(C0["gateway_timeout_s"])
    assert waited * 1000 / C0["api_budget_ms"] > 1  # far past the API budget before the proxy even gives up
    measured.update(
        status=res.status,
        held_simulated_s=waited,
        gateway_timeout_s=C0["gateway_timeout_s"],
        times_the_budget=waited * 1000 / C0["api_budget_ms"],
    )


def test_check1_4_the_server_transcodes_on_for_nobody_after_the_504(api, measured):
    lab = api.lab("ch0", speed=1000)
    assert inline(api, lab).status == 504
    # still running: the request thread is still held, so a second inline request is refused meanwhile
    again = inline(api, lab)
    finished = wait_event(api, lab, "inline.finished")[0]
    started = events_of(api, lab, "inline.started")[0]
    assert finished["data"]["answered"] is False
    ran = finished["t_sim"] - started["t_sim"]
    assert ran >= C0["inline_transcode_s"]  # it ran the whole transcode, for nobody
    assert again.status == 409 and again.json()["error"] == "inline_busy"
    measured.update(ran_for_nobody_s=ran - C0["gateway_timeout_s"], transcode_s=ran, second_request=again.status)


def test_try3_check3_enqueue_answers_202_and_the_job_carries_on_in_a_worker(api, measured):
    lab = api.lab("ch0", speed=JOB_SPEED)
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "bigbuckbunny"}, lab["token"])
    assert res.status == 202, res.body
    body = res.json()
    assert body["status_url"].endswith(body["job_id"])
    assert not events_of(api, lab, "job.succeeded")  # answered before the work was done
    job = api.call("GET", body["status_url"], token=lab["token"]).json()  # durably recorded
    assert job["state"] in ("queued", "running")
    done = wait_event(api, lab, "job.succeeded", timeout=90)[0]
    enq = events_of(api, lab, "job.enqueued")[0]
    took = done["t_sim"] - enq["t_sim"]
    assert took >= PRESET["job_duration"]  # the work happened after the response, in a worker
    measured.update(status=res.status, enqueue_ms_on_server=body["enqueue_ms"], job_done_after_s=took)


def test_try4_paused_after_the_202_the_job_is_running_not_done(api, measured):
    """The claims list's row says what a paused lab shows: the idle worker has the job (running), not the queue."""
    lab = api.lab("ch0", speed=JOB_SPEED)
    lid, tok = lab["lab_id"], lab["token"]
    api.workers_ready(lab, PRESET["workers"])  # the row's premise: an idle worker, not one still starting
    res = api.call("POST", f"/api/labs/{lid}/jobs", {"sample": "bigbuckbunny"}, tok)
    assert res.status == 202
    claimed = wait_event(api, lab, "job.claimed", timeout=60)[0]
    paused = api.call("POST", f"/api/labs/{lid}/clock", {"action": "pause"}, tok).json()["clock"]
    sim_time_passes(api, JOB_SPEED, 200)  # 200 s on a running clock; this one stands still
    snap = api.snapshot(lab)
    job = api.call("GET", res.json()["status_url"], token=tok).json()
    enq = events_of(api, lab, "job.enqueued")[0]
    assert snap["clock"]["t"] == pytest.approx(paused["t"])
    assert claimed["t_sim"] - enq["t_sim"] < PRESET["job_duration"] * REL  # picked up at once by the idle worker
    assert job["state"] == "running" and not events_of(api, lab, "job.succeeded")
    assert "running" in chapters.BY_ID["ch0.pause"].claim  # the claims list says so too
    api.call("POST", f"/api/labs/{lid}/clock", {"action": "resume"}, tok)
    wait_event(api, lab, "job.succeeded", timeout=90)
    measured.update(
        state_while_paused=job["state"],
        clock_t=snap["clock"]["t"],
        claimed_after_s=round(claimed["t_sim"] - enq["t_sim"], 3),
    )


def test_try5_a_gateway_timeout_above_the_transcode_gets_a_200_after_the_whole_transcode(api, measured):
    # as far above the transcode as the setting goes: real ffmpeg on a busy shared machine can take seconds
    gateway = settings.BY_NAME["gateway_timeout"].max
    assert gateway > C0["inline_transcode_s"]
    lab = api.lab("ch0", speed=200, gateway_timeout=gateway)
    res = inline(api, lab)
    assert res.status == 200, res.body
    held = res.json()["simulated_s"]
    assert C0["inline_transcode_s"] <= held < gateway
    measured.update(status=res.status, held_simulated_s=held, gateway_timeout_s=gateway)


def test_check2_request_slots_are_littles_law(api, measured):
    tx = next(j for j in chapters.derive()["ch2"]["job_mix"] if j["job_type"] == "transcode")
    slots = tx["rate_per_s"] * C0["inline_transcode_s"]
    assert f"{num(slots)} request slots" in page_text(api, 0)
    measured.update(request_slots=slots)


def test_try5_at_1000x_an_inline_transcode_takes_its_duration_and_the_readout_says_the_clock_slowed(api, measured):
    """The inline handler keeps the honest clock as a worker does: at the top speed the request takes the
    transcode's simulated duration, never that plus ffmpeg's overrun, and the answer says whether the clock had
    to wait. Beside two CPU hogs, the page's 600 s transcode (0.6 real s at 1000×) may or may not outrun the
    small sample's ffmpeg; a 10 s one (10 real ms) cannot, so there the clock must have slowed."""
    speed = settings.BY_NAME["speed"].max
    duration = C0["inline_transcode_s"]
    lab = api.lab("ch0", speed=speed, gateway_timeout=settings.BY_NAME["gateway_timeout"].max)
    with cpu_hogs(2):
        started = time.monotonic()
        res = inline(api, lab)
        real_s = time.monotonic() - started
        short = inline(api, lab, duration_s=10)
    assert res.status == 200, res.body
    assert short.status == 200, short.body
    d, q = res.json(), short.json()
    measured.update(
        speed=speed,
        simulated_s=d["simulated_s"],
        real_s=round(real_s, 3),
        running_speed=d["running_speed"],
        clock_slowed=d["clock_slowed"],
        short_simulated_s=q["simulated_s"],
        short_running_speed=q["running_speed"],
    )
    assert d["simulated_s"] == pytest.approx(duration, abs=1), "the request's simulated time is not the transcode's"
    assert d["clock_slowed"] == (d["running_speed"] < 0.9 * speed), f"the readout misreports the clock: {d}"
    assert q["simulated_s"] == pytest.approx(10, rel=REL), "a transcode ffmpeg outran still took its duration"
    assert q["clock_slowed"] and q["running_speed"] < speed, f"ffmpeg cannot run in 10 ms; the clock waited: {q}"
