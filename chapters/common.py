"""Chapter vocabulary: the words every chapter home writes its tables in.

What a widget shows as the course goes on (`shows`), the jobs and predict specs several chapters' buttons and
steps share, and a preset's full settings. A chapter home (chapters/chN/__init__.py) imports from here; this
module imports only core.
"""

from __future__ import annotations

from typing import Any

from core.numbers import Inputs
from core.settings import DEFAULTS

LESSON_INPUTS = Inputs()  # the numbers model at the lesson's own inputs

# What a chapter's widget shows: the parts of the picture the course has introduced by that chapter,
# and nothing a later chapter explains (issue 28). The widget shows a readout, panel, legend entry or
# heading only if its term is here (`shows` in /api/meta; `data-term` on the element). Each list adds
# to the one before, in the course's order.
SHOWS_BASICS = ("queue", "inflight", "workers", "clock", "done", "timeline", "jobs", "log", "history")  # chapter 0
SHOWS_LEASES = (*SHOWS_BASICS, "lease", "redelivered", "duplicates", "lost")  # leases, redelivery, ack modes, guards
SHOWS_RETRIES = (*SHOWS_LEASES, "dlq", "retries")  # dead letters, retry backoff waits

# A preset (PRESETS in a chapter home): settings overrides, the controls the widget shows, what of the picture
# it shows (`shows`), and a one-line `title`.
# `pipeline: False` marks a lab with no job queue at all (its add-on panel is the whole story):
# the widget then leaves out the queue, lease, worker and job panels and their readouts.


def settings_of(preset: dict[str, Any]) -> dict[str, Any]:
    """Full settings for a preset: the schema defaults with the preset's overrides on top."""
    return {**DEFAULTS, **preset["settings"]}


# A chapter's BUTTONS: the widget's scenario buttons, per preset: one press patches a few settings on the lab
# the learner already has, injects a fault, sends jobs or kills workers (unlike SCENARIOS, shared set-ups that
# build a whole lab from a link). The widget reads them from /api/meta.
JOB = {"sample": "bigbuckbunny"}
LONG_JOB = {**JOB, "duration_s": 600}
OUTAGE_JOB = {**JOB, "job_type": "thumbnail", "duration_s": 200}  # uploads its parts while storage is down
LONG_TRANSCODE = {"sample": "bigbuckbunny", "job_type": "transcode", "duration_s": 600}  # a race's one long job
# `predict` (issue 22): what the learner commits to before the run, and how the lab measures it
# (static/js/widget/predict-model.js): `attempts` of the run's first job, `state:<s>` jobs of the run that
# end in state s, `counter:<name>` how far a counter moved. `why` is shown when the guess misses, with
# {setting} filled in from the lab's own settings, {measured} from the measurement and {guard_that_acted}
# from the run's own counters (which guard stopped the duplicate). A guided step's run (a chapter's STEPS) may also
# measure its events: `gap:A:B[:field]` seconds from an A to the next B (sharing A's field, e.g. worker_id),
# `spread:type:N` seconds from the first `type` to the N-th, `peak:type` the busiest second's retried calls,
# `pertick:type` one tick's events, `count:type[:after]` how many there were (after the first `after` event) once
# the tick after them began; and at its moment: `moment:key` the moment event's own figure, `events:type` and
# `distinct:type:field` how many (different) events up to it, `concurrent:A:B` the most runs at once (an A starts
# one, a B ends one), `backlog` jobs enqueued and not yet claimed,
# `meanwait:N` the first N jobs' mean queue wait, `panel:testid:attr` a figure a chapter panel measured itself
# (read once the panel's round is over). predict-model.js `fromEvents` reads them; tests/e2e/test_stepper.py
# computes the same figure from the lab's stream.

# ---- guided steps (issue 28): each chapter's "Try this" list, one step per item, in the page's order ----
# A step names the claim (core/lesson.py) whose test proves what it shows, so a step and its test cannot
# drift apart (tests/unit/test_steps.py). The widget's stepper (static/js/widget/stepper.js) acts a step
# out with the lab's own controls:
#   `do`      in order: {"scenario": id} presses that scenario button (a chapter's BUTTONS: its settings, fault and
#             jobs), {"settings": {...}} PATCHes settings, {"enqueue": {...}} sends a job, {"click": testid}
#             presses an existing control of the page, {"on": event type, "kill"|"expire": true} kills the
#             run's worker / cuts its lease when that event arrives for the run's job, {"on": event type,
#             "click": testid, "choose": {select testid: value}} picks an option and presses a control when it
#             arrives (the DLQ's replay by reason, once the outage is over), {"fault": {...}} starts a fault;
#             a click may `fill` fields first ({input testid: value}, a panel's rate or job count), and with
#             `"answered": True` the next act waits until what the click sent was answered (a burst queued before
#             the job that must find it there; a click that holds its request, the inline handler's, must not);
#             an `on` action
#             may wait for its `n`-th event, resize the pool (`settings`) or kill `kills` busy workers of the run;
#             {"api": [method, path, body]} is a set-up the page has no button for (stop a load left running),
#             {"wait": [testid, attribute, value]} waits for a panel to show it;
#   `predict` the question asked first (the predict.js spec; its button's own `predict` when absent);
#   `moment`  the event type at which the stepper pauses the clock (`moment_data`: fields it must carry;
#             `moment_n`: its n-th such event; with
#             `on` actions, the first one after they have all fired; `moment_after`: the first one after an
#             event of that type, e.g. the leader elected after the kill), `look` the element (data-testid) it
#             points at then;
#   `says`    the one sentence shown beside the verdict ({measured}, {moment_t} and settings filled in).
# Every step acts (tests/unit/test_steps.py): none only asks, then reveals its claim's text.
GAP = {"kind": "number", "min": 0, "max": 5000, "unit": "s"}
KILL_ON_CLAIM = {"on": "job.claimed", "kill": True}
PER_TICK = {"kind": "number", "min": 0, "max": 20, "unit": "runs", "measure": "pertick:cron.run_started"}
