"""Chapter 1, Task Queue Anatomy: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import GAP, KILL_ON_CLAIM, LONG_JOB, LONG_TRANSCODE, SHOWS_LEASES
from core.lesson import Claim
from core.numbers import Inputs
from core.series import Chart, Lane, Mark, Panel, Span, g, timeline_table

SLUG = "task-queue-anatomy"  # the page is /chapters/1-task-queue-anatomy

PRESETS: dict[str, dict[str, Any]] = {
    "ch1": {
        "shows": SHOWS_LEASES,
        "title": "VT too short: 300 s lease, 600 s job",
        "settings": {"workers": 2, "vt_seconds": 300, "retry_policy": "none", "guard": "off"},
        "controls": ["upload", "kill", "vt_seconds", "heartbeat", "ack_mode", "guard", "clock"],
    },
    "ch1-heartbeat": {
        "shows": SHOWS_LEASES,
        "title": "Heartbeat: short lease, extended while alive",
        "settings": {"workers": 2, "vt_seconds": 300, "heartbeat": True, "guard": "off"},
        "controls": ["upload", "kill", "vt_seconds", "heartbeat", "clock"],
    },
}


_RUNS = {
    "kind": "number",
    "min": 1,
    "max": 20,
    "unit": "attempts",
    "measure": "attempts",
    "question": "How many attempts will this one job get (every delivery counts, duplicates included)?",
}
_CH1_BUTTONS: list[dict[str, Any]] = [
    {
        "id": "vt-too-short",
        "label": "VT too short",
        "settings": {"vt_seconds": 300, "heartbeat": False, "job_duration": 600},
        "enqueue": LONG_JOB,
        "hint": "Lease 300 s, job 600 s. Predict: what happens at t + 300 s while the first worker is still busy?",
        "predict": {
            **_RUNS,
            "id": "ch1-vt-too-short",
            "why": "The lease ({vt_seconds} s) ran out before the job ({job_duration} s) was done, so the broker "
            "made the message visible again and another worker took it while the first was still "
            "busy: every expiry before the job is acked is one more attempt ({measured} here), until "
            "the job finishes or its deliveries reach the dead-letter limit.",
        },
    },
    {
        "id": "fix-vt",
        "label": "Fix it: VT 1200 s",
        "settings": {"vt_seconds": 1200, "heartbeat": False, "job_duration": 600},
        "enqueue": LONG_JOB,
        "hint": "The lease now outlives the job. Predict the attempts and duplicates this job ends with.",
        "predict": {
            **_RUNS,
            "id": "ch1-fix-vt",
            "why": "A {vt_seconds} s lease outlives the {job_duration} s job, so the message stays invisible "
            "until the worker acks it: no other worker ever sees it ({measured} attempt(s) measured).",
        },
    },
    {
        "id": "fix-heartbeat",
        "label": "Fix it: heartbeat",
        "settings": {"vt_seconds": 300, "heartbeat": True, "job_duration": 600},
        "enqueue": LONG_JOB,
        "hint": "Short lease, extended while the worker lives. Kill the worker and time how soon the job comes back.",
        "predict": {
            "id": "ch1-fix-heartbeat",
            "kind": "choice",
            "measure": "attempts",
            "question": "The lease is still only 300 s, but with a heartbeat. Will the job run once, or more?",
            "choices": [["once", "once"], ["more", "twice or more"]],
            "buckets": {"once": [1, 1], "more": [2, 1000]},
            "why": "The heartbeat pushes the deadline to now + {heartbeat_extend} s every {heartbeat_interval} s "
            "while the worker lives, so a {vt_seconds} s lease never runs out under a live worker "
            "(a kill would bring the job back within one window). Attempts measured: {measured}.",
        },
    },
]
BUTTONS: dict[str, list[dict[str, Any]]] = {"ch1": _CH1_BUTTONS, "ch1-heartbeat": _CH1_BUTTONS[1:]}

# shared set-ups (an instructor's link): the preset plus settings, and the action that shows the effect
SCENARIOS: dict[str, dict[str, Any]] = {
    "vt-too-short": {
        "title": "VT too short",
        "preset": "ch1",
        # summary and hint ask; `outcome` states the answer and is shown only after the run's verdict
        "summary": "A 300 s lease on a 600 s transcode, no guard: the lease runs out while the first worker is "
        "still busy. Predict what the broker does then, and how many times the job runs.",
        "outcome": "The first worker finished at 600 s (done once); a second worker started the same job when the "
        "lease ran out at 300 s, ran on to 900 s and was counted as a duplicate: 300 s of overlap, "
        "600 s of transcoding done twice.",
        "settings": {
            "workers": 2,
            "vt_seconds": 300,
            "heartbeat": False,
            "job_duration": 600,
            "retry_policy": "none",
            "ack_mode": "late",
            "guard": "off",
        },
        "enqueue": {"sample": "bigbuckbunny", "duration_s": 600},
        "count": 1,
        "hint": "Predict: what happens at t + 300 s while the first worker is still busy? Type your guess, then "
        "run it; afterwards switch the guard to claim and run it again.",
        "button": "vt-too-short",
    },
}

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch1": [
        {
            "claim": "ch1.vt_short",
            "title": "VT too short, guard off",
            "do": [{"settings": {"guard": "off", "ack_mode": "late"}}, {"scenario": "vt-too-short"}],
            "moment": "job.redelivered",
            "look": "inflight",
            "says": "The lease ran out at t = {moment_t} s while the first worker was still busy, so a second worker "
            "started the same job: {measured} attempts of one job, the first finisher's result counted.",
        },
        {
            "claim": "ch1.kill_redelivery_after_vt",
            "title": "Kill a busy worker, VT above the job",
            "do": [
                {
                    "settings": {
                        "vt_seconds": 1200,
                        "heartbeat": False,
                        "job_duration": 600,
                        "guard": "off",
                        "ack_mode": "late",
                    }
                },
                {"enqueue": LONG_JOB},
                KILL_ON_CLAIM,
            ],
            "predict": {
                **GAP,
                "id": "ch1-step-kill",
                "measure": "gap:job.claimed:job.redelivered",
                "question": "You kill the busy worker right after it claims the job. How many simulated seconds "
                "after the claim is the job handed out again?",
            },
            "moment": "job.redelivered",
            "look": "queue",
            "says": "The job came back {measured} s after its claim: the broker waited out the whole "
            "{vt_seconds} s lease before it assumed the worker was gone.",
        },
        {
            "claim": "ch1.ack_early",
            "title": "Ack early, then kill",
            "do": [
                {"settings": {"vt_seconds": 1200, "heartbeat": False, "job_duration": 600, "ack_mode": "early"}},
                {"enqueue": LONG_JOB},
                KILL_ON_CLAIM,
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "jobs",
                "id": "ch1-step-ack-early",
                "measure": "counter:lost",
                "question": "Acks are early and the worker dies mid-job. How far will the lost counter move?",
            },
            "moment": "job.lost",
            "look": "readout-lost",
            "says": "The lost counter moved by {measured}: the message was deleted at the claim, so nothing could "
            "bring the job back. With acks late the same kill is redelivered.",
        },
        {
            "claim": "ch1.heartbeat",
            "title": "Heartbeat on, kill before the first beat",
            "do": [{"settings": {"guard": "off", "ack_mode": "late"}}, {"scenario": "fix-heartbeat"}, KILL_ON_CLAIM],
            "predict": {
                **GAP,
                "id": "ch1-step-heartbeat",
                "measure": "gap:job.claimed:job.redelivered",
                "question": "Heartbeat on, lease 300 s, and the worker dies a moment after its claim. How many "
                "simulated seconds after the claim is the job handed out again?",
            },
            "moment": "job.redelivered",
            "look": "queue",
            "says": "Back {measured} s after the claim: with the heartbeat on the first lease is one extension "
            "({heartbeat_extend} s) long, not the VT or the job's length.",
        },
        {
            "claim": "ch1.expire_now",
            "title": "Expire a busy worker's lease",
            "do": [
                {
                    "settings": {
                        "vt_seconds": 1200,
                        "heartbeat": False,
                        "job_duration": 600,
                        "guard": "off",
                        "ack_mode": "late",
                    }
                },
                {"enqueue": LONG_JOB},
                {"on": "job.progress", "expire": True},
            ],
            "predict": {
                "kind": "number",
                "min": 1,
                "max": 10,
                "unit": "workers",
                "id": "ch1-step-expire",
                "measure": "attempts",
                "question": "You cut the lease of a healthy, busy worker. How many workers end up running "
                "this job (guard off)?",
            },
            "moment": "job.redelivered",
            "look": "workers",
            "says": "{measured} workers ran it: the broker only saw a lease run out, so it handed the job out again "
            "while the first worker carried on; the first to finish counts.",
        },
    ],
}

RACES: dict[str, dict[str, Any]] = {
    "lease": {
        "title": "VT 300 vs VT 1200 vs heartbeat",
        "preset": "ch1",
        "vary": ["vt_seconds", "heartbeat"],
        "summary": "One 600 s transcode on two workers. A 300 s lease runs out mid-job: the idle second worker "
        "takes the copy and the job runs twice at once, from 300 s to 600 s. A 1,200 s lease or a "
        "heartbeat keeps it to one run.",
        "base": {"workers": 2, "job_duration": 600, "retry_policy": "none", "ack_mode": "late", "guard": "off"},
        "variants": [
            {"label": "VT 300 s", "settings": {"vt_seconds": 300, "heartbeat": False}},
            {"label": "VT 1,200 s", "settings": {"vt_seconds": 1200, "heartbeat": False}},
            {"label": "VT 300 s + heartbeat", "settings": {"vt_seconds": 300, "heartbeat": True}},
        ],
        "enqueue": LONG_TRANSCODE,
        "count": 1,
        "watch": [
            ["redelivered", "redelivered"],
            ["duplicate_completions", "duplicate runs finished"],
            ["leases_extended", "lease extensions"],
            ["done", "done"],
        ],
    },
}

# ---- the challenge: the learner writes the handler (core/challenges/, workers/challenge.py) ----

_REFERENCE = """\
def handle(ctx):
    # the job in ten parts; after each, the heartbeat: the lease now runs 120 s past this moment
    for part in range(1, 11):
        video = ctx.media.transcode("360p", part=part, of=10)
        ctx.lease.extend(120)
    ctx.storage.put(f"transcoded/{ctx.job.id}/360p.mp4", video)
"""

CHALLENGES: dict[str, dict[str, Any]] = {
    "keep-the-lease": {
        "chapter": 1,
        "title": "Keep the lease",
        "task": "The lease is 120 s; job 1 takes 600 s and the other 19 take 30 s each. Write the handler so that no "
        "job runs twice at once, and a job whose worker is killed still finishes: ack late, and keep the lease with "
        "a heartbeat.",
        "section": "two-fixes-one-clearly-better",
        "hint": "A lease that outlives its worker by less than a heartbeat finds a crash quickly and never "
        "expires under a live one (Two fixes, one clearly better).",
        # the lab's own heartbeat off: the handler's lease.extend is the only one
        "settings": {
            "workers": 4,
            "guard": "off",
            "vt_seconds": 120,
            "heartbeat": False,
            "ack_mode": "late",
            "max_receives": 10,
            "retry_policy": "none",
            "notify_guard": False,
        },
        # twenty jobs: one longer than the lease, nineteen within it, on four workers, so a copy of job 1 sent back
        # while it runs finds a free worker (the 19 short ones, and job 2 again, are through in about 200 s)
        "workload": [600, *[30] * 19],
        "deadline_s": 1800,
        "faults": [  # job 2's first worker is killed as it finishes, before it uploads
            {"job": 2, "attempt": 1, "op": "storage.put", "when": "before", "do": "crash"},
        ],
        "invariants": ["every_job_done", "one_at_a_time"],
        "starter_breaks": "one_at_a_time",  # the invariant the starter must break
        "starter": """\
def handle(ctx):
    video = ctx.media.transcode("360p")
    ctx.storage.put(f"transcoded/{ctx.job.id}/360p.mp4", video)
""",
        "reference": _REFERENCE,
        "mutants": {
            "no heartbeat after half the job": (
                _REFERENCE.replace(
                    "        ctx.lease.extend(120)", "        if part <= 5:\n            ctx.lease.extend(120)"
                ),
                "one_at_a_time",
            ),
            "a heartbeat shorter than a part": (_REFERENCE.replace("extend(120)", "extend(30)"), "one_at_a_time"),
            "parts longer than the lease": (
                _REFERENCE.replace("range(1, 11)", "range(1, 3)").replace("of=10", "of=2"),
                "one_at_a_time",
            ),
            "one long lease up front": (
                _REFERENCE.replace(
                    "    for part in range(1, 11):", "    ctx.lease.extend(100000)\n    for part in range(1, 11):"
                ).replace("        ctx.lease.extend(120)\n", ""),
                "every_job_done",
            ),
        },
    },
}


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch1.fixed_vt_note",
        1,
        "Two fixes",
        "Where we differ: 1,200 s is 1.33× the 900 s p99, not “roughly 2×”",
        "test_lesson_note_fixed_vt_ratio_is_on_the_page",
        status="model",
    ),
    Claim(
        "ch1.kill_redelivery_after_vt",
        1,
        "Try this 2",
        "With the VT above the job, a killed worker's job is picked up again one VT after its claim",
        "test_try2_a_killed_workers_job_returns_one_vt_after_the_claim",
    ),
    Claim(
        "ch1.vt_short",
        1,
        "Try this 1 / Check yourself 1, 5",
        "VT 300 s below a 600 s job, guard off: A runs "
        "0–600, B starts at 300 and runs to 900; done once at 600, B's completion a counted duplicate, 300 s "
        "of overlap. Guard claim: B backs off at 300 s, nothing transcoded twice",
        "test_try1_check1_check5_vt_too_short_runs_twice_done_once_and_claim_backs_off",
    ),
    Claim(
        "ch1.ack_early",
        1,
        "Try this 3 / Check yourself 4",
        "Ack early + kill: the job is lost (nothing comes back); ack late + kill: redelivered, nothing lost",
        "test_try3_check4_ack_early_loses_a_killed_workers_job_ack_late_does_not",
    ),
    Claim(
        "ch1.heartbeat",
        1,
        "Try this 4 / Check yourself 3",
        "Heartbeat: no redelivery while alive; a kill "
        "before the first beat is back one extension (180 s) after the claim, not the VT or the job's length",
        "test_try4_check3_heartbeat_no_redelivery_while_alive_and_a_crash_returns_within_one_extension",
    ),
    Claim(
        "ch1.expire_now",
        1,
        "Try this 5",
        "Expire now on a busy worker's lease: guard off, two workers and the "
        "first to finish counts; guard claim, one (chapter 3's first claimer wins)",
        "test_try5_expire_now_off_two_workers_first_finisher_counts_claim_one_worker",
    ),
    Claim(
        "ch1.interval_gt_extension",
        1,
        "Check yourself 6",
        "A heartbeat interval longer than the extension "
        "lets the lease lapse between beats: a healthy worker's job is redelivered",
        "test_check6_a_heartbeat_interval_longer_than_the_extension_redelivers_a_healthy_worker",
    ),
    Claim(
        "ch1.silence",
        1,
        "Check yourself 2",
        "A dead worker and a busy one both send nothing",
        status="thought",
        why="a reasoning question about what a broker can observe; try this 2 and 4 show its consequence",
    ),
    Claim(
        "ch1.race_lease",
        1,
        "Race: VT 300 vs VT 1200 vs heartbeat",
        "One 600 s transcode on two workers: "
        "with a 300 s lease the idle second worker takes the copy at 300 s and the job runs twice at once; a "
        "1,200 s lease or a heartbeat keeps it to one run. The lanes' clocks read the same instant (within 1 %) "
        "and every job is claimed within 1 simulated s, also beside two CPU hogs",
        "test_race_lease_vt300_runs_the_job_twice_at_once_vt1200_and_heartbeat_never",
    ),
    Claim(
        "ch1.scenario_vt_too_short",
        1,
        "Scenario /s/vt-too-short",
        "A 300 s lease on a 600 s transcode, no "
        "guard: a second worker starts the job at 300 s, the first finishes at 600 s (done once), the second "
        "at 900 s (a counted duplicate): 300 s of overlap",
        "test_scenario_vt_too_short_runs_the_job_twice_done_at_600_duplicate_at_900",
    ),
    Claim(
        "ch1.why_vt_too_short",
        1,
        "Predict first: VT too short (why)",
        "The lease ran out before the job was "
        "done, so another worker took it while the first was still busy: one more attempt per expiry",
        "test_try1_check1_check5_vt_too_short_runs_twice_done_once_and_claim_backs_off",
    ),
    Claim(
        "ch1.why_fix_vt",
        1,
        "Predict first: Fix it: VT 1200 s (why)",
        "A lease that outlives the job keeps "
        "the message invisible until the ack: no other worker ever sees it, one attempt",
        "test_race_lease_vt300_runs_the_job_twice_at_once_vt1200_and_heartbeat_never",
    ),
    Claim(
        "ch1.why_fix_heartbeat",
        1,
        "Predict first: Fix it: heartbeat (why)",
        "The heartbeat pushes the "
        "deadline while the worker lives, so a 300 s lease never runs out under it: the job runs once",
        "test_race_lease_vt300_runs_the_job_twice_at_once_vt1200_and_heartbeat_never",
    ),
    Claim(
        "ch1.caption_redelivery_timeline",
        1,
        "Chart: timeline of one transcode (caption)",
        "The duplicate "
        "starts when the visibility timeout runs out, while the original still runs: both workers spend the "
        "overlap on the same job",
        "test_try1_check1_check5_vt_too_short_runs_twice_done_once_and_claim_backs_off",
    ),
    Claim(
        "ch1.caption_heartbeat",
        1,
        "Chart: when a crash is noticed (caption)",
        "The heartbeat lease of a dead "
        "worker lapses one extension after the last beat it sent, long before a static VT would",
        "test_try4_check3_heartbeat_no_redelivery_while_alive_and_a_crash_returns_within_one_extension",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def _collision_overlap_s(vt: float, mean: float, p99: float) -> float:
    """Duplicated compute per collision: the original's remaining run after the VT fires (the
    lesson's 600 − 300 = 300 s). If the VT covers the typical job, only slow (p99) jobs collide."""
    duration = mean if vt < mean else p99
    return max(0.0, duration - vt)


def _redelivery_timeline(vt: float, duration: float) -> list[dict[str, Any]]:
    """Ch1's hand-walked timeline of one job under a visibility timeout."""
    rows = [{"t_s": 0.0, "actor": "Worker A", "event": "claims the message; broker hides it for the VT"}]
    if vt >= duration:
        rows.append({"t_s": duration, "actor": "Worker A", "event": "finishes and deletes the message"})
        return rows
    rows += [
        {"t_s": vt, "actor": "Broker", "event": "VT expires while A is still working; message visible again"},
        {"t_s": vt, "actor": "Worker B", "event": "claims the same message and starts a duplicate"},
        {"t_s": duration, "actor": "Worker A", "event": "finishes and deletes — B is still running"},
        {"t_s": vt + duration, "actor": "Worker B", "event": "finishes the duplicate: same work done twice"},
    ]
    return rows


def _heartbeat_timeline(inputs: Inputs, crash_at_s: float = 10.0) -> list[dict[str, Any]]:
    """Lease deadlines with heartbeats vs a static VT, for a worker that dies at `crash_at_s`."""
    beat, extend = inputs.heartbeat_interval_s, inputs.heartbeat_extend_s
    last_beat = math.floor(crash_at_s / beat) * beat
    rows = [{"t_s": 0.0, "event": f"claim; lease runs to t = {extend:g} s"}]
    for k in range(1, 4):
        t = k * beat
        rows.append({"t_s": t, "event": f"heartbeat (if alive): lease extended to t = {t + extend:g} s"})
    rows.append({"t_s": crash_at_s, "event": "worker crashes"})
    rows.append({"t_s": last_beat + extend, "event": "heartbeat lease expires → redelivered"})
    rows.append({"t_s": inputs.fixed_visibility_timeout_s, "event": "static VT would only expire now → redelivered"})
    return sorted(rows, key=lambda r: r["t_s"])


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    t = inputs.job("transcode")
    vt = inputs.visibility_timeout_s
    collides = vt < t.p99_s
    overlap = _collision_overlap_s(vt, t.mean_s, t.p99_s)
    collisions = inputs.transcodes_per_day * inputs.redelivery_bug_rate if collides else 0.0
    wasted_hours_day = collisions * overlap / 3600
    waste_day = wasted_hours_day * inputs.transcode_price_per_hour
    days_per_month = inputs.hours_per_month / 24
    lost_day = inputs.transcodes_per_day * inputs.crash_rate
    hb_safe = inputs.heartbeat_interval_s < inputs.heartbeat_extend_s
    return {
        "transcode_mean_s": t.mean_s,
        "transcode_p99_s": t.p99_s,
        "visibility_timeout_s": vt,
        "vt_covers_mean": vt >= t.mean_s,
        "vt_covers_p99": vt >= t.p99_s,
        "collision_overlap_s": overlap,
        "collisions_per_day": collisions,
        "wasted_worker_hours_per_day": wasted_hours_day,
        "redelivery_waste_usd_per_day": waste_day,
        "redelivery_waste_usd_per_month": waste_day * days_per_month,
        "fixed_vt_s": inputs.fixed_visibility_timeout_s,
        "fixed_vt_over_p99_x": inputs.fixed_visibility_timeout_s / t.p99_s,
        "fixed_vt_over_mean_x": inputs.fixed_visibility_timeout_s / t.mean_s,
        "fixed_vt_crash_detection_s": inputs.fixed_visibility_timeout_s,
        "fixed_vt_crash_detection_min": inputs.fixed_visibility_timeout_s / 60,
        "heartbeat_interval_s": inputs.heartbeat_interval_s,
        "heartbeat_extend_s": inputs.heartbeat_extend_s,
        "heartbeat_crash_detection_s": inputs.heartbeat_extend_s,
        "heartbeat_missed_beats": inputs.heartbeat_extend_s / inputs.heartbeat_interval_s,
        "heartbeat_safe": hb_safe,
        "ack_early_lost_per_day": lost_day,
        "ack_early_lost_per_month": lost_day * days_per_month,
        "ack_late_lost_per_day": 0,
        "redelivery_timeline": _redelivery_timeline(vt, t.mean_s),
        "heartbeat_timeline": _heartbeat_timeline(inputs),
        "delivery_guarantees": [
            {
                "guarantee": "at-most-once",
                "ack": "early (delete on claim)",
                "on_crash": "job lost",
                "lost_per_day": lost_day,
                "duplicates_per_day": 0.0,
            },
            {
                "guarantee": "at-least-once",
                "ack": "late (delete after success)",
                "on_crash": "redelivered after the VT",
                "lost_per_day": 0.0,
                "duplicates_per_day": collisions + lost_day,
            },
            {
                "guarantee": "effectively-once",
                "ack": "late + idempotent handler",
                "on_crash": "redelivered; duplicate is a no-op",
                "lost_per_day": 0.0,
                "duplicates_per_day": 0.0,
            },
        ],
        "vt_by_job_type": [
            {
                "job_type": jt.name,
                "label": jt.label,
                "mean_s": jt.mean_s,
                "p99_s": jt.p99_s,
                "vt_s": vt,
                "vt_covers_p99": vt >= jt.p99_s,
            }
            for jt in inputs.job_mix
        ],
    }


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another: so the page does no arithmetic."""
    c1 = fig["ch1"]
    hb = c1["heartbeat_timeline"]
    c1["heartbeat_crash_at_s"] = next((r["t_s"] for r in hb if r["event"] == "worker crashes"), 0.0)
    c1["heartbeat_redelivered_at_s"] = next(
        (r["t_s"] for r in hb if "heartbeat lease expires" in r["event"]), inputs.heartbeat_extend_s
    )
    c1["p99_collision_overlap_s"] = c1["transcode_p99_s"] - c1["visibility_timeout_s"]


def lesson_notes(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Where this chapter's figure corrects the lesson's own arithmetic (see chapters.derive)."""
    c1 = fig["ch1"]
    notes = []
    if abs(c1["fixed_vt_over_p99_x"] - 2) > 0.1:
        notes.append(
            {
                "id": "fixed_vt_ratio",
                "where": "Two fixes",
                "lesson": "VT = 1,200 s, “roughly 2× the 900 s p99”",
                "ours": f"{c1['fixed_vt_s']:,.0f} / {c1['transcode_p99_s']:,.0f} = {c1['fixed_vt_over_p99_x']:.2f}×",
                "why": f"the lesson rounds this to 2×; 1,200 s is 2× the {c1['transcode_mean_s']:,.0f} s mean "
                f"({c1['fixed_vt_over_mean_x']:.1f}×), not the p99. It still covers the p99, which is what matters.",
                "values": {"lesson": 2.0, "ours": c1["fixed_vt_over_p99_x"]},
            }
        )
    return notes


# ---- charts (core/series.py's shapes; chapters.chart_series gathers them) ----


def redelivery_timeline(inputs: Inputs, fig: dict) -> Chart:
    c1 = fig["ch1"]
    vt, dur = c1["visibility_timeout_s"], c1["transcode_mean_s"]
    collides = vt < dur
    if collides:
        lanes = (
            Lane("Broker", (Span(0, vt, "hidden", "outline"),)),
            Lane("Worker A", (Span(0, dur, "transcoding"),), note="done, deletes"),
            Lane("Worker B", (Span(vt, vt + dur, "same job again", "hatched", "accent-2"),)),
        )
        marks = (
            Mark(vt, f"VT runs out at {g(vt)} s: message visible again"),
            Mark(vt, f"overlap: {g(c1['collision_overlap_s'])} s", end=dur, tone="bad"),
        )
        summary = (
            f"Worker A works from 0 to {g(dur)} seconds. The message is hidden only until "
            f"{g(vt)} seconds, when Worker B claims it and runs the same job until "
            f"{g(vt + dur)} seconds, so both workers run the same job for "
            f"{g(c1['collision_overlap_s'])} seconds."
        )
    else:
        broker = [Span(0, dur, "hidden", "outline")]
        if vt > dur:
            broker.append(Span(dur, vt, f"lease would have run to {g(vt)} s", "dashed"))
        lanes = (
            Lane("Broker", tuple(broker)),
            Lane("Worker A", (Span(0, dur, "transcoding"),), note="done: deletes the message"),
            Lane("Worker B", note="never sees the message"),
        )
        marks = ()
        summary = (
            f"Worker A works from 0 to {g(dur)} seconds and deletes the message before the "
            f"{g(vt)}-second visibility timeout runs out; no other worker claims it."
        )
    return Chart(
        "redelivery_timeline",
        "timeline",
        "time since the first claim (simulated seconds)",
        panels=(Panel("", lanes),),
        marks=marks,
        summary=summary,
        x_min=0,
        x_max=max(vt, dur, *(r["t_s"] for r in c1["redelivery_timeline"])),
        table=timeline_table((Panel("", lanes),)),
    )


def heartbeat_vs_static_vt(inputs: Inputs, fig: dict) -> Chart:
    c1 = fig["ch1"]
    crash, expiry = c1["heartbeat_crash_at_s"], c1["heartbeat_redelivered_at_s"]
    static = c1["fixed_vt_s"]
    lanes = (
        Lane("Static VT", (Span(0, static, f"lease held by a dead worker → redelivered at {g(static)} s", "outline"),)),
        Lane("Heartbeat", (Span(0, expiry, f"redelivered at {g(expiry)} s", "outline"),)),
    )
    summary = (
        f"A worker dies at {g(crash)} seconds. With a static {g(static)}-second visibility "
        f"timeout the job is redelivered at {g(static)} seconds. With a heartbeat every "
        f"{g(c1['heartbeat_interval_s'])} seconds extending the lease by "
        f"{g(c1['heartbeat_extend_s'])} seconds, it is redelivered at {g(expiry)} seconds."
    )
    return Chart(
        "heartbeat_vs_static_vt",
        "timeline",
        "time since the claim (simulated seconds)",
        panels=(Panel("", lanes),),
        marks=(Mark(crash, f"✕ worker dies at t = {g(crash)} s", tone="bad"),),
        summary=summary,
        x_min=0,
        x_max=max(static, expiry),
        table=timeline_table((Panel("", lanes),)),
    )


CHARTS = {"redelivery_timeline": redelivery_timeline, "heartbeat_vs_static_vt": heartbeat_vs_static_vt}
