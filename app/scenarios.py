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
from core import lesson, presets, settings

# id → scenario. `settings` are validated against the settings schema by the unit tests.
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
        "settings": {"workers": 2, "vt_seconds": 300, "heartbeat": False, "job_duration": 600,
                     "retry_policy": "none", "ack_mode": "late", "guard": "off"},
        "enqueue": {"sample": "bigbuckbunny", "duration_s": 600}, "count": 1,
        "hint": "Predict: what happens at t + 300 s while the first worker is still busy? Type your guess, then "
                "run it; afterwards switch the guard to claim and run it again.",
        "button": "vt-too-short",
    },
    "retry-storm": {
        "title": "Retry storm",
        "preset": "ch4",
        "summary": "Storage goes down for 100 s under three jobs, each streaming 12 upload parts, with exponential "
                   "backoff and no jitter. Predict when the 36 failed calls come back, and how many jobs end in "
                   "the dead-letter queue.",
        "outcome": "All 36 calls failed at the same instant and, without jitter, came back together at 10, 30, 70 "
                   "and 150 s (the lesson's 1, 3, 7, 15 s, ×10).",
        "settings": {"workers": 3, "upload_parts": 12, "retry_policy": "exponential", "retry_base": 10,
                     "retry_cap": 300, "max_attempts": 5, "breaker": False, "vt_seconds": 600},
        "fault": {"type": "storage_outage", "duration_s": 100}, "fault_after_calls": True,
        "enqueue": {"sample": "bigbuckbunny", "job_type": "thumbnail", "duration_s": 200}, "count": 3,
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
        "settings": {"workers": 2, "max_attempts": 5, "retry_policy": "exponential", "retry_base": 10,
                     "retry_cap": 300, "classify_errors": False, "vt_seconds": 600},
        "fault": {"type": "poison"},
        "hint": "Predict: how many attempts before the DLQ, and how long? Then try policy none and full jitter.",
        "button": "poison-pill",
    },
}


# The chapter widget's scenario buttons, per preset: one press patches a few settings on the lab the
# learner already has, injects a fault, sends jobs or kills workers (unlike SCENARIOS above, which
# build a whole lab from a shared link). The widget reads them from /api/meta.
_JOB = {"sample": "bigbuckbunny"}
_LONG_JOB = {**_JOB, "duration_s": 600}
_OUTAGE_JOB = {**_JOB, "job_type": "thumbnail", "duration_s": 200}  # uploads its parts while storage is down
# `predict` (issue 22): what the learner commits to before the run, and how the lab measures it
# (static/js/widget/predict-model.js): `attempts` of the run's first job, `state:<s>` jobs of the run that
# end in state s, `counter:<name>` how far a counter moved. `why` is shown when the guess misses, with
# {setting} filled in from the lab's own settings, {measured} from the measurement and {guard_that_acted}
# from the run's own counters (which guard stopped the duplicate). A guided step's run (STEPS below) may also
# measure its events: `gap:A:B` seconds from an A to the next B, `peak:type` the busiest second's retried
# calls, `pertick:type` one tick's events, `count:type[:after]` how many there were (after the first `after` event)
# once the tick after them began.
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
        {"id": "outage", "label": "3 jobs + storage outage", "enqueue": _OUTAGE_JOB, "count": 3,
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


# ---- guided steps (issue 28): each chapter's "Try this" list, one step per item, in the page's order ----
# A step names the claim (core/lesson.py) whose test proves what it shows, so a step and its test cannot
# drift apart (tests/unit/test_steps.py). The widget's stepper (static/js/widget/stepper.js) acts a step
# out with the lab's own controls:
#   `do`      in order: {"scenario": id} presses that scenario button (BUTTONS above: its settings, fault and
#             jobs), {"settings": {...}} PATCHes settings, {"enqueue": {...}} sends a job, {"click": testid}
#             presses an existing control of the page, {"on": event type, "kill"|"expire": true} kills the
#             run's worker / cuts its lease when that event arrives for the run's job, {"on": event type,
#             "click": testid, "choose": {select testid: value}} picks an option and presses a control when it
#             arrives (the DLQ's replay by reason, once the outage is over), {"fault": {...}} starts a fault;
#   `predict` the question asked first (the predict.js spec; a scenario's own `predict` when absent);
#   `moment`  the event type at which the stepper pauses the clock (`moment_data`: fields it must carry; with
#             `on` actions, the first one after they have all fired; `moment_after`: the first one after an
#             event of that type, e.g. the leader elected after the kill), `look` the element (data-testid) it
#             points at then;
#   `says`    the one sentence shown beside the verdict ({measured}, {moment_t} and settings filled in).
# A step with no `do` is a read-and-reason step: it asks `predict.question`, then reveals its claim's text.
_GAP = {"kind": "number", "min": 0, "max": 5000, "unit": "s"}
_KILL_ON_CLAIM = {"on": "job.claimed", "kill": True}
_PER_TICK = {"kind": "number", "min": 0, "max": 20, "unit": "runs", "measure": "pertick:cron.run_started"}
_CH4 = presets.ch4_lab_model()
_PEAK = {"kind": "number", "min": 0, "max": 500, "unit": "calls", "measure": "peak:storage.called",
         "question": "Storage goes down under 36 in-flight upload parts. How many retried storage calls will "
                     "arrive in the busiest simulated second?"}
STEPS: dict[str, list[dict[str, Any]]] = {
    "ch0": [
        {"claim": "ch0.inline_504", "title": "Predict both response times",
         "predict": {"question": "The lab transcodes inline: how long will the upload button spin, "
                                 "and what answers it?"}},
        {"claim": "ch0.inline_504", "title": "Press Inline handler",
         "predict": {"question": "The inline request outlasts the gateway's timeout. What does the browser get back?"}},
        {"claim": "ch0.enqueue_202", "title": "Press Enqueue handler",
         "predict": {"question": "How soon does the enqueue handler answer, and what happens to the job afterwards?"}},
        {"claim": "ch0.pause", "title": "Pause right after the 202",
         "predict": {"question": "Paused just after the 202: where is the job?"}},
        {"claim": "ch0.gateway_raised", "title": "Raise the gateway timeout",
         "predict": {"question": "With the gateway's timeout above the transcode, what does the inline request get, "
                                 "and when?"}},
    ],
    "ch1": [
        {"claim": "ch1.vt_short", "title": "VT too short, guard off",
         "do": [{"settings": {"guard": "off", "ack_mode": "late"}}, {"scenario": "vt-too-short"}],
         "moment": "job.redelivered", "look": "inflight",
         "says": "The lease ran out at t = {moment_t} s while the first worker was still busy, so a second worker "
                 "started the same job: {measured} attempts of one job, the first finisher's result counted."},
        {"claim": "ch1.kill_redelivery_after_vt", "title": "Kill a busy worker, VT above the job",
         "do": [{"settings": {"vt_seconds": 1200, "heartbeat": False, "job_duration": 600, "guard": "off",
                              "ack_mode": "late"}}, {"enqueue": _LONG_JOB}, _KILL_ON_CLAIM],
         "predict": {**_GAP, "id": "ch1-step-kill", "measure": "gap:job.claimed:job.redelivered",
                     "question": "You kill the busy worker right after it claims the job. How many simulated seconds "
                                 "after the claim is the job handed out again?"},
         "moment": "job.redelivered", "look": "queue",
         "says": "The job came back {measured} s after its claim: the broker waited out the whole "
                 "{vt_seconds} s lease before it assumed the worker was gone."},
        {"claim": "ch1.ack_early", "title": "Ack early, then kill",
         "do": [{"settings": {"vt_seconds": 1200, "heartbeat": False, "job_duration": 600, "ack_mode": "early"}},
                {"enqueue": _LONG_JOB}, _KILL_ON_CLAIM],
         "predict": {"kind": "number", "min": 0, "max": 10, "unit": "jobs", "id": "ch1-step-ack-early",
                     "measure": "counter:lost",
                     "question": "Acks are early and the worker dies mid-job. How far will the lost counter move?"},
         "moment": "job.lost", "look": "readout-lost",
         "says": "The lost counter moved by {measured}: the message was deleted at the claim, so nothing could "
                 "bring the job back. With acks late the same kill is redelivered."},
        {"claim": "ch1.heartbeat", "title": "Heartbeat on, kill before the first beat",
         "do": [{"settings": {"guard": "off", "ack_mode": "late"}}, {"scenario": "fix-heartbeat"}, _KILL_ON_CLAIM],
         "predict": {**_GAP, "id": "ch1-step-heartbeat", "measure": "gap:job.claimed:job.redelivered",
                     "question": "Heartbeat on, lease 300 s, and the worker dies a moment after its claim. How many "
                                 "simulated seconds after the claim is the job handed out again?"},
         "moment": "job.redelivered", "look": "queue",
         "says": "Back {measured} s after the claim: with the heartbeat on the first lease is one extension "
                 "({heartbeat_extend} s) long, not the VT or the job's length."},
        {"claim": "ch1.expire_now", "title": "Expire a busy worker's lease",
         "do": [{"settings": {"vt_seconds": 1200, "heartbeat": False, "job_duration": 600, "guard": "off",
                              "ack_mode": "late"}}, {"enqueue": _LONG_JOB}, {"on": "job.progress", "expire": True}],
         "predict": {"kind": "number", "min": 1, "max": 10, "unit": "workers", "id": "ch1-step-expire",
                     "measure": "attempts",
                     "question": "You cut the lease of a healthy, busy worker. How many workers end up running "
                                 "this job (guard off)?"},
         "moment": "job.redelivered", "look": "workers",
         "says": "{measured} workers ran it: the broker only saw a lease run out, so it handed the job out again "
                 "while the first worker carried on; the first to finish counts."},
    ],
    "ch2": [
        {"claim": "ch2.wait_closer_to_mmc", "title": "ρ ≈ 0.8 on four workers",
         "predict": {"question": "Which formula will the measured mean wait sit nearer: W/(1−ρ) or Erlang C?"}},
        {"claim": "ch2.overload_grows", "title": "Raise λ past the pool",
         "predict": {"question": "With λ·W above the pool size, what does the queue-depth graph do?"}},
        {"claim": "ch2.autoscale_boot", "title": "Autoscaler on",
         "predict": {"question": "How long does the queue keep growing after the autoscaler adds workers?"}},
        {"claim": "ch2.drain", "title": "Drop λ: scale-in",
         "predict": {"question": "When the pool scales in, is any job redelivered?"}},
    ],
    "ch3": [
        {"claim": "ch3.long_poll", "title": "Upload and watch",
         "predict": {"question": "Which watcher hears about the job first, and when does the long-poll return?"}},
        {"claim": "ch3.etag", "title": "Compare measured and model rows",
         "predict": {"question": "What does a poll of an unchanged job cost when it sends its ETag?"}},
        {"claim": "ch3.watch_panel", "title": "A failing receiver",
         "predict": {"question": "The receiver fails the next deliveries. How many times does one webhook-id "
                                 "arrive, and how many times is it delivered?"}},
        {"claim": "ch3.cas", "title": "Late redelivery of a finished job",
         "predict": {"question": "What does the state machine do with done → running?"}},
        {"claim": "ch3.stale", "title": "VT below the job",
         "predict": {"question": "Who frees the record of a worker killed while it held the job?"}},
    ],
    "ch4": [
        {"claim": "ch4.herd", "title": "Storage outage, exponential backoff",
         "do": [{"settings": {"retry_policy": "exponential", "max_attempts": 5, "classify_errors": False}},
                {"scenario": "outage"}],
         "predict": {**_PEAK, "id": "ch4-step-herd"},
         "moment": "storage.called", "moment_data": {"try": 2}, "look": "retry-histogram",
         "says": "Without jitter the retried calls came back together: {measured} of them reached storage in "
                 "the same simulated second."},
        {"claim": "ch4.jitter", "title": "The same outage, full jitter",
         "do": [{"settings": {"retry_policy": "full_jitter", "max_attempts": 5, "classify_errors": False}},
                {"scenario": "outage"}],
         "predict": {**_PEAK, "id": "ch4-step-jitter"},
         "moment": "storage.called", "moment_data": {"try": 2}, "look": "retry-histogram",
         "says": "Full jitter spread the same retries over the window: the busiest simulated second held "
                 "{measured} of them."},
        {"claim": "ch4.poison", "title": "Poison pill",
         "do": [{"settings": {"retry_policy": "exponential", "max_attempts": 5}}, {"scenario": "poison-pill"}],
         "moment": "job.dead_lettered", "look": "dlq-list",
         "says": "The poison job made {measured} attempts, each failure waited out by the {retry_policy} policy, "
                 "then entered the dead-letter queue at t = {moment_t} s."},
        {"claim": "ch4.crash", "title": "Crashing pill",
         "do": [{"scenario": "crashing-pill"}],
         "predict": {"kind": "number", "min": 1, "max": 50, "unit": "attempts", "id": "ch4-step-crash",
                     "measure": "attempts",
                     "question": "Each delivery kills its worker, so no retry policy runs. How many deliveries "
                                 "will it get before something stops it?"},
         "moment": "job.dead_lettered", "look": "dlq-list",
         "says": "{measured} deliveries, each brought back by its lease; at Max receives ({max_receives}) the "
                 "broker moved it to the dead-letter queue at t = {moment_t} s."},
        {"claim": "ch4.replay", "title": "Replay the DLQ by reason",
         # as the page and its conformance test set it up: an outage long enough for the outage jobs to spend
         # every attempt, a poison pill that skips its retries, then a replay of one reason once storage is back
         "do": [{"settings": {"retry_policy": "exponential", "max_attempts": _CH4["max_attempts"],
                              "classify_errors": True}},
                {"fault": {"type": "storage_outage", "duration_s": _CH4["replay_outage_s"]}},
                *[{"enqueue": _OUTAGE_JOB}] * _CH4["workers"], {"scenario": "poison-pill"},
                {"on": "fault.ended", "choose": {"dlq-reason": "max_attempts"}, "click": "dlq-replay"}],
         "predict": {"kind": "number", "min": 0, "max": 10, "unit": "jobs", "id": "ch4-step-replay",
                     "measure": "state:done",
                     "question": "Outage jobs and a poison pill sit in the DLQ. You replay only the max_attempts "
                                 "reason once storage is back: how many of them come back and finish?"},
         "moment": "job.replayed", "look": "dlq-list",
         "says": "{measured} jobs came back and finished: the replay picked exactly the jobs that ran out of "
                 "attempts; the poison pill, dead-lettered as non_retryable, stayed in the DLQ."},
    ],
    "ch5": [
        {"claim": "ch5.claim_guard", "title": "VT too short, claim guard",
         "do": [{"settings": {"guard": "claim", "idempotent_outputs": True, "notify_guard": True}},
                {"scenario": "vt-too-short"}],
         "moment": "job.duplicate_blocked", "look": "workers",
         "says": "{measured} completion email: the redelivered copy found the record running and backed off, "
                 "so one run wrote one file per rendition and sent one email."},
        {"claim": "ch5.guards_off", "title": "Every guard off",
         "do": [{"settings": {"guard": "off", "idempotent_outputs": False, "notify_guard": False}},
                {"scenario": "vt-too-short"}],
         "moment": "job.redelivered", "look": "workers",
         "says": "{measured} completion emails: with every guard off both runs wrote their own files and each "
                 "sent its email."},
        {"claim": "ch5.guards", "title": "Output-path and notified guards on",
         "do": [{"settings": {"guard": "off", "idempotent_outputs": True, "notify_guard": True}},
                {"scenario": "vt-too-short"}],
         "moment": "email.suppressed", "look": "event-log",
         "says": "{measured} completion email: the job still ran twice and overwrote its files, but the "
                 "notified flag suppressed the second email."},
        {"claim": "ch5.idempotency_key", "title": "Resend with the same key",
         "predict": {"question": "Which job_id comes back, and does the queue grow?"}},
    ],
    "ch6": [
        {"claim": "ch6.shared_fifo", "title": "Shared FIFO",
         "predict": {"question": "Which tier's jobs do the workers take first?"}},
        {"claim": "ch6.noisy_neighbour", "title": "Noisy-neighbour burst",
         "predict": {"question": "How long until another free customer's single job starts?"}},
        {"claim": "ch6.aging", "title": "Strict priority, then aging",
         "predict": {"question": "What happens to free jobs under a saturating pro load?"}},
        {"claim": "ch6.hard_split_idle", "title": "Hard split, no pro traffic",
         "predict": {"question": "What do the reserved pro workers do while free jobs wait?"}},
        {"claim": "ch6.poison_storm", "title": "Free poison storm",
         "predict": {"question": "Can any of the dying workers be a pro worker?"}},
    ],
    "ch7": [
        {"claim": "ch7.no_lock", "title": "No lock",
         "do": [{"click": "ch7-scenario-none"}],
         "predict": {**_PER_TICK, "id": "ch7-step-none",
                     "question": "With no lock, how many runs will one tick produce?"},
         "moment": "cron.overlap", "look": "ch7-counts-box",
         "says": "One tick, {measured} runs: with no lock every replica that fires runs the task."},
        {"claim": "ch7.short_ttl", "title": "A lock shorter than the run",
         "do": [{"click": "ch7-scenario-short"}],
         "predict": {**_PER_TICK, "id": "ch7-step-short",
                     "question": "The lock expires before the run ends, and one replica fires late. How many runs "
                                 "per tick?"},
         "moment": "cron.overlap", "look": "ch7-counts-box",
         "says": "{measured} runs in one tick: the late replica found the lock expired under a run still going "
                 "and ran the task again beside it."},
        {"claim": "ch7.fixes", "title": "One click fixes it",
         "do": [{"click": "ch7-scenario-lock"}],
         "predict": {**_PER_TICK, "id": "ch7-step-lock",
                     "question": "A lock whose TTL outlasts the run: how many runs per tick now?"},
         "moment": "cron.skipped", "look": "ch7-counts-box",
         "says": "{measured} run per tick: the late replica found the lock held and skipped."},
        {"claim": "ch7.leader", "title": "Kill the leader",
         # as its conformance test has it: the killed leader stays dead, so a follower takes over (not its own
         # restart, which would re-take the lease it still holds); the kill waits for a leader to exist
         "do": [{"settings": {"respawn_delay": 3600}}, {"click": "ch7-scenario-leader"}, {"click": "ch7-kill-leader"}],
         "predict": {**_GAP, "id": "ch7-step-leader", "measure": "gap:replica.killed:leader.elected",
                     "question": "You kill the leader as soon as it is elected. For how many simulated seconds "
                                 "does the schedule have no leader?"},
         "moment": "leader.elected", "moment_after": "replica.killed", "look": "ch7-replicas-box",
         "says": "No leader for {measured} s after the kill: the followers waited out what was left of the dead "
                 "leader's {leader_lease} s lease (the lesson's bound), then the next one to poll took it."},
        {"claim": "ch7.catch_up", "title": "All replicas down",
         "do": [{"click": "ch7-scenario-lock"},
                {"settings": {"cron_shard": True, "cron_catch_up": True,
                              "respawn_delay": presets.settings_for("ch7")["respawn_delay"]}},
                {"click": "ch7-down"}],
         "predict": {"kind": "number", "min": 0, "max": 20, "unit": "runs", "id": "ch7-step-catch-up",
                     "measure": "count:cron.catch_up:scheduler.up",
                     "question": f"Every replica is down for {presets.DOWNTIME_DRILL_S:g} s. When they come back, how "
                                 "many catch-up runs mail the missed buckets?"},
         "moment": "cron.catch_up", "moment_after": "scheduler.up", "look": "ch7-counts-box",
         "says": "{measured} catch-up run at t = {moment_t} s: the first replica back took the lock and mailed "
                 "the missed buckets; the others found the tick already run."},
    ],
    "ch8": [
        {"claim": "ch8.demo_time", "title": "Everything on, one upload",
         "predict": {"question": "At the demo speed, how long will one transcode take in real seconds?"}},
        {"claim": "ch8.kill", "title": "Kill the busy worker",
         "predict": {"question": "How long until the killed worker's job is freed and done?"}},
        {"claim": "ch8.kills", "title": "Three rapid kills",
         "predict": {"question": "Spike, plateau or smooth rise: what does the redelivery rate do?"}},
        {"claim": "ch8.kills", "title": "Read the dashboard",
         "predict": {"question": "Which dashboard rows move while it recovers, and which would page someone?"}},
    ],
}


def steps_public() -> dict[str, list[dict[str, Any]]]:
    """The steps as /api/meta serves them: each with its claim's text (revealed after the verdict) and the
    scenario's question when the step asks none of its own."""
    buttons = {(p, b["id"]): b for p, bs in BUTTONS.items() for b in bs}
    out: dict[str, list[dict[str, Any]]] = {}
    for preset, steps in STEPS.items():
        rows = []
        for step in steps:
            row = {**step, "claim_text": lesson.BY_ID[step["claim"]].claim}
            scn = next((a["scenario"] for a in step.get("do", ()) if "scenario" in a), None)
            if "predict" not in step and scn:
                row["predict"] = buttons[(preset, scn)]["predict"]
            rows.append(row)
        out[preset] = rows
    return out
