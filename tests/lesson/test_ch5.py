"""Chapter 5, Idempotency, on the running lab: the claim guard stops the duplicate before it runs; with the
guard off the output-path and "notified" guards are the layer that still holds; the Idempotency-Key.
The "VT too short" button (chapters.BUTTONS) and the ch5 preset set the lab up exactly as the page says.
"""

from __future__ import annotations

import chapters
from chapters import RACES
from tests.lesson import races
from tests.lesson.helpers import num, of_type, page_text, press, settled

C5 = chapters.derive()["ch5"]
PRESET = chapters.settings_for("ch5")
SPEED = 200


def outbox(api, lab) -> list[dict]:
    return api.call("GET", f"/api/labs/{lab['lab_id']}/outbox", token=lab["token"]).json()["emails"]


def files(api, lab, job_id) -> list[str]:
    """The output paths the lab wrote for a job (`output.written` events; outputs are blobs in the server)."""
    return sorted(
        {e["data"]["path"] for e in api.events(lab) if e["type"] == "output.written" and e.get("job_id") == job_id}
    )


def vt_too_short(api, **settings) -> tuple[dict, str, dict]:
    lab = api.lab("ch5", speed=SPEED, **settings)
    api.workers_ready(lab, PRESET["workers"])
    job_id = press(api, lab, "ch5", "vt-too-short")[0]
    return lab, job_id, PRESET


def test_try1_claim_guard_one_run_one_file_per_rendition_one_email(api, stack, measured):
    assert PRESET["guard"] == "claim"  # this chapter's default
    lab, job_id, _ = vt_too_short(api)
    snap = api.wait_for(
        lab, lambda s: s["counts"]["done"] == 1 and settled(s) and s["counts"]["duplicates_blocked"] >= 1, timeout=120
    )
    ev = api.events(lab)
    assert len(of_type(ev, "job.claimed")) == 1  # one worker transcoded it
    got = files(api, lab, job_id)
    assert len(got) == 2  # one file per rendition
    emails = outbox(api, lab)
    assert len(emails) == 1
    measured.update(duplicates_blocked=snap["counts"]["duplicates_blocked"], files=got, emails=len(emails))


def test_try2_every_guard_off_files_and_emails_follow_the_runs(api, stack, measured):
    lab, job_id, _ = vt_too_short(api, guard="off", idempotent_outputs=False, notify_guard=False)
    snap = api.wait_for(lab, lambda s: s["counts"]["duplicate_completions"] >= 1 and settled(s), timeout=120)
    runs = len(of_type(api.events(lab), "job.claimed"))
    assert runs == 2
    emails = [e for e in outbox(api, lab) if e["job_id"] == job_id]
    got = files(api, lab, job_id)
    assert len(emails) == runs  # two runs, two emails
    assert len(got) == 2 * runs  # a second set of per-attempt files
    measured.update(runs=runs, emails=len(emails), files=got, completed_again=snap["counts"]["duplicate_completions"])


def test_try3_check2_output_path_and_notified_guards_hold_when_the_record_guard_is_off(api, stack, measured):
    lab, job_id, _ = vt_too_short(api, guard="off", idempotent_outputs=True, notify_guard=True)
    snap = api.wait_for(lab, lambda s: s["counts"]["duplicate_completions"] >= 1 and settled(s), timeout=120)
    runs = len(of_type(api.events(lab), "job.claimed"))
    assert runs == 2 and snap["counts"]["done"] == 1  # runs twice; the second is "completed again"
    assert len(files(api, lab, job_id)) == 2  # the same two paths, overwritten, not added
    emails = [e for e in outbox(api, lab) if e["job_id"] == job_id]
    assert len(emails) == 1
    assert snap["counts"]["emails_suppressed"] == 1
    measured.update(runs=runs, emails=len(emails), emails_suppressed=snap["counts"]["emails_suppressed"])


def test_try4_check1_same_idempotency_key_same_job_new_key_new_job(api, measured):
    lab = api.lab("ch5", speed=200, workers=0)
    path = f"/api/labs/{lab['lab_id']}/jobs"

    def send(key: str):
        res = api.call("POST", path, {"sample": "bigbuckbunny"}, lab["token"], headers={"Idempotency-Key": key})
        assert res.status == 202, res.body
        return res.json()["job_id"]

    first = send("upload-9931")
    again = send("upload-9931")
    other = send("upload-9932")
    assert again == first and other != first
    queued = api.snapshot(lab)["counts"]["queued"]
    assert queued == 2  # the resend did not grow the queue
    measured.update(first=first, resend=again, new_key=other, queued=queued)


def test_check3_doubling_the_vt_recomputes_the_dedup_window(api, measured):
    d2 = C5["doubled_vt"]
    # a model answer: the page states the model's recomputed gap, window and keys (not the formula redone here)
    assert d2["vt_s"] == 2 * C5["fixed_vt_s"] and d2["window_s"] >= d2["gap_s"]  # the window covers the new gap
    text = page_text(api, 5)
    assert f"= {num(d2['gap_s'])} s, rounded up to {num(d2['window_s'])} s" in text
    assert f"{num(d2['key_count'])} keys" in text
    measured.update(window_s=d2["window_s"], keys=d2["key_count"], key_mb=d2["key_mb"])


# --- the guard race (chapters/ch5/ RACES "guard"): one job, one lease too short, the claim guard off vs on ---

RACE_SPEED = 100


def test_race_guard_off_runs_both_copies_and_mails_twice_claim_runs_once_and_mails_once(api, measured):
    rc = RACES["guard"]
    vt, dur = rc["base"]["vt_seconds"], rc["base"]["job_duration"]
    race = races.open_race(api, "guard", RACE_SPEED)
    spreads = races.run(
        api,
        race,
        lambda st: (
            all(lab["clock"]["t_raw"] > vt + dur for lab in st["labs"])
            and st["labs"][0]["counts"]["duplicate_completions"] == 1
        ),
    )
    out, lags = {}, []
    for lane in race["labs"]:
        lab = races.lane_lab(lane)
        ev = api.events(lab)
        lags += races.claim_lags(ev)
        out[lane["settings"]["guard"]] = {
            "runs_at_once": sum(
                races.overlapping_runs(api.job(lab, e["job_id"]).json()["attempts"])
                for e in of_type(ev, "job.enqueued")
            ),
            "emails": len(outbox(api, lab)),
            "backed_off": len(of_type(ev, "job.duplicate_blocked")),
        }
    measured.update(lanes=out, lane_clock_spread_max=round(max(spreads), 4), first_claim_lag_max_s=max(lags))
    assert out["off"] == {"runs_at_once": 1, "emails": 2, "backed_off": 0}, out
    assert out["claim"] == {"runs_at_once": 0, "emails": 1, "backed_off": 1}, out
    assert max(lags) <= 1, f"a job waited {max(lags):.1f} simulated s for an idle worker"
    assert max(spreads) <= 0.01, f"the lanes' clocks drifted {max(spreads):.1%} apart"
