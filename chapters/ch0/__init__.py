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
    "ch0": {"shows": SHOWS_BASICS, "title": "Inline vs enqueue", "settings": {"workers": 1},
            "controls": ["upload", "inline", "speed", "gateway_timeout"]},
}

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
}

CLAIMS: tuple[Claim, ...] = (
    Claim("ch0.inline_504", 0, "Try this 2", "An inline transcode holds the request on the lab clock until the "
          "gateway gives up at its timeout: a real 504, far past the API budget",
          "test_try2_inline_request_ends_in_a_504_at_the_gateway_timeout"),
    Claim("ch0.for_nobody", 0, "Check yourself 1 and 4", "After the 504 the server keeps transcoding for nobody, "
          "to the end of the job's duration", "test_check1_4_the_server_transcodes_on_for_nobody_after_the_504"),
    Claim("ch0.enqueue_202", 0, "Try this 3 / Check yourself 3", "The enqueue handler answers 202 with a job id "
          "and status URL before any work happens; the job is durably recorded and carries on in a worker",
          "test_try3_check3_enqueue_answers_202_and_the_job_carries_on_in_a_worker"),
    Claim("ch0.pause", 0, "Try this 4", "Paused right after the 202, the job sits in the queue: the request is "
          "over, the work has not started", "test_try4_paused_after_the_202_the_job_waits_in_the_queue"),
    Claim("ch0.gateway_raised", 0, "Try this 5", "With the gateway timeout above the transcode, the inline "
          "request gets a 200 — after the transcode's whole simulated duration",
          "test_try5_a_gateway_timeout_above_the_transcode_gets_a_200_after_the_whole_transcode"),
    Claim("ch0.slots", 0, "Check yourself 2", "Little's law: inline transcodes occupy rate × duration request "
          "slots", "test_check2_request_slots_are_littles_law", status="model"),
    Claim("ch0.predict", 0, "Try this 1", "Predict both response times", status="thought",
          why="a prediction step; steps 2 and 3 show the answers"),
    Claim("ch0.inline_honest_clock", 0, "Try this 5, at the top speed", "The inline handler keeps the honest "
          "clock: at 1000× a transcode holds the request exactly its simulated duration (600 s), never that plus "
          "ffmpeg's overrun; when ffmpeg is slower than duration ÷ speed the clock waits for it and the answer "
          "says the clock slowed",
          "test_try5_at_1000x_an_inline_transcode_takes_its_duration_and_the_readout_says_the_clock_slowed"),
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
