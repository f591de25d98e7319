"""Chapter 4, Retries & Backoff, on the running lab: the storage herd without and with jitter, the failing
poison pill per policy and the crashing pill. Every asserted number comes from `chapters.ch4.lab_model()` —
the ch4 preset's settings through the numbers model's formulas — which is what the page's "Try this" renders.
Times are the lab's simulated event times; tolerances are real hand-off slack times the clock speed.
"""

from __future__ import annotations

import pytest

import chapters
from chapters import RACES
from core import numbers
from tests.lesson import races
from tests.lesson.helpers import REL, button, enqueue, fault, job, num, of_type, page_text, patch, press, settled

C4 = chapters.derive()["ch4"]
LM = chapters.ch4.lab_model()
PRESET = chapters.settings_for("ch4")


def test_lesson_note_poison_backoff_is_on_the_page(api, measured):
    note = next(n for n in C4["lesson_notes"] if n["id"] == "poison_backoff_total")
    text = page_text(api, 4)
    assert note["ours"] in text and f"{num(C4['backoff_schedule_total_s'])} s" in text
    assert C4["backoff_between_attempts_s"] < C4["backoff_schedule_total_s"]
    measured.update(lesson=note["values"]["lesson"], ours=note["values"]["ours"])


def test_try_this_renders_the_lab_model(api):
    text = page_text(api, 4)
    assert f"so {LM['callers']} storage calls are in flight" in text
    assert f"the model's mean is {num(LM['jitter_mean_per_bucket'], 1)}" in text
    assert f"about {num(LM['jitter_expected_peak'], 1)}" in text
    assert f"the DLQ about {num(LM['poison_exponential_to_dlq_s'])} s after the first failure" in text


def test_caption_the_first_retry_wave_without_jitter_is_one_bucket_of_every_retry(api, measured):
    """The first-wave chart (a model figure): its caption and summary state the model's N retries in one bucket
    without jitter and the full-jitter band per bucket; the lab's own herd is try 1's test."""
    chart = chapters.ch4.jitter_first_wave(numbers.Inputs(), chapters.derive())
    text = page_text(api, 4)
    assert chart.summary in text
    assert f"Each bar is one synchronised wave of all {num(C4['outage_workers'])} retries" in text
    assert "Both shapes hold the same number of retries" in text
    measured.update(retries=C4["outage_workers"], full_jitter_per_bucket=C4["full_jitter_peak_per_bucket"])


def waves(hist, at, width=1.0):
    return [sum(n for b, n in hist if t - width / 2 <= b + 0.5 <= t + width / 2 + 1) for t in at]


def press_outage(api, lab) -> tuple[list[str], dict]:
    """ "3 jobs + storage outage" as the widget presses it (static/js/widget/controls.js): the jobs first, the
    outage once every upload part of theirs has made its first storage call. Returns the job ids and the fault."""
    b = button("ch4", "outage")
    snap = api.snapshot(lab)
    calls0 = snap["counts"]["storage_calls"]
    jobs = [enqueue(api, lab, **b["enqueue"]) for _ in range(b["count"])]
    want = calls0 + len(jobs) * snap["settings"]["upload_parts"]
    api.wait_for(
        lab,
        lambda s: s["counts"]["storage_calls"] >= want,
        timeout=60,
        every=0.05,
        what="every upload part's first storage call",
    )
    return jobs, fault(api, lab, **b["fault"])


def herd(api, policy: str, outage_first: bool = True, speed: int = 100) -> dict:
    """ "3 jobs + storage outage" on the ch4 preset with `policy`, in either order the page allows: the button
    (outage, then jobs), or the jobs first and the outage once every upload part is mid-call. Waits until
    every job is done; returns the storage-arrivals readout at 1 s buckets."""
    lab = api.lab("ch4", speed=speed, retry_policy=policy, jitter_seed=7, breaker=False)
    api.workers_ready(lab, LM["workers"])
    if outage_first:
        press(api, lab, "ch4", "outage")
    else:
        press_outage(api, lab)
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == LM["workers"], timeout=240)
    assert snap["counts"]["dlq"] == 0  # recovered inside the attempts once storage came back
    out = api.call("GET", f"/api/labs/{lab['lab_id']}/retries?bucket_s={LM['bucket_s']}", token=lab["token"]).json()
    api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])  # free the cores
    return out["storage"]


def test_try1_check1_without_jitter_the_whole_herd_comes_back_together(api, measured):
    st = herd(api, "exponential")
    assert st["callers"] == LM["callers"]
    assert st["schedule_s"][: len(LM["herd_at_s"])] == LM["herd_at_s"]
    # each caller's retries, from its own first failure: the whole herd at every time of the schedule
    got = waves(st["since_first_failure"], LM["herd_failing_at_s"])
    assert got == [LM["callers"]] * len(LM["herd_failing_at_s"]), st["since_first_failure"]
    assert st["peak_per_bucket"] >= LM["upload_parts"]
    measured.update(
        callers=st["callers"],
        waves_at_s=LM["herd_failing_at_s"],
        per_wave=got,
        peak_per_bucket=st["peak_per_bucket"],
        histogram=st["since_first_failure"],
    )


def test_try2_check2_full_jitter_flattens_the_peak(api, measured):
    st = herd(api, "full_jitter", outage_first=False)
    # the 36 parts mid-call fail together; a jittered part can use up its attempt's storage retries before the
    # outage ends, so its job's next attempt adds callers of its own — the peak is still the flat one
    assert st["callers"] >= LM["callers"]
    peak = st["peak_per_bucket"]
    # flatter than the unjittered herd (every caller in one bucket). Not as flat as the model's 36-caller peak:
    # at the preset a jittered part can spend its attempt's retries before storage returns, so its job retries
    # and adds callers (the page says so); the suite records both
    assert peak < LM["callers"]
    measured.update(
        peak_per_bucket=peak,
        callers=st["callers"],
        model_expected_peak=round(LM["jitter_expected_peak"], 2),
        model_mean=LM["jitter_mean_per_bucket"],
        model_no_jitter_peak=LM["callers"],
    )


@pytest.mark.parametrize("outage_first", [True, False], ids=["outage-then-jobs", "jobs-then-outage"])
def test_try2_in_either_order_full_jitters_tallest_bar_is_at_most_half_no_jitters(api, measured, outage_first):
    """The page says the outage and the jobs may come in either order. In both, the retried storage calls per
    1 s bar peak at the whole herd without jitter and at no more than half of it with full jitter. (A part's
    first call is no retry: with the outage first, every part's refused first call at its job's start used to
    stack the same 36-call wave on every policy's chart, so full jitter's tallest bar read 38–40 against 36.)"""
    st = {p: herd(api, p, outage_first=outage_first) for p in ("exponential", "full_jitter")}
    peaks = {p: v["peak_per_bucket"] for p, v in st.items()}
    runs = {p: [r["peak_per_bucket"] for r in v["runs"]] for p, v in st.items()}
    measured.update(
        order="outage first" if outage_first else "jobs first",
        peak_per_bucket=peaks,
        bucket_s=LM["bucket_s"],
        callers={p: v["callers"] for p, v in st.items()},
    )
    assert runs == {p: [n] for p, n in peaks.items()}, runs  # one outage, one run: its bars are the chart's
    assert peaks["exponential"] == LM["callers"], st["exponential"]["histogram"]
    assert 0 < 2 * peaks["full_jitter"] <= peaks["exponential"], st["full_jitter"]["histogram"]


def outage_dead_letters(api, policy: str) -> tuple[set[str], set[str], dict[str, str]]:
    """Press "3 jobs + storage outage" under `policy` and wait for every job to end. Returns the jobs the stream
    dead-letters, the jobs whose every attempt ended (failed or succeeded) before storage came back, and each
    job record's state."""
    lab = api.lab("ch4", speed=RACE_SPEED, retry_policy=policy)
    api.workers_ready(lab, LM["workers"])
    jobs, outage = press_outage(api, lab)
    api.wait_for(
        lab,
        lambda s: s["counts"]["done"] + s["counts"]["dlq"] == len(jobs) and settled(s),
        timeout=240,
        what=f"every job of the button done or dead-lettered under {policy}",
    )
    ev = [e for e in api.events(lab) if e.get("job_id") in jobs]
    dead = {e["job_id"] for e in of_type(ev, "job.dead_lettered")}
    inside = {
        j
        for j in jobs
        if all(
            e["t_sim"] <= outage["until"]
            for e in ev
            if e["job_id"] == j and e["type"] in ("job.failed", "job.succeeded")
        )
    }
    states = {j: job(api, lab, j)["state"] for j in jobs}
    api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])  # free the cores
    return dead, inside, states


def test_why_outage_a_job_dead_letters_only_if_all_its_attempts_land_inside_the_outage(api, measured):
    """The "3 jobs + storage outage" prediction's why: a job ends in the DLQ exactly when every one of its
    attempts ended inside the outage. The preset's backoff outlasts the outage; with no retries it does not."""
    for policy in (PRESET["retry_policy"], "none"):
        dead, inside, states = outage_dead_letters(api, policy)
        measured[policy] = {"dlq": len(dead), "all_attempts_inside_outage": len(inside)}
        assert dead == inside, (policy, dead, inside)
        assert {j for j, st in states.items() if st == "dlq"} == dead, (policy, states)
        assert len(dead) == (len(states) if policy == "none" else 0), (policy, states)


def poison(api, policy: str, speed: int = 200) -> tuple[list[dict], dict]:
    lab = api.lab("ch4", speed=speed, retry_policy=policy, jitter_seed=11)
    api.workers_ready(lab, LM["workers"])
    job_id = press(api, lab, "ch4", "poison-pill")[0]
    api.wait_for(lab, lambda s: s["counts"]["dlq"] == 1 and settled(s), timeout=120)
    return [e for e in api.events(lab) if e.get("job_id") == job_id], job(api, lab, job_id)


@pytest.mark.parametrize("policy", ["exponential", "fixed", "none"])
def test_try3_a_poison_pill_fails_max_attempts_times_with_the_policys_waits(api, measured, policy):
    ev, j = poison(api, policy)
    failed, claims = of_type(ev, "job.failed"), of_type(ev, "job.claimed")
    assert of_type(ev, "job.crashed") == []
    first_fail = failed[0]["t_sim"]
    to_dlq = of_type(ev, "job.dead_lettered")[0]["t_sim"] - first_fail
    if policy == "none":
        assert len(failed) == 1 and j["dlq_reason"] == "retry_policy none"
    else:
        assert len(failed) == len(claims) == LM["max_attempts"]
        assert j["dlq_reason"] == f"max_attempts ({LM['max_attempts']}) exhausted"
        delays = [e["data"]["delay"] for e in of_type(ev, "job.retry_scheduled")]
        want = (
            LM["poison_exponential_delays_s"]
            if policy == "exponential"
            else [LM["retry_base_s"]] * (LM["max_attempts"] - 1)
        )
        assert delays == want
        # each retry is claimed the instant its wait ends (the due barrier holds the clock there, at any load)
        for f, nxt, d in zip(failed, claims[1:], delays, strict=False):
            assert nxt["t_sim"] - f["t_sim"] == pytest.approx(d, rel=REL)
        # "about": the waits, plus each retried attempt's own few seconds of probing its input
        runs = sum(f["t_sim"] - c["t_sim"] for c, f in zip(claims[1:], failed[1:], strict=True))
        total = LM["poison_exponential_to_dlq_s"] if policy == "exponential" else LM["poison_fixed_to_dlq_s"]
        # (the event times are floats: 149.99999999999997 is the 150 s wait)
        assert to_dlq >= total - 1e-6 and to_dlq == pytest.approx(total + runs, rel=REL)
    measured.update(attempts=len(failed), first_failure_to_dlq_s=round(to_dlq, 1))  # recorded per policy


def test_try4_check5_a_crashing_pill_comes_back_by_its_lease_until_max_receives(api, measured):
    speed = 200
    lab = api.lab("ch4", speed=speed, respawn_delay=5)
    api.workers_ready(lab, LM["workers"])
    job_id = press(api, lab, "ch4", "crashing-pill")[0]
    snap = api.wait_for(lab, lambda s: s["counts"]["dlq"] == 1, timeout=180)
    ev = [e for e in api.events(lab) if e.get("job_id") == job_id]
    crashed, claims = of_type(ev, "job.crashed"), of_type(ev, "job.claimed")
    assert len(crashed) == LM["max_receives"] and of_type(ev, "job.failed") == []
    assert of_type(ev, "job.retry_scheduled") == []  # the retry policy is never asked
    assert f"max receives ({LM['max_receives']})" in job(api, lab, job_id)["dlq_reason"]
    gaps = [b["t_sim"] - a["t_sim"] for a, b in zip(claims, claims[1:], strict=False)]
    # each receive's lease (a heartbeat window: the pill dies before its first beat) runs out one window after its
    # claim; the next claim waits for that, then for a worker (the crashed one respawns)
    window = LM["crash_redelivery_s"]
    leases = [e["data"]["deadline"] - c["t_sim"] for c, e in zip(claims, of_type(ev, "lease.expired"), strict=True)]
    assert all(t == pytest.approx(window, rel=REL) for t in leases), leases
    assert all(g >= window - 1e-3 for g in gaps), gaps
    measured.update(
        crashes=len(crashed),
        redelivered=snap["counts"]["redelivered"],
        redelivery_gaps_s=[round(g, 1) for g in gaps],
        model_gap_s=LM["crash_redelivery_s"],
    )


def test_check3_uncapped_poison_pills_fill_the_pool(api, measured):
    text = page_text(api, 4)
    assert f"{num(C4['poison_uncapped_slots_after_day'])} worker slots" in text
    assert C4["poison_attempts_per_pill"] == numbers.Inputs().max_attempts
    measured.update(slots_after_day=C4["poison_uncapped_slots_after_day"])


def test_check4_a_retry_budget_bounds_the_time_to_failed(api, measured):
    assert C4["hang_time_to_dlq_with_budget_s"] < C4["hang_time_to_dlq_count_only_s"]
    assert f"Cap only: {num(C4['hang_time_to_dlq_count_only_s'])} s" in page_text(api, 4)
    measured.update(cap_only_s=C4["hang_time_to_dlq_count_only_s"], with_budget_s=C4["hang_time_to_dlq_with_budget_s"])


def dead_letters(api, lab) -> list[dict]:
    res = api.call("GET", f"/api/labs/{lab['lab_id']}/dlq", token=lab["token"])
    assert res.status == 200, res.body
    return res.json()["dead_letters"]


def replay(api, lab, reason: str) -> list[str]:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/dlq/replay", {"reason": reason}, lab["token"])
    assert res.status == 200, res.body
    return res.json()["replayed"]


@pytest.mark.timeout(900)  # three long waits in a row (DLQ, outage end, replay done), each up to 240 s
def test_try5_replay_by_reason_brings_back_only_the_outage_jobs_and_they_finish(api, measured):
    lab = api.lab("ch4", speed=500)
    api.workers_ready(lab, LM["workers"])
    patch(api, lab, classify_errors=True)  # "turn Non-retryable errors skip retries on"
    outage = fault(api, lab, type="storage_outage", duration_s=LM["replay_outage_s"])
    b = button("ch4", "outage")
    outage_jobs = [enqueue(api, lab, **b["enqueue"]) for _ in range(LM["workers"])]
    pill = press(api, lab, "ch4", "poison-pill")[0]
    api.wait_for(
        lab,
        lambda s: s["counts"]["dlq"] == len(outage_jobs) + 1 and settled(s),
        timeout=240,
        what="the outage jobs and the pill in the DLQ",
    )
    dead = {d["job_id"]: d["reason"] for d in dead_letters(api, lab)}
    assert {j: dead[j] for j in outage_jobs} == dict.fromkeys(outage_jobs, LM["replay_reason"])
    assert dead[pill].startswith("non_retryable")  # one attempt, straight to the DLQ
    ev = api.events(lab)
    assert len([e for e in of_type(ev, "job.claimed") if e["job_id"] == pill]) == 1
    dlq_after_first_claim = []
    for j in outage_jobs:  # every attempt spent under the outage, dead-lettered before it ended
        assert len([e for e in of_type(ev, "job.failed") if e["job_id"] == j]) == LM["max_attempts"]
        first = next(e for e in of_type(ev, "job.claimed") if e["job_id"] == j)["t_sim"]
        dead_at = next(e for e in of_type(ev, "job.dead_lettered") if e["job_id"] == j)["t_sim"]
        assert dead_at - first >= LM["outage_to_dlq_s"] - 0.001 and dead_at <= outage["until"]
        dlq_after_first_claim.append(round(dead_at - first, 1))
    text = page_text(api, 4)  # the step's set-up as the page gives it
    assert f"storage outage of {num(LM['replay_outage_s'])} s" in text and LM["replay_reason"] in text
    # the outage is over before the replay (the step says so)
    api.wait_for(lab, lambda s: s["clock"]["t"] >= outage["until"], timeout=120, every=0.2)

    back = replay(api, lab, LM["replay_reason"])
    assert sorted(back) == sorted(outage_jobs)  # exactly the jobs with that reason
    snap = api.wait_for(
        lab,
        lambda s: s["counts"]["done"] == len(outage_jobs) and settled(s),
        timeout=240,
        what="the replayed outage jobs finished",
    )
    assert snap["counts"]["dlq"] == 1 and [d["job_id"] for d in dead_letters(api, lab)] == [pill]
    for j in outage_jobs:
        assert job(api, lab, j)["state"] == "done"
    # replay the poison pill anyway: it fails once more and goes straight back
    after = api.events(lab)[-1]["id"]
    assert replay(api, lab, "non_retryable") == [pill]
    api.wait_for(
        lab,
        lambda s: (
            s["counts"]["dlq"] == 1
            and settled(s)
            and any(e["type"] == "job.dead_lettered" for e in api.events(lab, after))
        ),
        timeout=120,
        what="the replayed pill dead-lettered again",
    )
    again = [e for e in api.events(lab, after) if e.get("job_id") == pill]
    assert len(of_type(again, "job.failed")) == 1 and of_type(again, "job.retry_scheduled") == []
    assert of_type(again, "job.dead_lettered")[0]["data"]["reason"].startswith("non_retryable")
    assert api.snapshot(lab)["counts"]["done"] == len(outage_jobs)
    measured.update(
        outage_s=LM["replay_outage_s"],
        outage_to_dlq_s=LM["outage_to_dlq_s"],
        dlq_before=len(dead),
        dlq_after_first_claim_s=dlq_after_first_claim,
        reasons=sorted(set(dead.values())),
        replayed_by_reason=len(back),
        replayed_done=len(outage_jobs),
        pill_replay_attempts=len(of_type(again, "job.claimed")),
        dlq_after=len(dead_letters(api, lab)),
    )


# --- the jitter and retry-policy races (RACES in chapters/ch4/): one outage under the same six jobs, per policy ---

RACE_SPEED = 100


def race_storage(api, race_id: str) -> dict[str, dict]:
    """Run a race until every lane's jobs have finished (done or dead-lettered); per lane's retry policy, its
    storage arrivals (GET …/retries) and counts."""
    rc = RACES[race_id]
    race = races.open_race(api, race_id, RACE_SPEED)
    races.run(
        api,
        race,
        lambda st: all(lab["counts"]["done"] + lab["counts"]["dlq"] == rc["count"] for lab in st["labs"]),
        timeout=300,
    )
    st = api.ok("GET", f"/api/races/{race['race_id']}")
    out = {}
    for lane, lab in zip(race["labs"], st["labs"], strict=True):
        ret = api.ok("GET", f"/api/labs/{lane['lab_id']}/retries?bucket_s={LM['bucket_s']}", token=lane["token"])
        out[lane["settings"]["retry_policy"]] = {"storage": ret["storage"], "counts": lab["counts"]}
    return out


def test_race_jitter_fixed_retries_land_together_full_jitter_spreads_them(api, measured):
    lanes = race_storage(api, "jitter")
    fixed, jitter = (lanes[p]["storage"]["peak_since_first_failure"] for p in ("fixed", "full_jitter"))
    measured.update(peak_per_bucket={"fixed": fixed, "full_jitter": jitter}, bucket_s=LM["bucket_s"])
    assert fixed >= 2 * jitter, f"fixed peak {fixed} vs full jitter {jitter} per {LM['bucket_s']} s bucket"


def test_race_retry_policies_without_retries_the_outage_dead_letters_every_job_with_backoff_all_finish(api, measured):
    lanes = race_storage(api, "retry-policies")
    n = RACES["retry-policies"]["count"]
    got = {
        p: {
            "done": v["counts"]["done"],
            "dlq": v["counts"]["dlq"],
            "calls": v["storage"]["calls"],
            "callers": v["storage"]["callers"],
        }
        for p, v in lanes.items()
    }
    measured.update(lanes=got)
    # no retries: each storage caller calls once, inside the outage, and its job goes to the DLQ
    assert got["none"]["dlq"] == n and got["none"]["calls"] == got["none"]["callers"], got
    for policy in ("fixed", "exponential", "full_jitter"):  # a backoff waits the outage out: every job done
        assert got[policy]["done"] == n and got[policy]["calls"] > got[policy]["callers"], (policy, got)


def scenario_lab(api, scenario_id: str) -> dict:
    """A lab set up as the shared scenario link does (its preset and settings), its fault on, its jobs sent."""
    sc = chapters.SCENARIOS[scenario_id]
    lab = api.lab(sc["preset"], speed=RACE_SPEED, **sc["settings"])
    api.workers_ready(lab, sc["settings"]["workers"])
    fault(api, lab, **sc["fault"])
    for _ in range(sc.get("count", 1) if sc.get("enqueue") else 0):
        enqueue(api, lab, **sc["enqueue"])
    return lab


def test_scenario_retry_storm_every_call_fails_together_and_comes_back_together(api, measured):
    sc = chapters.SCENARIOS["retry-storm"]
    s = sc["settings"]
    lab = scenario_lab(api, "retry-storm")
    api.wait_for(lab, lambda snap: snap["counts"]["done"] == sc["count"], timeout=240)
    st = api.ok("GET", f"/api/labs/{lab['lab_id']}/retries?bucket_s=1", token=lab["token"])["storage"]
    callers = sc["count"] * s["upload_parts"]
    at = [s["retry_base"] * k for k in (1, 3, 7, 15)]  # the banner's 10, 30, 70 and 150 s: 1, 3, 7, 15 × the base
    got = waves(st["since_first_failure"], at)
    measured.update(callers=st["callers"], waves_at_s=at, per_wave=got)
    assert st["callers"] == callers
    assert got == [callers] * len(at), st["since_first_failure"]


def test_scenario_poison_pill_waits_10_20_40_80_and_the_fifth_failure_dead_letters(api, measured):
    s = chapters.SCENARIOS["poison-pill"]["settings"]
    lab = scenario_lab(api, "poison-pill")
    api.wait_for(lab, lambda snap: snap["counts"]["dlq"] == 1 and settled(snap), timeout=120)
    ev = api.events(lab)
    failed, claims = of_type(ev, "job.failed"), of_type(ev, "job.claimed")
    delays = [e["data"]["delay"] for e in of_type(ev, "job.retry_scheduled")]
    waited = [nxt["t_sim"] - f["t_sim"] for f, nxt in zip(failed, claims[1:], strict=False)]
    measured.update(attempts=len(failed), delays_s=delays, waited_s=[round(w, 3) for w in waited])
    assert len(failed) == len(claims) == s["max_attempts"]
    assert delays == [s["retry_base"] * 2**k for k in range(s["max_attempts"] - 1)]  # 10, 20, 40, 80 s
    assert waited == pytest.approx(delays, rel=REL)  # each retry claimed the instant its wait ended
    assert len(of_type(ev, "job.dead_lettered")) == 1
