"""Chapter 3, Status Delivery: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here are its preset(s) (settings, controls, what the widget
shows), the widget's scenario buttons, its guided steps, shared set-ups, races, lesson claims and the
names of its add-on. chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import SHOWS_LEASES, settings_of
from core.backoff import exponential_delay
from core.lesson import Claim

SLUG = "status-delivery"  # the page is /chapters/3-status-delivery
ADDON = "status"  # its lab panel: templates/_lab_status.html, static/js/lab-status.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch3": {"shows": SHOWS_LEASES, "title": "Status delivery",
            "settings": {"workers": 2, "job_duration": 300, "guard": "claim"},
            # vt_seconds and heartbeat: "Try this 5" sets the VT below the job and turns the heartbeat on
            "controls": ["upload", "kill", "vt_seconds", "heartbeat", "guard", "stale_after", "clock"]},
}


CH3_RECEIVER_FAILS = 2  # chapter 3's try this 3: the built-in receiver fails the next two deliveries


def lab_model() -> dict[str, Any]:
    """What chapter 3's "Try this" 3 says the ch3 lab shows: with the receiver failing the next N deliveries,
    one job's webhook-id arrives N + 1 times, retried with full jitter on the preset's retry settings (the
    deliverer gives a message max_attempts tries, so N + 1 must fit). The page and the suite both read it."""
    s = settings_of(PRESETS["ch3"])
    fails = CH3_RECEIVER_FAILS
    assert fails + 1 <= int(s["max_attempts"]), "the ch3 preset gives a webhook too few tries for try this 3"
    # try this 5's VT: below the job, so the lease runs out once while it runs (a copy is redelivered and backs
    # off), but above half of it, so the copy's own lease outlives the job and no second copy comes
    dur = float(s["job_duration"])
    short_vt = round(dur * 2 / 3)
    return {"short_vt_s": short_vt, "short_vt_copies": math.ceil(dur / short_vt) - 1,
            "receiver_fails": fails, "webhook_arrivals": fails + 1, "max_attempts": int(s["max_attempts"]),
            "retry_base_s": float(s["retry_base"]), "retry_cap_s": float(s["retry_cap"]),
            "jitter_windows_s": [exponential_delay(k, float(s["retry_base"]), float(s["retry_cap"]))
                                 for k in range(1, fails + 1)]}


def lab_facts() -> dict[str, Any]:
    """What the chapter's text says about its lab (`lab.ch3_model` in chapter.md)."""
    return {"ch3_model": lab_model()}

STEPS: dict[str, list[dict[str, Any]]] = {
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
}

CLAIMS: tuple[Claim, ...] = (
    Claim("ch3.etag", 3, "Try this 2 / Check yourself 2", "Polling with an ETag: unchanged status answers 304 "
          "with no body", "test_try2_check2_an_unchanged_job_answers_304_to_its_etag"),
    Claim("ch3.long_poll", 3, "Try this 1", "A long-poll returns as soon as the job changes, not at its "
          "timeout", "test_try1_a_long_poll_returns_when_the_job_changes"),
    Claim("ch3.cas", 3, "Try this 4 / Check yourself 4", "CAS: a late delivery of a finished job finds it done and "
          "is refused (done → running)", "test_try4_check4_a_late_delivery_of_a_finished_job_is_refused"),
    Claim("ch3.stale", 3, "Try this 5 / Check yourself 5", "VT below the job under claim: the copy backs off, done "
          "once; a crashed holder's record is freed by the stale-job sweeper after stale_after, or by the "
          "heartbeat within one reset window",
          "test_try5_check5_a_short_vt_copy_backs_off_and_a_crashed_holder_is_freed"),
    Claim("ch3.halve_poll", 3, "Check yourself 1", "Halving the poll interval doubles the requests and halves "
          "the mean delay", "test_check1_halving_the_poll_interval_doubles_requests_and_halves_the_delay",
          status="model"),
    Claim("ch3.watch_panel", 3, "Try this 1–3", "Five watchers side by side; polling's requests per job near W/P; "
          "with the receiver failing the next N deliveries, one job's webhook-id arrives N + 1 times (N = 2: "
          "three), full-jitter delays apart, and is delivered once",
          "test_try1_3_five_watchers_polling_near_w_over_p_and_a_failing_receiver_gets_one_id_n_plus_1_times"),
    Claim("ch3.design", 3, "Check yourself 3, 6", "Webhook outbox; which mechanism to build first",
          status="thought", why="design judgement, not an outcome the lab produces"),
)
