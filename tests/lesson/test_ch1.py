"""Chapter 1, Task Queue Anatomy, on the running lab: every "Try this" step and the self-check answers
the lab can show. Times are the lab's own simulated event times (`t_sim`); tolerances are real hand-off
slack (an RQ pick-up, a reaper scan) times the clock speed. Durations come from the ch1 preset's buttons
(the chapter homes, gathered by chapters) and the numbers model, the sources the page renders.
"""

from __future__ import annotations

import pytest

import chapters
from chapters import RACES
from tests.lesson import races
from tests.lesson.helpers import (
    HANDOFF_REL,
    REL,
    busy_worker,
    button,
    enqueue,
    events_of,
    job,
    kill,
    of_type,
    page_text,
    press,
    settled,
    wait_event,
)

C1 = chapters.derive()["ch1"]
PRESET = chapters.settings_for("ch1")
SPEED = 200
SHORT = button("ch1", "vt-too-short")["settings"]  # "VT too short": lease 300 s, job 600 s


def test_lesson_note_fixed_vt_ratio_is_on_the_page(api, measured):
    note = next(n for n in C1["lesson_notes"] if n["id"] == "fixed_vt_ratio")
    text = page_text(api, 1)
    assert "Where we differ from the lesson" in text and note["ours"] in text and "rounds this to 2×" in text
    measured.update(lesson=note["values"]["lesson"], ours=round(note["values"]["ours"], 3))


def test_the_buttons_are_the_lessons_numbers():
    assert SHORT["vt_seconds"] == C1["visibility_timeout_s"] and SHORT["job_duration"] == C1["transcode_mean_s"]
    assert PRESET["guard"] == "off"  # chapter 1's world: no job-record guard


def test_try1_check1_check5_vt_too_short_runs_twice_done_once_and_claim_backs_off(api, measured):
    vt, dur = SHORT["vt_seconds"], SHORT["job_duration"]
    lab = api.lab("ch1", speed=SPEED)
    api.workers_ready(lab, PRESET["workers"])
    job_id = press(api, lab, "ch1", "vt-too-short")[0]
    snap = api.wait_for(lab, lambda s: s["counts"]["duplicate_completions"] == 1 and settled(s), timeout=120)
    ev = api.events(lab)
    a, b = of_type(ev, "job.claimed")[:2]
    assert a["worker_id"] != b["worker_id"]
    assert b["t_sim"] - a["t_sim"] == pytest.approx(vt, rel=HANDOFF_REL)  # B starts at the VT while A is busy
    done = of_type(ev, "job.succeeded")
    assert len(done) == 1 and done[0]["attempt"] == 1  # done once, by A
    assert done[0]["t_sim"] - a["t_sim"] == pytest.approx(dur, rel=REL)  # at 600 s
    dup = of_type(ev, "job.duplicate_completed")[0]
    assert dup["t_sim"] - b["t_sim"] == pytest.approx(dur, rel=REL)  # B's completion one job after its start (900 s)
    overlap = done[0]["t_sim"] - b["t_sim"]
    assert overlap == pytest.approx(C1["collision_overlap_s"], rel=HANDOFF_REL)  # the page's overlap figure
    assert snap["counts"]["done"] == 1 and snap["counts"]["duplicates_blocked"] == 0
    b_ran = dup["t_sim"] - b["t_sim"]
    # then guard claim and press it again: B's copy backs off at the VT; nothing is transcoded twice
    lab2 = api.lab("ch1", speed=SPEED, guard="claim")
    api.workers_ready(lab2, PRESET["workers"])
    job2 = press(api, lab2, "ch1", "vt-too-short")[0]
    snap2 = api.wait_for(lab2, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    ev2 = api.events(lab2)
    claimed = of_type(ev2, "job.claimed")
    blocked = of_type(ev2, "job.duplicate_blocked")
    assert len(claimed) == 1 and blocked
    assert blocked[0]["t_sim"] - claimed[0]["t_sim"] == pytest.approx(vt, rel=HANDOFF_REL)
    assert snap2["counts"]["duplicate_completions"] == 0 and snap2["counts"]["duplicates_blocked"] >= 1
    assert job(api, lab2, job2)["message"]["state"] == "deleted"  # A deleted it; B left it in flight
    measured.update(
        off={
            "done": snap["counts"]["done"],
            "second_start_s": round(b["t_sim"] - a["t_sim"], 1),
            "done_at_s": round(done[0]["t_sim"] - a["t_sim"], 1),
            "overlap_s": round(overlap, 1),
            "second_ran_s": round(b_ran, 1),
            "model_overlap_s": C1["collision_overlap_s"],
        },
        claim={
            "done": snap2["counts"]["done"],
            "duplicates_blocked": snap2["counts"]["duplicates_blocked"],
            "transcodes": len(claimed),
        },
        job=job_id,
    )


def test_try2_a_killed_workers_job_returns_one_vt_after_the_claim(api, measured):
    vt = C1["fixed_vt_s"]  # "move the VT above the job's duration": the page's static fix
    assert vt > C1["transcode_mean_s"]
    lab = api.lab("ch1", speed=SPEED, vt_seconds=vt, heartbeat=False)
    api.workers_ready(lab, 2)
    enqueue(api, lab)
    claimed = wait_event(api, lab, "job.claimed")[0]
    kill(api, lab, claimed["worker_id"])
    # the lease runs out at claim + VT: by twice the VT the reaper has seen it, or it never will
    expired = wait_event(api, lab, "lease.expired", timeout=120, by=claimed["t_sim"] + 2 * vt)[0]
    redelivered = wait_event(api, lab, "job.redelivered", timeout=60, by=expired["t_sim"] + vt)[0]
    # nothing happens at the kill: the job comes back when the lease runs out, claim + VT
    assert expired["data"]["deadline"] == pytest.approx(claimed["t_sim"] + vt, abs=1)
    assert redelivered["t_sim"] >= claimed["t_sim"] + vt - 1e-3  # event times are rounded to the ms
    kill_t = next(e["t_sim"] for e in events_of(api, lab, "worker.killed"))
    measured.update(
        vt_s=vt,
        killed_after_claim_s=round(kill_t - claimed["t_sim"], 1),
        redelivered_after_claim_s=round(redelivered["t_sim"] - claimed["t_sim"], 1),
    )


def test_try3_check4_ack_early_loses_a_killed_workers_job_ack_late_does_not(api, measured):
    out = {}
    for mode in ("early", "late"):
        lab = api.lab(
            "ch1",
            speed=SPEED,
            ack_mode=mode,
            vt_seconds=SHORT["vt_seconds"],
            heartbeat=False,
            job_duration=SHORT["job_duration"],
        )
        api.workers_ready(lab, PRESET["workers"])
        job_id = enqueue(api, lab)
        kill(api, lab, busy_worker(api, lab, job_id)["id"])
        if mode == "early":
            snap = api.wait_for(lab, lambda s: s["counts"]["lost"] == 1, timeout=60)
            assert snap["counts"]["redelivered"] == 0  # the broker recorded a delete: nothing comes back
        else:
            snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1, timeout=120)
            assert snap["counts"]["lost"] == 0 and snap["counts"]["redelivered"] >= 1
        out[mode] = {"lost": snap["counts"]["lost"], "redelivered": snap["counts"]["redelivered"]}
    assert C1["ack_early_lost_per_day"] > 0  # check 4's figure: the page prices what the lab just lost
    measured.update(out, model_lost_per_day=C1["ack_early_lost_per_day"])


def test_try4_check3_heartbeat_no_redelivery_while_alive_and_a_crash_returns_within_one_extension(api, measured):
    extend = C1["heartbeat_extend_s"]
    hb = button("ch1", "fix-heartbeat")["settings"]
    assert hb["vt_seconds"] < hb["job_duration"]  # the short VT, a long job
    lab = api.lab("ch1", speed=SPEED, heartbeat_interval=C1["heartbeat_interval_s"], heartbeat_extend=extend)
    api.workers_ready(lab, PRESET["workers"])
    press(api, lab, "ch1", "fix-heartbeat")
    alive = api.wait_for(lab, lambda s: s["counts"]["done"] == 1, timeout=120)
    assert alive["counts"]["redelivered"] == 0 and alive["counts"]["leases_extended"] >= 1
    # now kill it a moment after its claim, before its first beat
    job_id = enqueue(api, lab, sample="bigbuckbunny", duration_s=hb["job_duration"])
    w = busy_worker(api, lab, job_id)
    kill(api, lab, w["id"])
    red = wait_event(api, lab, "job.redelivered", timeout=60, where=lambda e: e.get("job_id") == job_id)[0]
    ev = [e for e in api.events(lab) if e.get("job_id") == job_id or e["type"] == "worker.killed"]
    claimed = [e for e in of_type(ev, "job.claimed") if e.get("job_id") == job_id][0]
    kill_t = [e for e in of_type(ev, "worker.killed") if e["t_sim"] >= claimed["t_sim"]][0]["t_sim"]
    assert claimed["data"]["lease_deadline"] == pytest.approx(claimed["t_sim"] + extend, abs=0.01)
    assert red["t_sim"] - claimed["t_sim"] == pytest.approx(extend, rel=REL)  # one extension, not VT or job
    assert red["t_sim"] - claimed["t_sim"] < hb["job_duration"]
    # check 3 on the page: "Heartbeat: at {expiry} s — one extension after the last beat"
    assert C1["heartbeat_redelivered_at_s"] - C1["heartbeat_crash_at_s"] <= extend
    measured.update(
        alive_redelivered=alive["counts"]["redelivered"],
        leases_extended=alive["counts"]["leases_extended"],
        killed_after_claim_s=round(kill_t - claimed["t_sim"], 1),
        redelivered_after_claim_s=round(red["t_sim"] - claimed["t_sim"], 1),
        extension_s=extend,
    )


def _expire_now(api, guard: str) -> tuple[dict, list[dict], str]:
    lab = api.lab(
        "ch1",
        speed=SPEED,
        vt_seconds=C1["fixed_vt_s"],
        heartbeat=False,
        guard=guard,
        job_duration=C1["transcode_mean_s"],
    )
    api.workers_ready(lab, PRESET["workers"])
    job_id = enqueue(api, lab)
    busy_worker(api, lab, job_id)
    # pressed while the job runs, as a learner would (and as the guided step does, at its first tenth): pressed
    # in the instant its attempt holds the clock to check its input, both copies would start at one simulated
    # moment and tie, and either could finish first
    api.wait_for(
        lab,
        lambda s: any(w.get("job_id") == job_id and (w.get("progress") or 0) >= 10 for w in s["workers"]),
        timeout=60,
    )
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs/{job_id}/lease/expire", {}, lab["token"])
    assert res.status == 200, res.body
    key = "duplicate_completions" if guard == "off" else "duplicates_blocked"
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1 and s["counts"][key] >= 1 and settled(s), timeout=120)
    return snap, api.events(lab), job_id


def test_try5_expire_now_off_two_workers_first_finisher_counts_claim_one_worker(api, measured):
    snap, ev, _ = _expire_now(api, "off")
    claims = of_type(ev, "job.claimed")
    assert len(claims) == 2 and claims[0]["worker_id"] != claims[1]["worker_id"]  # two workers on one job
    done = of_type(ev, "job.succeeded")
    assert len(done) == 1 and done[0]["attempt"] == 1  # the first to finish counts
    assert of_type(ev, "job.duplicate_completed")[0]["attempt"] == 2  # the second is "completed again"
    snap2, ev2, _ = _expire_now(api, "claim")
    claims2 = of_type(ev2, "job.claimed")
    assert len(claims2) == 1  # one worker: the second copy backed off
    assert of_type(ev2, "job.duplicate_blocked") and snap2["counts"]["duplicate_completions"] == 0
    text = page_text(api, 1)
    assert "Guard off : two, and the first to finish counts" in text
    assert "guard claim : one — the second copy finds the record running and backs off" in text
    measured.update(
        off={"workers_on_job": len(claims), "winner_attempt": done[0]["attempt"]},
        claim={"workers_on_job": len(claims2), "duplicates_blocked": snap2["counts"]["duplicates_blocked"]},
    )


def test_check6_a_heartbeat_interval_longer_than_the_extension_redelivers_a_healthy_worker(api, measured):
    extend = C1["heartbeat_extend_s"]
    hb = button("ch1", "fix-heartbeat")["settings"]
    lab = api.lab("ch1", speed=SPEED, heartbeat_extend=extend, heartbeat_interval=extend * 1.5)
    api.workers_ready(lab, PRESET["workers"])
    press(api, lab, "ch1", "fix-heartbeat")
    snap = api.wait_for(lab, lambda s: s["counts"]["redelivered"] >= 1, timeout=120)
    assert snap["counts"]["lost"] == 0 and not events_of(api, lab, "worker.killed")  # nobody crashed
    measured.update(
        interval_s=extend * 1.5, extension_s=extend, redelivered=snap["counts"]["redelivered"], job_s=hb["job_duration"]
    )


# --- the lease race (chapters/ch1/ RACES "lease"): the same job in three lanes that differ only in the lease ---

RACE_SPEED = 100  # the figure: every lane's first claim and redelivery within 1 simulated second


def lease_race(api, hogs: int) -> dict:
    """Run the lease race with `hogs` CPU hogs beside it: per lane, pairs of one job's attempts that ran at
    once; every lane's first-claim lags; the spread of the lanes' clocks while running; when lane A's copy
    was claimed."""
    rc = RACES["lease"]
    vt, dur = rc["variants"][0]["settings"]["vt_seconds"], rc["base"]["job_duration"]
    race = races.open_race(api, "lease", RACE_SPEED)
    with races.cpu_hogs(hogs):
        spreads = races.run(
            api,
            race,
            lambda st: (
                all(lab["clock"]["t_raw"] > vt + dur for lab in st["labs"])
                and st["labs"][0]["counts"]["duplicate_completions"] == 1
            ),
        )
    out = {"runs_at_once": {}, "attempts": {}, "lags": [], "spread": max(spreads)}
    for lane in race["labs"]:
        lab = races.lane_lab(lane)
        ev = api.events(lab)
        out["lags"] += races.claim_lags(ev)
        out["runs_at_once"][lane["label"]] = sum(
            races.overlapping_runs(job(api, lab, e["job_id"])["attempts"]) for e in of_type(ev, "job.enqueued")
        )
        out["attempts"][lane["label"]] = len(of_type(ev, "job.claimed"))  # every delivery a worker ran
        if lane["side"] == "a":
            first, copy = of_type(ev, "job.claimed")[:2]
            out["copy_claimed_after_s"] = copy["t_sim"] - first["t_sim"]
    return out


def test_race_lease_vt300_runs_the_job_twice_at_once_vt1200_and_heartbeat_never(api, measured):
    vt = RACES["lease"]["variants"][0]["settings"]["vt_seconds"]
    for hogs in (0, 2):  # a quiet box, then a loaded one
        got = lease_race(api, hogs)
        measured[f"{hogs}_cpu_hogs"] = {
            "runs_at_once": got["runs_at_once"],
            "attempts": got["attempts"],
            "lane_clock_spread_max": got["spread"],
            "first_claim_lag_max_s": max(got["lags"]),
            "copy_claimed_after_s": got["copy_claimed_after_s"],
        }
        assert got["runs_at_once"] == {"VT 300 s": 1, "VT 1,200 s": 0, "VT 300 s + heartbeat": 0}, got
        # the predictions' why: a lease that outlives the job, or one a heartbeat keeps pushing, is never seen again
        assert got["attempts"] == {"VT 300 s": 2, "VT 1,200 s": 1, "VT 300 s + heartbeat": 1}, got
        # the copy starts on the idle worker the instant the lease ends
        assert got["copy_claimed_after_s"] == pytest.approx(vt, abs=1), got
        assert max(got["lags"]) <= 1, f"{hogs} hogs: a job waited {max(got['lags']):.1f} simulated s for an idle worker"
        assert got["spread"] <= 0.01, f"{hogs} hogs: the lanes' clocks drifted {got['spread']:.1%} apart"


def test_scenario_vt_too_short_runs_the_job_twice_done_at_600_duplicate_at_900(api, measured):
    """The shared scenario link /s/vt-too-short (app/links.py), set up through the API as its banner does."""
    sc = chapters.SCENARIOS["vt-too-short"]
    vt, dur = sc["settings"]["vt_seconds"], sc["enqueue"]["duration_s"]
    lab = api.lab(sc["preset"], speed=RACE_SPEED, **sc["settings"])
    api.workers_ready(lab, sc["settings"]["workers"])
    for _ in range(sc["count"]):
        enqueue(api, lab, **sc["enqueue"])
    snap = api.wait_for(lab, lambda s: s["counts"]["duplicate_completions"] == 1 and settled(s), timeout=120)
    ev = api.events(lab)
    (queued,) = of_type(ev, "job.enqueued")
    a, b = of_type(ev, "job.claimed")
    (done,) = of_type(ev, "job.succeeded")
    (dup,) = of_type(ev, "job.duplicate_completed")
    t0 = queued["t_sim"]
    at = {
        "first_claim": a["t_sim"] - t0,
        "second_claim": b["t_sim"] - t0,
        "done": done["t_sim"] - t0,
        "duplicate": dup["t_sim"] - t0,
    }
    measured.update({k: round(v, 3) for k, v in at.items()}, done_count=snap["counts"]["done"])
    assert a["worker_id"] != b["worker_id"] and snap["counts"]["done"] == 1
    # with the honest clock every moment is exact to a simulated second, hand-offs included
    assert at == pytest.approx({"first_claim": 0, "second_claim": vt, "done": dur, "duplicate": vt + dur}, abs=1), at
    assert at["done"] - at["second_claim"] == pytest.approx(dur - vt, abs=1)  # the overlap the banner states
