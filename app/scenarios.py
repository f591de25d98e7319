"""Scenario presets: ready-made set-ups an instructor prepares before class and shares as a URL.

One table, read by the API (`/api/scenarios`), the room and index pages, and the chapter page's
scenario banner. A scenario is a chapter preset plus settings on top (every one of them travels
in the shareable URL's query string, so the link alone reproduces the set-up) and the action that
makes the effect happen: a fault to inject and/or jobs to send.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from app import chapters
from core import presets, settings

# id → scenario. `settings` are validated against the settings schema by the unit tests.
SCENARIOS: dict[str, dict[str, Any]] = {
    "vt-too-short": {
        "title": "VT too short",
        "preset": "ch1",
        "summary": "A 300 s lease on a 600 s transcode, no guard: the lease runs out at 300 s and a second "
                   "worker starts the same job while the first is still busy. The first finishes at 600 s "
                   "(done once); the second runs on to 900 s and is counted as a duplicate: 300 s of overlap, "
                   "600 s of transcoding done twice.",
        "settings": {"workers": 2, "vt_seconds": 300, "heartbeat": False, "job_duration": 600,
                     "retry_policy": "none", "ack_mode": "late", "guard": "off"},
        "enqueue": {"sample": "bigbuckbunny", "duration_s": 600}, "count": 1,
        "hint": "Predict: what happens at t + 300 s while the first worker is still busy? Then switch the guard "
                "to claim and run it again.",
    },
    "retry-storm": {
        "title": "Retry storm",
        "preset": "ch4",
        "summary": "Storage goes down for 100 s under three jobs, each streaming 12 upload parts: all 36 calls "
                   "fail at the same instant and, with exponential backoff and no jitter, all 36 come back "
                   "together at 10, 30, 70 and 150 s (the lesson's 1, 3, 7, 15 s, ×10).",
        "settings": {"workers": 3, "upload_parts": 12, "retry_policy": "exponential", "retry_base": 10,
                     "retry_cap": 300, "max_attempts": 5, "breaker": False, "vt_seconds": 600},
        "fault": {"type": "storage_outage", "duration_s": 100}, "fault_after_calls": True,
        "enqueue": {"sample": "bigbuckbunny", "job_type": "thumbnail", "duration_s": 200}, "count": 3,
        "hint": "Watch the storage-arrivals histogram stack up in four spikes. Then switch the policy to full "
                "jitter and run it again.",
    },
    "poison-pill": {
        "title": "Poison pill",
        "preset": "ch4",
        "summary": "An undecodable upload: every attempt fails with an error, so the retry policy decides the "
                   "waits (10, 20, 40, 80 s with exponential backoff) and the fifth failure sends it to the "
                   "dead-letter queue instead of blocking the queue forever.",
        "settings": {"workers": 2, "max_attempts": 5, "retry_policy": "exponential", "retry_base": 10,
                     "retry_cap": 300, "classify_errors": False, "vt_seconds": 600},
        "fault": {"type": "poison"},
        "hint": "Predict: how many attempts before the DLQ, and how long? Then try policy none and full jitter.",
    },
}


# The chapter widget's scenario buttons, per preset: one press patches a few settings on the lab the
# learner already has, injects a fault, sends jobs or kills workers (unlike SCENARIOS above, which
# build a whole lab from a shared link). The widget reads them from /api/meta.
_JOB = {"sample": "bigbuckbunny"}
_LONG_JOB = {**_JOB, "duration_s": 600}
# `predict` (issue 22): what the learner commits to before the run, and how the lab measures it
# (static/js/widget/predict-model.js): `attempts` of the run's first job, `state:<s>` jobs of the run that
# end in state s, `counter:<name>` how far a counter moved. `why` is shown when the guess misses, with
# {setting} filled in from the lab's own settings, {measured} from the measurement and {guard_that_acted}
# from the run's own counters (which guard stopped the duplicate).
_RUNS = {"kind": "number", "min": 1, "max": 20, "unit": "attempts", "measure": "attempts",
         "question": "How many attempts will this one job get (every delivery counts, duplicates included)?"}
_CH1_BUTTONS: list[dict[str, Any]] = [
    {"id": "vt-too-short", "label": "VT too short",
     "settings": {"vt_seconds": 300, "heartbeat": False, "job_duration": 600}, "enqueue": _LONG_JOB,
     "hint": "Lease 300 s, job 600 s. Predict: what happens at t + 300 s while the first worker is still busy?",
     "predict": {**_RUNS, "id": "ch1-vt-too-short",
                 "why": "The lease ({vt_seconds} s) ran out before the job ({job_duration} s) was done, so the broker "
                        "made the message visible again and another worker took it while the first was still "
                        "busy: every expiry before the job is acked is one more attempt ({measured} here), until "
                        "the job finishes or its deliveries reach the dead-letter limit."}},
    {"id": "fix-vt", "label": "Fix it: VT 1200 s",
     "settings": {"vt_seconds": 1200, "heartbeat": False, "job_duration": 600}, "enqueue": _LONG_JOB,
     "hint": "The lease now outlives the job. Predict the attempts and duplicates this job ends with.",
     "predict": {**_RUNS, "id": "ch1-fix-vt",
                 "why": "A {vt_seconds} s lease outlives the {job_duration} s job, so the message stays invisible "
                        "until the worker acks it: no other worker ever sees it ({measured} attempt(s) measured)."}},
    {"id": "fix-heartbeat", "label": "Fix it: heartbeat",
     "settings": {"vt_seconds": 300, "heartbeat": True, "job_duration": 600}, "enqueue": _LONG_JOB,
     "hint": "Short lease, extended while the worker lives. Kill the worker and time how soon the job comes back.",
     "predict": {"id": "ch1-fix-heartbeat", "kind": "choice", "measure": "attempts",
                 "question": "The lease is still only 300 s, but with a heartbeat. Will the job run once, or more?",
                 "choices": [["once", "once"], ["more", "twice or more"]],
                 "buckets": {"once": [1, 1], "more": [2, 1000]},
                 "why": "The heartbeat pushes the deadline to now + {heartbeat_extend} s every {heartbeat_interval} s "
                        "while the worker lives, so a {vt_seconds} s lease never runs out under a live worker "
                        "(a kill would bring the job back within one window). Attempts measured: {measured}."}},
]
BUTTONS: dict[str, list[dict[str, Any]]] = {
    "ch1": _CH1_BUTTONS,
    "ch1-heartbeat": _CH1_BUTTONS[1:],
    "ch4": [
        {"id": "poison-pill", "label": "Poison pill", "fault": {"type": "poison"},
         "hint": "An undecodable upload that fails every attempt. Predict the attempts and the waits before the DLQ.",
         "predict": {"id": "ch4-poison", "kind": "number", "min": 1, "max": 50, "unit": "attempts",
                     "measure": "attempts", "question": "How many attempts will the poison job make before the DLQ?",
                     "why": "Every attempt fails with an error the handler sees, so the retry policy decides: at "
                            "max attempts ({max_attempts}) it moves the job to the dead-letter queue instead of "
                            "trying again, so it made {measured}."}},
        {"id": "crashing-pill", "label": "Crashing pill", "fault": {"type": "poison_crash"},
         "hint": "A job that kills its worker every time: no handler sees an error, so no retry policy runs. "
                 "Predict what brings it back, and what finally stops it."},
        {"id": "outage", "label": "3 jobs + storage outage", "enqueue": {**_JOB, "job_type": "thumbnail",
                                                                         "duration_s": 200}, "count": 3,
         "fault": {"type": "storage_outage", "duration_s": 100}, "fault_after_calls": True,
         "hint": "36 upload parts mid-call when storage goes down for 100 s. Watch when their retries reach storage "
                 "under the policy you chose.",
         "predict": {"id": "ch4-outage", "kind": "number", "min": 0, "max": 3, "unit": "jobs", "measure": "state:dlq",
                     "question": "Storage is down for 100 s. How many of the 3 jobs will end in the dead-letter queue?",
                     "why": "Under {retry_policy} retries (base {retry_base} s, cap {retry_cap} s) and {max_attempts} "
                            "attempts, a job dead-letters only if all its attempts land inside the outage; "
                            "{measured} did here. Fewer attempts or shorter delays make that likelier."}},
    ],
    "ch5": [
        {"id": "vt-too-short", "label": "VT too short", "settings": {"vt_seconds": 300, "job_duration": 600},
         "enqueue": _LONG_JOB,
         "hint": "Redelivered while still running. Predict the outputs written and emails sent with the claim "
                 "guard on, then with the guard off.",
         "predict": {"id": "ch5-emails", "kind": "number", "min": 0, "max": 10, "unit": "emails",
                     "measure": "counter:emails_sent",
                     "question": "The job is redelivered while it still runs. How many completion emails go out?",
                     # the guard named is the one the lab's own counters show acting (predict-model.js)
                     "why": "The job was redelivered while it still ran, and {measured} completion email(s) went "
                            "out. The guard that acted: {guard_that_acted}."}},
    ],
    "ch8": [
        {"id": "load", "label": "Steady load: 3 jobs", "enqueue": _JOB, "count": 3,
         "hint": "Three transcodes. Then try three rapid kills and watch the redelivery rate readout."},
        {"id": "rapid-kills", "label": "Three rapid kills", "kills": 3,
         "hint": "Every busy worker is SIGKILLed in quick succession. Predict: spike, plateau or smooth rise?",
         "predict": {"id": "ch8-kills-lost", "kind": "number", "min": 0, "max": 10, "unit": "jobs",
                     "measure": "counter:lost",
                     "question": "Three workers die mid-job. How many jobs are lost for good?",
                     "why": "Acks are {ack_mode}: the message is deleted only after success, so a killed worker's job "
                            "comes back when its lease runs out. Lost: {measured}."}},
    ],
}


def chapter_for(preset: str) -> chapters.Chapter | None:
    """The chapter whose page runs this preset (a room and a scenario open that page)."""
    return next((c for c in chapters.all_chapters() if c.preset == preset), None)


def room_presets() -> list[str]:
    """Presets a room can run: one per chapter, since students land on that chapter's page."""
    return [c.preset for c in chapters.all_chapters() if c.preset in presets.PRESETS]


def chapter_path(preset: str) -> str:
    ch = chapter_for(preset)
    return f"/chapters/{ch.url_slug}" if ch else "/"


def query_for(scenario_id: str) -> dict[str, str]:
    """The query string that reproduces a scenario: its id plus every setting, as text."""
    sc = SCENARIOS[scenario_id]
    return {"scenario": scenario_id, **{name: _text(v) for name, v in sc["settings"].items()}}


def _text(value: Any) -> str:
    """A setting as a query-string value the settings validator reads back to the same value."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def url_for(scenario_id: str) -> str:
    """The shareable link: the chapter page with the scenario in its query string."""
    return f"{chapter_path(SCENARIOS[scenario_id]['preset'])}?{urlencode(query_for(scenario_id))}"


def settings_for(scenario_id: str) -> dict[str, Any]:
    """Full lab settings for a scenario: the preset's, with the scenario's on top (validated)."""
    sc = SCENARIOS[scenario_id]
    clean, errors = settings.validate(sc["settings"])
    if errors:
        raise ValueError(f"scenario {scenario_id}: {errors}")
    return {**presets.settings_for(sc["preset"]), **clean}


def public(scenario_id: str) -> dict[str, Any]:
    """A scenario as the API and pages show it, with its link."""
    sc = SCENARIOS[scenario_id]
    return {"id": scenario_id, **sc, "url": url_for(scenario_id), "short_url": f"/s/{scenario_id}",
            "chapter_url": chapter_path(sc["preset"])}


def all_public() -> list[dict[str, Any]]:
    return [public(s) for s in SCENARIOS]
