"""Chapter 0, The Hand-off: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

from typing import Any

from chapters.common import SHOWS_BASICS
from core.lesson import Claim
from core.numbers import Inputs

SLUG = "the-hand-off"  # the page is /chapters/0-the-hand-off

PRESETS: dict[str, dict[str, Any]] = {
    "ch0": {
        "shows": SHOWS_BASICS,
        "title": "Inline vs enqueue",
        "settings": {"workers": 1},
        "controls": ["upload", "inline", "speed", "gateway_timeout"],
    },
}

# the lesson's set-up for every step: a 600 s transcode behind the model's gateway (each step names what it changes)
_INLINE = {"job_duration": 600, "gateway_timeout": 60}
_SECONDS = {"kind": "number", "min": 0, "max": 5000, "unit": "s"}

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch0": [
        {
            "claim": "ch0.inline_504",
            "title": "Press Inline handler",
            "do": [{"settings": _INLINE}, {"click": "inline-submit"}],
            "predict": {
                **_SECONDS,
                "id": "ch0-step-inline",
                "measure": "gap:inline.started:inline.gateway_timeout",
                "question": "The lab transcodes inline, inside the request. How many simulated seconds does "
                "the upload button spin before something answers it?",
            },
            "moment": "inline.gateway_timeout",
            "moment_after": "inline.started",
            "look": "inline-compare",
            "says": "The request was held {measured} s, until the gateway in front of the server gave up and answered "
            "504: the transcode ({job_duration} s) outlasts the gateway's {gateway_timeout} s, and the API "
            "budget was gone long before.",
        },
        {
            "claim": "ch0.for_nobody",
            "title": "After the 504",
            "do": [{"settings": _INLINE}, {"click": "inline-submit"}],
            "predict": {
                **_SECONDS,
                "id": "ch0-step-nobody",
                "measure": "gap:inline.gateway_timeout:inline.finished",
                "question": "The gateway has answered 504 and the user has given up. How many more simulated "
                "seconds does the server keep transcoding?",
            },
            "moment": "inline.finished",
            "moment_after": "inline.started",
            "look": "event-log",
            "says": "The server transcoded on for {measured} s after the 504, for nobody: nothing told it the user had "
            "gone, so the whole {job_duration} s job ran to its end.",
        },
        {
            "claim": "ch0.enqueue_202",
            "title": "Press Enqueue handler",
            "do": [{"settings": _INLINE}, {"click": "enqueue-submit"}],
            "predict": {
                **_SECONDS,
                "id": "ch0-step-enqueue",
                "measure": "gap:job.enqueued:job.succeeded",
                "question": "The enqueue handler answers 202 in milliseconds. How many simulated seconds "
                "after that answer is the job done?",
            },
            "moment": "job.succeeded",
            "look": "workers",
            "says": "Done {measured} s after the 202: the request was long over while a worker did the whole "
            "{job_duration} s of work on its own time.",
        },
        {
            "claim": "ch0.pause",
            "title": "Pause right after the 202",
            "do": [{"settings": _INLINE}, {"click": "enqueue-submit"}],
            "predict": {
                **_SECONDS,
                "id": "ch0-step-pause",
                "measure": "gap:job.enqueued:job.claimed",
                "question": "The clock pauses the moment a worker picks the job up. How many simulated seconds "
                "after the 202 is that, with the lab's one idle worker?",
            },
            "moment": "job.claimed",
            "look": "workers",
            "says": "A worker claimed it {measured} s after the 202: the request is over and the job is already "
            "running, nowhere near done ({job_duration} s of work ahead). Nothing moves until you continue.",
        },
        {
            "claim": "ch0.gateway_raised",
            "title": "Raise the gateway timeout",
            "do": [{"settings": {**_INLINE, "gateway_timeout": 900}}, {"click": "inline-submit"}],
            "predict": {
                **_SECONDS,
                "id": "ch0-step-gateway",
                "measure": "gap:inline.started:inline.finished",
                "question": "The gateway now waits {gateway_timeout} s, longer than the transcode. How many "
                "simulated seconds until the user gets an answer?",
            },
            "moment": "inline.finished",
            "moment_after": "inline.started",
            "look": "inline-compare",
            "says": "A 200, after {measured} s: the request held a web thread for the whole transcode. No 504, but "
            "nobody waits that long for a button.",
        },
    ],
}

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch0.inline_504",
        0,
        "Try this 2",
        "An inline transcode holds the request on the lab clock until the "
        "gateway gives up at its timeout: a real 504, far past the API budget",
        "test_try2_inline_request_ends_in_a_504_at_the_gateway_timeout",
    ),
    Claim(
        "ch0.for_nobody",
        0,
        "Check yourself 1 and 4",
        "After the 504 the server keeps transcoding for nobody, to the end of the job's duration",
        "test_check1_4_the_server_transcodes_on_for_nobody_after_the_504",
    ),
    Claim(
        "ch0.enqueue_202",
        0,
        "Try this 3 / Check yourself 3",
        "The enqueue handler answers 202 with a job id "
        "and status URL before any work happens; the job is durably recorded and carries on in a worker",
        "test_try3_check3_enqueue_answers_202_and_the_job_carries_on_in_a_worker",
    ),
    Claim(
        "ch0.pause",
        0,
        "Try this 4",
        "Paused right after the 202, the request is over and the job has left "
        "the queue for the lab's idle worker: running, nowhere near done",
        "test_try4_paused_after_the_202_the_job_is_running_not_done",
    ),
    Claim(
        "ch0.gateway_raised",
        0,
        "Try this 5",
        "With the gateway timeout above the transcode, the inline "
        "request gets a 200 — after the transcode's whole simulated duration",
        "test_try5_a_gateway_timeout_above_the_transcode_gets_a_200_after_the_whole_transcode",
    ),
    Claim(
        "ch0.slots",
        0,
        "Check yourself 2",
        "Little's law: inline transcodes occupy rate × duration request slots",
        "test_check2_request_slots_are_littles_law",
        status="model",
    ),
    Claim(
        "ch0.predict",
        0,
        "Try this 1",
        "Predict both response times",
        status="thought",
        why="the prediction itself; the guided steps measure both answers in the lab (1 and 5 inline, 3 enqueue)",
    ),
    Claim(
        "ch0.inline_honest_clock",
        0,
        "Try this 5, at the top speed",
        "The inline handler keeps the honest "
        "clock: at 1000× a transcode holds the request exactly its simulated duration (600 s), never that plus "
        "ffmpeg's overrun; when ffmpeg is slower than duration ÷ speed the clock waits for it and the answer "
        "says the clock slowed",
        "test_try5_at_1000x_an_inline_transcode_takes_its_duration_and_the_readout_says_the_clock_slowed",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    transcode = inputs.job("transcode")
    return {
        "enqueue_ms": inputs.enqueue_ms,
        "upload_response_ms": inputs.upload_response_ms,
        "inline_transcode_s": transcode.mean_s,
        "api_budget_ms": inputs.api_budget_ms,
        "inline_over_budget_x": transcode.mean_s * 1000 / inputs.api_budget_ms,
        "inline_vs_enqueue_x": transcode.mean_s * 1000 / inputs.upload_response_ms,
        "gateway_timeout_s": inputs.gateway_timeout_s,
        "inline_gets_504": transcode.mean_s > inputs.gateway_timeout_s,
        "inline_over_gateway_x": transcode.mean_s / inputs.gateway_timeout_s,
        "inline_unheard_s": max(0.0, transcode.mean_s - inputs.gateway_timeout_s),
    }


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another (a unit change, a ratio): so the page does no arithmetic."""
    c0 = fig["ch0"]
    c0["gateway_over_budget_x"] = c0["gateway_timeout_s"] * 1000 / c0["api_budget_ms"]
    tx = next(r for r in fig["ch2"]["job_mix"] if r["job_type"] == "transcode")
    c0["inline_transcode_min"] = c0["inline_transcode_s"] / 60
    c0["inline_transcode_ms"] = c0["inline_transcode_s"] * 1000
    c0["inline_fits_budget"] = c0["inline_transcode_s"] * 1000 <= c0["api_budget_ms"]
    c0["inline_request_slots"] = tx["rate_per_s"] * c0["inline_transcode_s"]
    c0["enqueue_request_slots"] = tx["rate_per_s"] * c0["upload_response_ms"] / 1000
    c0["enqueue_budget_fraction"] = c0["upload_response_ms"] / c0["api_budget_ms"]
