"""Chapter 4, Retries & Backoff: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import OUTAGE_JOB, SHOWS_RETRIES, settings_of
from core.backoff import exponential_delay, retry_bucket_s
from core.lesson import Claim
from core.numbers import SECONDS_PER_DAY, Inputs, jitter_expected_peak, jitter_peak_per_bucket, jitter_peak_reduction
from core.series import Chart, Lane, Mark, Panel, Point, Series, g

SLUG = "retries-and-backoff"  # the page is /chapters/4-retries-and-backoff
ADDON = "retries"  # its lab panel: templates/_lab_retries.html, static/js/lab-retries.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch4": {
        "shows": SHOWS_RETRIES,
        "title": "Retries, jitter and the DLQ",
        # the lesson's chapter 4: exponential backoff (10 s base: its 1, 3, 7, 15 s schedule ×10),
        # 5 attempts, a poison pill that fails through the policy (classification off, as in the
        # lesson), 3 workers × 12 upload parts = 36 storage callers for the herd, and a heartbeat so a
        # crashing pill's redeliveries come one reset window (180 s) apart
        "settings": {
            "job_duration": 300,
            "retry_policy": "exponential",
            "retry_base": 10,
            "retry_cap": 300,
            "max_attempts": 5,
            "max_receives": 5,
            "vt_seconds": 600,
            "heartbeat": True,
            "classify_errors": False,
            "upload_parts": 12,
            "workers": 3,
            "guard": "claim",
        },
        "controls": [
            "upload",
            "kill",
            "retry_policy",
            "max_attempts",
            "upload_parts",
            "classify_errors",
            "faults",
            "breaker",
            "dlq",
            "clock",
        ],
    },
}


def lab_model() -> dict[str, Any]:
    """What chapter 4's "Try this" says its lab (the ch4 preset) will show, from the preset's settings and
    the numbers model's jitter formulas: the storage herd's size and waves, full jitter's mean and expected
    tallest bucket, and the poison pill's attempts and waits per policy. The page and the conformance
    suite both read it."""
    s = settings_of(PRESETS["ch4"])
    base, cap, n_max = float(s["retry_base"]), float(s["retry_cap"]), int(s["max_attempts"])
    callers = int(s["workers"]) * int(s["upload_parts"])
    exp_delays = [exponential_delay(k, base, cap) for k in range(1, n_max)]
    herd_at = [sum(exp_delays[:k]) for k in range(1, len(exp_delays) + 1)]
    window = exponential_delay(1, base, cap)  # full jitter's first-retry window
    bucket = retry_bucket_s(base, cap)
    return {
        "workers": int(s["workers"]),
        "upload_parts": int(s["upload_parts"]),
        "callers": callers,
        "retry_base_s": base,
        "retry_cap_s": cap,
        "max_attempts": n_max,
        "max_receives": int(s["max_receives"]),
        "lesson_schedule_s": [d / base for d in herd_at],
        "lesson_delays_s": [d / base for d in exp_delays],  # the lesson's 1, 3, 7, 15 s
        "herd_at_s": herd_at,
        "herd_failing_at_s": herd_at[:-1],
        "herd_recovered_at_s": herd_at[-1],
        "jitter_window_s": window,
        "bucket_s": bucket,
        "jitter_mean_per_bucket": jitter_peak_per_bucket(callers, window, bucket),
        "jitter_expected_peak": jitter_expected_peak(callers, window, bucket),
        "poison_exponential_delays_s": exp_delays,
        "poison_exponential_to_dlq_s": sum(exp_delays),
        "poison_fixed_to_dlq_s": base * (n_max - 1),
        "poison_jitter_max_s": sum(exp_delays),
        "crash_redelivery_s": float(s["heartbeat_extend"]),
        # try this 5: a job that starts under a storage outage spends each attempt's storage tries (the
        # schedule's sum) and waits the job-level delays between attempts, so an outage longer than this
        # sends it to the DLQ for max_attempts; the step's outage adds one cap of margin
        "outage_to_dlq_s": n_max * sum(exp_delays) + sum(exp_delays),
        "replay_outage_s": n_max * sum(exp_delays) + sum(exp_delays) + cap,
        "replay_reason": f"max_attempts ({n_max}) exhausted",
    }


def lab_facts() -> dict[str, Any]:
    """What the chapter's text says about its lab (`lab.ch4_model` in chapter.md)."""
    return {"ch4_model": lab_model()}


BUTTONS: dict[str, list[dict[str, Any]]] = {
    "ch4": [
        {
            "id": "poison-pill",
            "label": "Poison pill",
            "fault": {"type": "poison"},
            "hint": (
                "An undecodable upload that fails every attempt. Predict the attempts and the waits before the DLQ."
            ),
            "predict": {
                "id": "ch4-poison",
                "kind": "number",
                "min": 1,
                "max": 50,
                "unit": "attempts",
                "measure": "attempts",
                "question": "How many attempts will the poison job make before the DLQ?",
                "why": "Every attempt fails with an error the handler sees, so the retry policy decides: at "
                "max attempts ({max_attempts}) it moves the job to the dead-letter queue instead of "
                "trying again, so it made {measured}.",
            },
        },
        {
            "id": "crashing-pill",
            "label": "Crashing pill",
            "fault": {"type": "poison_crash"},
            "hint": "A job that kills its worker every time: no handler sees an error, so no retry policy runs. "
            "Predict what brings it back, and what finally stops it.",
        },
        {
            "id": "outage",
            "label": "3 jobs + storage outage",
            "enqueue": OUTAGE_JOB,
            "count": 3,
            "fault": {"type": "storage_outage", "duration_s": 100},
            "fault_after_calls": True,
            "hint": "36 upload parts mid-call when storage goes down for 100 s. Watch when their retries reach storage "
            "under the policy you chose.",
            "predict": {
                "id": "ch4-outage",
                "kind": "number",
                "min": 0,
                "max": 3,
                "unit": "jobs",
                "measure": "state:dlq",
                "question": "Storage is down for 100 s. How many of the 3 jobs will end in the dead-letter queue?",
                "why": "Under {retry_policy} retries (base {retry_base} s, cap {retry_cap} s) and {max_attempts} "
                "attempts, a job dead-letters only if all its attempts land inside the outage; "
                "{measured} did here. Fewer attempts or shorter delays make that likelier.",
            },
        },
    ],
}

# shared set-ups (an instructor's link): the preset plus settings, and the action that shows the effect
SCENARIOS: dict[str, dict[str, Any]] = {
    "retry-storm": {
        "title": "Retry storm",
        "preset": "ch4",
        "summary": "Storage goes down for 100 s under three jobs, each streaming 12 upload parts, with exponential "
        "backoff and no jitter. Predict when the 36 failed calls come back, and how many jobs end in "
        "the dead-letter queue.",
        "outcome": "All 36 calls failed at the same instant and, without jitter, came back together at 10, 30, 70 "
        "and 150 s (the lesson's 1, 3, 7, 15 s, ×10).",
        "settings": {
            "workers": 3,
            "upload_parts": 12,
            "retry_policy": "exponential",
            "retry_base": 10,
            "retry_cap": 300,
            "max_attempts": 5,
            "breaker": False,
            "vt_seconds": 600,
        },
        "fault": {"type": "storage_outage", "duration_s": 100},
        "fault_after_calls": True,
        "enqueue": {"sample": "bigbuckbunny", "job_type": "thumbnail", "duration_s": 200},
        "count": 3,
        "hint": "Watch the storage-arrivals histogram as the retries come back. Then switch the policy to full "
        "jitter and run it again.",
        "button": "outage",
    },
    "poison-pill": {
        "title": "Poison pill",
        "preset": "ch4",
        "summary": "An undecodable upload: every attempt fails with an error the handler sees. Predict how many "
        "attempts it gets, and where it ends.",
        "outcome": "The retry policy decided the waits (10, 20, 40, 80 s with exponential backoff) and the fifth "
        "failure sent it to the dead-letter queue instead of blocking the queue forever.",
        "settings": {
            "workers": 2,
            "max_attempts": 5,
            "retry_policy": "exponential",
            "retry_base": 10,
            "retry_cap": 300,
            "classify_errors": False,
            "vt_seconds": 600,
        },
        "fault": {"type": "poison"},
        "hint": "Predict: how many attempts before the DLQ, and how long? Then try policy none and full jitter.",
        "button": "poison-pill",
    },
}

_LAB = lab_model()
_PEAK = {
    "kind": "number",
    "min": 0,
    "max": 500,
    "unit": "calls",
    "measure": "peak:storage.called",
    "question": "Storage goes down under 36 in-flight upload parts. How many retried storage calls will "
    "arrive in the busiest simulated second?",
}

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch4": [
        {
            "claim": "ch4.herd",
            "title": "Storage outage, exponential backoff",
            "do": [
                {"settings": {"retry_policy": "exponential", "max_attempts": 5, "classify_errors": False}},
                {"scenario": "outage"},
            ],
            "predict": {**_PEAK, "id": "ch4-step-herd"},
            "moment": "storage.called",
            "moment_data": {"try": 2},
            "look": "retry-histogram",
            "says": "Without jitter the retried calls came back together: {measured} of them reached storage in "
            "the same simulated second.",
        },
        {
            "claim": "ch4.jitter",
            "title": "The same outage, full jitter",
            "do": [
                {"settings": {"retry_policy": "full_jitter", "max_attempts": 5, "classify_errors": False}},
                {"scenario": "outage"},
            ],
            "predict": {
                **_PEAK,
                "id": "ch4-step-jitter",
                "question": "The same outage under full jitter: each retry waits a random time up to its "
                "backoff. How many retried storage calls arrive in the busiest simulated second now?",
            },
            "moment": "storage.called",
            "moment_data": {"try": 2},
            "look": "retry-histogram",
            "says": "Full jitter spread the same retries over the window: the busiest simulated second held "
            "{measured} of them.",
        },
        {
            "claim": "ch4.poison",
            "title": "Poison pill",
            "do": [{"settings": {"retry_policy": "exponential", "max_attempts": 5}}, {"scenario": "poison-pill"}],
            "moment": "job.dead_lettered",
            "look": "dlq-list",
            "says": "The poison job made {measured} attempts, each failure waited out by the {retry_policy} policy, "
            "then entered the dead-letter queue at t = {moment_t} s.",
        },
        {
            "claim": "ch4.crash",
            "title": "Crashing pill",
            "do": [{"scenario": "crashing-pill"}],
            "predict": {
                "kind": "number",
                "min": 1,
                "max": 50,
                "unit": "attempts",
                "id": "ch4-step-crash",
                "measure": "attempts",
                "question": "Each delivery kills its worker, so no retry policy runs. How many deliveries "
                "will it get before something stops it?",
            },
            "moment": "job.dead_lettered",
            "look": "dlq-list",
            "says": "{measured} deliveries, each brought back by its lease; at Max receives ({max_receives}) the "
            "broker moved it to the dead-letter queue at t = {moment_t} s.",
        },
        {
            "claim": "ch4.replay",
            "title": "Replay the DLQ by reason",
            # as the page and its conformance test set it up: an outage long enough for the outage jobs to spend
            # every attempt, a poison pill that skips its retries, then a replay of one reason once storage is back
            "do": [
                {
                    "settings": {
                        "retry_policy": "exponential",
                        "max_attempts": _LAB["max_attempts"],
                        "classify_errors": True,
                    }
                },
                {"fault": {"type": "storage_outage", "duration_s": _LAB["replay_outage_s"]}},
                *[{"enqueue": OUTAGE_JOB}] * _LAB["workers"],
                {"scenario": "poison-pill"},
                {"on": "fault.ended", "choose": {"dlq-reason": "max_attempts"}, "click": "dlq-replay"},
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "jobs",
                "id": "ch4-step-replay",
                "measure": "state:done",
                "question": "Outage jobs and a poison pill sit in the DLQ. You replay only the max_attempts "
                "reason once storage is back: how many of them come back and finish?",
            },
            "moment": "job.replayed",
            "look": "dlq-list",
            "says": "{measured} jobs came back and finished: the replay picked exactly the jobs that ran out of "
            "attempts; the poison pill, dead-lettered as non_retryable, stayed in the DLQ.",
        },
    ],
}

_THUMBS = {"sample": "bigbuckbunny", "job_type": "thumbnail", "duration_s": 30}
_OUTAGE_BASE = {
    "workers": 3,
    "job_duration": 30,
    "retry_base": 20,
    "retry_cap": 300,
    "max_attempts": 8,
    "breaker": False,
    "vt_seconds": 300,
}

# what a race's comparison table shows: [snapshot count, label] (core.events.COUNTERS or a state count)
_RETRY_WATCH = [
    ["retries_scheduled", "retries scheduled"],
    ["failed", "attempts failed"],
    ["done", "done"],
    ["dlq", "dead-lettered"],
]

RACES: dict[str, dict[str, Any]] = {
    "jitter": {
        "title": "No jitter vs full jitter",
        "preset": "ch4",
        "vary": ["retry_policy"],
        "summary": "Storage is down for 200 s under six thumbnail jobs. Fixed 20 s retries all land at the "
        "same instants; full jitter spreads them out.",
        "base": _OUTAGE_BASE,
        "variants": [
            {"label": "Fixed 20 s, no jitter", "settings": {"retry_policy": "fixed"}},
            {"label": "Full jitter", "settings": {"retry_policy": "full_jitter"}},
        ],
        "fault": {"type": "storage_outage", "duration_s": 200},
        "enqueue": _THUMBS,
        "count": 6,
        "watch": _RETRY_WATCH,
    },
    "retry-policies": {
        "title": "Four retry policies",
        "preset": "ch4",
        "vary": ["retry_policy"],
        "summary": "The same 200 s storage outage under six jobs, four ways: no retries, fixed, exponential "
        "and full-jitter backoff.",
        "base": _OUTAGE_BASE,
        "variants": [
            {"label": "No retries", "settings": {"retry_policy": "none"}},
            {"label": "Fixed", "settings": {"retry_policy": "fixed"}},
            {"label": "Exponential", "settings": {"retry_policy": "exponential"}},
            {"label": "Full jitter", "settings": {"retry_policy": "full_jitter"}},
        ],
        "fault": {"type": "storage_outage", "duration_s": 200},
        "enqueue": _THUMBS,
        "count": 6,
        "watch": _RETRY_WATCH,
    },
}

# ---- the challenge: the learner writes the retry policy (core/challenges/, workers/challenge.py) ----

_REFERENCE = """\
import random


def retry_delay(n):
    # full jitter: anywhere up to the exponential step (20, 40, 80 … s), capped at 300 s
    return random.uniform(0, min(300, 10 * 2 ** n))


def handle(ctx):
    video = ctx.media.transcode("360p")  # a poison pill raises ctx.InvalidMedia: let it fail, the DLQ takes it
    ctx.storage.upload(f"transcoded/{ctx.job.id}/360p.mp4", video, parts=12, retry_delay=retry_delay)
"""

CHALLENGES: dict[str, dict[str, Any]] = {
    "retry-policy": {
        "chapter": 4,
        "title": "Write the retry policy",
        "task": "Storage is down for the first 300 s. Write retry_delay(n), the wait before a part's next call, so "
        "every job finishes within 1,200 s of its upload, storage never takes more than 12 retried calls "
        "in one second, and the dead-letter queue takes only the poison pill.",
        "section": "full-jitter-spread-the-wave-out",
        "hint": "Callers that failed together and wait the same time come back together: spread each wait at "
        "random (Full jitter: spread the wave out).",
        "settings": {
            "workers": 3,
            "guard": "claim",
            "vt_seconds": 600,
            "heartbeat": True,
            "ack_mode": "late",
            "max_attempts": 2,  # a job that fails both attempts inside the 300 s outage dead-letters
            "max_receives": 6,
            "retry_policy": "fixed",
            "retry_base": 30,
            "classify_errors": False,
            "notify_guard": False,
        },
        "workload": [60, 60, 60, 60, 60, 60, {"duration_s": 60, "poison": True}],
        "outage": {"at": 0, "duration_s": 300},
        "invariants": ["finished_within:1200", "busiest_second:12", "dlq_only_poison"],
        "starter_breaks": "busiest_second",
        "starter": _REFERENCE.replace(
            "    # full jitter: anywhere up to the exponential step (20, 40, 80 … s), capped at 300 s\n"
            "    return random.uniform(0, min(300, 10 * 2 ** n))",
            "    return 10  # retry every 10 s",
        ).replace("import random\n\n\n", ""),
        "reference": _REFERENCE,
        "mutants": {
            "exponential, no jitter": (
                _REFERENCE.replace("random.uniform(0, min(300, 10 * 2 ** n))", "min(300, 10 * 2 ** n)"),
                "busiest_second",
            ),
            "waits too long": (
                _REFERENCE.replace("random.uniform(0, min(300, 10 * 2 ** n))", "1500"),
                "finished_within",
            ),
            "gives up at once": (
                _REFERENCE.replace("random.uniform(0, min(300, 10 * 2 ** n))", "None"),
                "dlq_only_poison",
            ),
            "swallows the poison": (
                _REFERENCE.replace(
                    '    video = ctx.media.transcode("360p")',
                    '    try:\n        video = ctx.media.transcode("360p")\n'
                    "    except ctx.InvalidMedia:\n        return",
                ),
                "dlq_only_poison",
            ),
        },
    },
}


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch4.poison_note",
        4,
        "Exponential backoff",
        "Where we differ: five attempts wait four delays (15 s), not the schedule's 31 s",
        "test_lesson_note_poison_backoff_is_on_the_page",
        status="model",
    ),
    Claim(
        "ch4.herd",
        4,
        "Try this 1 / Check yourself 1",
        "Exponential backoff, storage outage: all 36 storage "
        "callers come back together at 10, 30, 70 s (the lesson's 1, 3, 7 s ×10)",
        "test_try1_check1_without_jitter_the_whole_herd_comes_back_together",
    ),
    Claim(
        "ch4.jitter",
        4,
        "Try this 2 / Check yourself 2",
        "Full jitter: the tallest 1 s bucket well below "
        "the 36 of the unjittered herd (the model's 6.6 assumes 36 callers; at the preset jobs that exhaust "
        "their storage tries retry and add callers, so the lab measures higher)",
        "test_try2_check2_full_jitter_flattens_the_peak",
    ),
    Claim(
        "ch4.jitter_either_order",
        4,
        "Try this 1–2",
        "Either order works (the outage first, or the jobs first): "
        "the retried storage calls per 1 s bar peak at the whole herd of 36 without jitter, at no more than half "
        "of it with full jitter",
        "test_try2_in_either_order_full_jitters_tallest_bar_is_at_most_half_no_jitters",
    ),
    Claim(
        "ch4.poison",
        4,
        "Try this 3",
        "A failing poison pill: max_attempts attempts with the policy's waits "
        "(10, 20, 40, 80 s), the DLQ about 150 s after the first failure; fixed ≈40 s; none: one attempt",
        "test_try3_a_poison_pill_fails_max_attempts_times_with_the_policys_waits",
    ),
    Claim(
        "ch4.crash",
        4,
        "Try this 4 / Check yourself 5",
        "A crashing pill: the retry policy is never asked; "
        "the lease brings it back a heartbeat window apart until Max receives",
        "test_try4_check5_a_crashing_pill_comes_back_by_its_lease_until_max_receives",
    ),
    Claim(
        "ch4.uncapped",
        4,
        "Check yourself 3",
        "Uncapped poison pills fill the pool's slots",
        "test_check3_uncapped_poison_pills_fill_the_pool",
        status="model",
    ),
    Claim(
        "ch4.budget",
        4,
        "Check yourself 4",
        "A retry budget bounds the time to `failed`",
        "test_check4_a_retry_budget_bounds_the_time_to_failed",
        status="model",
    ),
    Claim(
        "ch4.replay",
        4,
        "Try this 5",
        "DLQ replay with a reason filter: with non-retryable errors "
        "classified, outage jobs and a poison pill reach the DLQ with different reasons; replaying "
        "max_attempts brings back exactly the outage jobs, which finish; the replayed pill fails once and "
        "goes straight back",
        "test_try5_replay_by_reason_brings_back_only_the_outage_jobs_and_they_finish",
    ),
    Claim(
        "ch4.breaker",
        4,
        "Check yourself 6",
        "What a circuit breaker saves that jitter does not",
        status="thought",
        why="a design comparison; the breaker is a lab control but the page asks for reasoning",
    ),
    Claim(
        "ch4.race_jitter",
        4,
        "Race: no jitter vs full jitter",
        "Storage down for 200 s under six thumbnail "
        "jobs: fixed 20 s retries land together, full jitter spreads them (the fixed lane's peak per bucket is "
        "at least twice full jitter's)",
        "test_race_jitter_fixed_retries_land_together_full_jitter_spreads_them",
    ),
    Claim(
        "ch4.race_retry_policies",
        4,
        "Race: four retry policies",
        "The same outage four ways: without retries "
        "every job is dead-lettered after one call per caller; fixed, exponential and full-jitter backoff wait it "
        "out and finish every job",
        "test_race_retry_policies_without_retries_the_outage_dead_letters_every_job_with_backoff_all_finish",
    ),
    Claim(
        "ch4.scenario_retry_storm",
        4,
        "Scenario /s/retry-storm",
        "Storage down for 100 s under three jobs of "
        "12 upload parts: all 36 calls fail at once and, with exponential backoff and no jitter, all 36 come "
        "back together at 10, 30, 70 and 150 s",
        "test_scenario_retry_storm_every_call_fails_together_and_comes_back_together",
    ),
    Claim(
        "ch4.scenario_poison_pill",
        4,
        "Scenario /s/poison-pill",
        "An undecodable upload fails every attempt; "
        "exponential backoff waits 10, 20, 40, 80 s and the fifth failure sends it to the dead-letter queue",
        "test_scenario_poison_pill_waits_10_20_40_80_and_the_fifth_failure_dead_letters",
    ),
    Claim(
        "ch4.why_poison",
        4,
        "Predict first: Poison pill (why)",
        "Every attempt fails with an error the "
        "handler sees, so the retry policy decides: at max attempts the job goes to the dead-letter queue",
        "test_scenario_poison_pill_waits_10_20_40_80_and_the_fifth_failure_dead_letters",
    ),
    Claim(
        "ch4.why_outage",
        4,
        "Predict first: 3 jobs + storage outage (why)",
        "A job dead-letters only if all "
        "its attempts land inside the outage: under the preset's exponential backoff none of the three does, "
        "with no retries all three do",
        "test_why_outage_a_job_dead_letters_only_if_all_its_attempts_land_inside_the_outage",
    ),
    Claim(
        "ch4.caption_herd",
        4,
        "Chart: retry arrivals without jitter (caption)",
        "Each bar is one synchronised wave of all the retries: every storage caller comes back in the same wave",
        "test_try1_check1_without_jitter_the_whole_herd_comes_back_together",
    ),
    Claim(
        "ch4.caption_panel_peaks",
        4,
        "Lab panel: storage calls per bucket (caption)",
        "Measured peaks beside the model's: with no jitter all the storage callers land in one bucket",
        "test_try1_check1_without_jitter_the_whole_herd_comes_back_together",
    ),
    Claim(
        "ch4.caption_jitter_wave",
        4,
        "Chart: the first retry wave with and without full jitter (caption)",
        "Without jitter all the retries land in one bucket; full jitter spreads the same retries evenly over the "
        "window, about the model's band per bucket",
        "test_caption_the_first_retry_wave_without_jitter_is_one_bucket_of_every_retry",
        status="model",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def _retry_schedule(inputs: Inputs) -> list[dict[str, Any]]:
    rows, lin_total, exp_total = [], 0.0, 0.0
    for n in range(1, inputs.max_attempts + 1):
        lin, exp = inputs.linear_step_s * n, exponential_delay(n, inputs.retry_base_s, math.inf)
        lin_total += lin
        exp_total += exp
        rows.append(
            {
                "attempt": n,
                "linear_delay_s": lin,
                "linear_total_s": lin_total,
                "exponential_delay_s": exp,
                "exponential_total_s": exp_total,
                "full_jitter_max_s": exp,
                "full_jitter_mean_s": exp / 2,
                "herd_retry_at_s": exp_total,
                "dependency_down": exp_total < inputs.outage_s,
            }
        )
    return rows


def _retry_budget(inputs: Inputs) -> dict[str, float]:
    """Walk attempts that each hang `hang_attempt_s`, with the un-jittered schedule between them,
    checking the count cap and the wall-clock budget after each failure (Ch4's handle_failure)."""
    elapsed, attempts = 0.0, 0
    while True:
        attempts += 1
        elapsed += inputs.hang_attempt_s
        if attempts >= inputs.max_attempts or elapsed > inputs.retry_budget_s:
            break
        elapsed += exponential_delay(attempts, inputs.retry_base_s, math.inf)
    count_only = inputs.max_attempts * inputs.hang_attempt_s + sum(
        exponential_delay(n, inputs.retry_base_s, math.inf) for n in range(1, inputs.max_attempts)
    )
    return {"count_only_s": count_only, "with_budget_s": elapsed, "with_budget_attempts": attempts}


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    lam, workers, W = core["lam"], core["workers"], core["W"]
    bucket_s = inputs.jitter_bucket_ms / 1000
    window = exponential_delay(1, inputs.retry_base_s, math.inf)
    schedule = _retry_schedule(inputs)
    poison_s = lam * inputs.poison_rate
    poison_day = poison_s * SECONDS_PER_DAY
    budget = _retry_budget(inputs)
    first_up = next((r for r in schedule if not r["dependency_down"]), None)
    n = inputs.max_attempts
    return {
        "outage_workers": inputs.outage_workers,
        "outage_s": inputs.outage_s,
        "retry_schedule": schedule,
        "herd_spikes_during_outage": sum(1 for r in schedule if r["dependency_down"]),
        "herd_recovers_at_s": first_up["herd_retry_at_s"] if first_up else None,
        "no_jitter_peak_per_bucket": inputs.outage_workers,
        "jitter_window_s": window,
        "jitter_buckets": jitter_peak_reduction(window, bucket_s),
        "full_jitter_peak_per_bucket": jitter_peak_per_bucket(inputs.outage_workers, window, bucket_s),
        "jitter_peak_reduction_x": jitter_peak_reduction(window, bucket_s),
        "backoff_schedule_total_s": schedule[-1]["exponential_total_s"],
        "backoff_between_attempts_s": sum(exponential_delay(k, inputs.retry_base_s, math.inf) for k in range(1, n)),
        "linear_schedule_total_s": schedule[-1]["linear_total_s"],
        "exponential_last_delay_s": schedule[-1]["exponential_delay_s"],
        "linear_last_delay_s": schedule[-1]["linear_delay_s"],
        "retry_policies": [
            {
                "policy": "fixed",
                "delay_at_last_attempt_s": inputs.retry_base_s,
                "total_s": inputs.retry_base_s * n,
                "peak_per_bucket": inputs.outage_workers,
            },
            {
                "policy": "linear",
                "delay_at_last_attempt_s": schedule[-1]["linear_delay_s"],
                "total_s": schedule[-1]["linear_total_s"],
                "peak_per_bucket": inputs.outage_workers,
            },
            {
                "policy": "exponential",
                "delay_at_last_attempt_s": schedule[-1]["exponential_delay_s"],
                "total_s": schedule[-1]["exponential_total_s"],
                "peak_per_bucket": inputs.outage_workers,
            },
            {
                "policy": "full_jitter (expected)",
                "delay_at_last_attempt_s": schedule[-1]["full_jitter_mean_s"],
                "total_s": schedule[-1]["exponential_total_s"] / 2,
                "peak_per_bucket": jitter_peak_per_bucket(inputs.outage_workers, window, bucket_s),
            },
        ],
        "poison_pills_per_s": poison_s,
        "poison_pills_per_day": poison_day,
        "poison_uncapped_slots_after_day": poison_day,
        "poison_uncapped_pool_fraction_after_day": poison_day / workers,
        "poison_attempts_per_pill": n,
        "poison_attempts_per_day_capped": poison_day * n,
        "poison_attempts_per_day_classified": poison_day,
        "non_retryable_attempts_saved": n - 1,
        "poison_worker_hours_per_day_capped": poison_day * n * inputs.poison_attempt_s / 3600,
        "hang_attempt_s": inputs.hang_attempt_s,
        "hang_time_to_dlq_count_only_s": budget["count_only_s"],
        "hang_time_to_dlq_count_only_min": budget["count_only_s"] / 60,
        "retry_budget_s": inputs.retry_budget_s,
        "hang_time_to_dlq_with_budget_s": budget["with_budget_s"],
        "hang_attempts_with_budget": budget["with_budget_attempts"],
        "retry_budget_worst_case_s": inputs.retry_budget_s + inputs.hang_attempt_s,
        "blended_duration_s": W,
    }


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another (the herd's real waves): so the page does no arithmetic."""
    c4 = fig["ch4"]
    c4["retries_per_job"] = inputs.max_attempts - 1
    waves = []
    for row in c4["retry_schedule"]:
        if row["attempt"] >= inputs.max_attempts:
            break
        waves.append(row)
        if not row["dependency_down"]:
            break
    c4["herd_waves"] = waves  # the synchronised retries that really happen, capped by max_attempts
    c4["herd_waves_failing"] = sum(1 for r in waves if r["dependency_down"])
    c4["herd_recovery_wave"] = next((r for r in waves if not r["dependency_down"]), None)


def lesson_notes(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Where this chapter's figure corrects the lesson's own arithmetic (see chapters.derive)."""
    c4 = fig["ch4"]
    n = inputs.max_attempts
    notes = []
    between, schedule = c4["backoff_between_attempts_s"], c4["backoff_schedule_total_s"]
    if between != schedule:
        notes.append(
            {
                "id": "poison_backoff_total",
                "where": "Poison pills",
                "lesson": f"{n} attempts cost “roughly {schedule:,.0f} seconds of backoff schedule”",
                "ours": f"{n} attempts have {n - 1} waits between them: {between:,.0f} s of backoff",
                "why": f"the lesson sums all {n} delays of the schedule ({schedule:,.0f} s); the last one is never "
                "waited, because after the last attempt the job goes to the DLQ instead of retrying.",
                "values": {"lesson": schedule, "ours": between},
            }
        )
    return notes


# ---- charts (core/series.py's shapes; chapters.chart_series gathers them) ----


def retry_herd(inputs: Inputs, fig: dict) -> Chart:
    c4 = fig["ch4"]
    N, outage = c4["outage_workers"], c4["outage_s"]
    rows = c4["herd_waves"]
    events = tuple(
        Point(
            r["herd_retry_at_s"],
            "fails" if r["dependency_down"] else "succeeds",
            f"{N:,} retries at t = {g(r['herd_retry_at_s'])} s: "
            + ("storage still down, all fail" if r["dependency_down"] else "storage back, all succeed"),
        )
        for r in rows
    )
    lanes = (Lane(f"{N:,} at once", events=events),)
    marks = (Mark(0, f"storage down ({g(outage)} s)", end=outage, tone="bad", style="hatched"),) if outage > 0 else ()
    summary = (
        f"Storage is down from 0 to {g(outage)} seconds. Without jitter, all {N:,} workers retry together"
        + "".join(
            f" at {g(r['herd_retry_at_s'])} seconds ({'fails' if r['dependency_down'] else 'succeeds'})" for r in rows
        )
        + "."
    )
    t_max = max([outage] + [r["herd_retry_at_s"] for r in rows])
    return Chart(
        "retry_herd",
        "timeline",
        "seconds since the failure",
        panels=(Panel("", lanes),),
        marks=marks,
        summary=summary,
        x_min=0,
        x_max=max(t_max * 1.1, inputs.retry_base_s),
        table=(("retry at (s)", "retries at once", "outcome"),)
        + tuple((g(r["herd_retry_at_s"]), f"{N:,}", "fails" if r["dependency_down"] else "succeeds") for r in rows),
    )


def jitter_first_wave(inputs: Inputs, fig: dict) -> Chart:
    c4 = fig["ch4"]
    N, win = c4["outage_workers"], c4["jitter_window_s"]
    bucket_s = inputs.jitter_bucket_ms / 1000
    band = c4["full_jitter_peak_per_bucket"]
    band_txt = f"{band:,.1f}".removesuffix(".0")
    clipped = N > band * 6
    jitter = Series(
        "jitter",
        f"full jitter: ≈ {band_txt} per bucket (dashed)",
        (Point(0, band, f"{band_txt} per bucket from 0 to {g(win)} s"), Point(win, band, "")),
        "dashed",
        "none",
        "accent",
    )
    spike = Series(
        "spike",
        f"no jitter: {N:,} in one bucket (solid)" + (", off the scale" if clipped else ""),
        (Point(win, N, f"{N:,} at {g(win)} s"), Point(win + bucket_s, N, "")),
        "solid",
        "none",
        "bad",
    )
    summary = (
        f"Without jitter, all {N:,} retries land in one bucket at {g(win)} seconds. With full jitter "
        f"they spread evenly from 0 to {g(win)} seconds, about {band:,.1f} per bucket"
        + ("; the no-jitter bar is far taller than the chart and is cut off" if clipped else "")
        + "."
    )
    return Chart(
        "jitter_first_wave",
        "histogram",
        "seconds since the failure",
        f"retries per {inputs.jitter_bucket_ms:,.0f} ms bucket",
        series=(jitter, spike),
        summary=summary,
        x_min=0,
        x_max=max(win * 1.3, win + bucket_s * 1.5),
        y_cap=band * 5 if clipped else None,
        table=(
            ("shape", "from (s)", "to (s)", "retries per bucket"),
            ("full jitter", "0", g(win), band_txt),
            ("no jitter", g(win), g(win + bucket_s), f"{N:,}"),
        ),
    )


CHARTS = {"retry_herd": retry_herd, "jitter_first_wave": jitter_first_wave}
