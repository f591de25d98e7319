"""Chapter 3, Status Delivery: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import SHOWS_LEASES, settings_of
from core.backoff import exponential_delay
from core.lesson import Claim
from core.numbers import BYTES_PER_KB, BYTES_PER_MB, Inputs
from core.series import Chart, Point, Series

SLUG = "status-delivery"  # the page is /chapters/3-status-delivery
ADDON = "status"  # its lab panel: templates/_lab_status.html, static/js/lab-status.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch3": {
        "shows": SHOWS_LEASES,
        "title": "Status delivery",
        "settings": {"workers": 2, "job_duration": 300, "guard": "claim"},
        # vt_seconds and heartbeat: "Try this 5" sets the VT below the job and turns the heartbeat on
        "controls": ["upload", "kill", "vt_seconds", "heartbeat", "guard", "stale_after", "clock"],
    },
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
    return {
        "short_vt_s": short_vt,
        "short_vt_copies": math.ceil(dur / short_vt) - 1,
        "receiver_fails": fails,
        "webhook_arrivals": fails + 1,
        "max_attempts": int(s["max_attempts"]),
        "retry_base_s": float(s["retry_base"]),
        "retry_cap_s": float(s["retry_cap"]),
        "jitter_windows_s": [
            exponential_delay(k, float(s["retry_base"]), float(s["retry_cap"])) for k in range(1, fails + 1)
        ],
    }


def lab_facts() -> dict[str, Any]:
    """What the chapter's text says about its lab (`lab.ch3_model` in chapter.md)."""
    return {"ch3_model": lab_model()}


def _watch(jobs: int = 1, every_s: float = 0.5) -> dict[str, Any]:
    """The panel's own "Upload and watch", for `jobs` jobs polled every `every_s` s (real time, as it says)."""
    return {"click": "ch3-start", "fill": {"ch3-jobs": jobs, "ch3-interval": every_s}}


STEPS: dict[str, list[dict[str, Any]]] = {
    "ch3": [
        {
            "claim": "ch3.long_poll",
            "title": "Upload and watch",
            "do": [{"settings": {"job_duration": 300, "vt_seconds": 1200, "heartbeat": False}}, _watch()],
            "predict": {
                "kind": "choice",
                "id": "ch3-step-long",
                "measure": "panel:ch3-row-long:data-mean-ms",
                "question": "Five watchers on one job. The long-poll is held up to 25 s at a time. When does it "
                "learn that the job is done?",
                "choices": [
                    ["now", "at once: within a second"],
                    ["midway", "a few seconds later, like a poller"],
                    ["timeout", "when its 25 s hold runs out"],
                ],
                "buckets": {"now": [0, 999], "midway": [1000, 19999], "timeout": [20000, 10**9]},
            },
            "moment": "job.succeeded",
            "look": "ch3-methods",
            "says": "The long-poll knew {measured} ms after the job was done: the server answers a held request the "
            "moment the job changes, not at its 25 s timeout. Compare the polling rows' delays and requests.",
        },
        {
            "claim": "ch3.etag",
            "title": "Polling with an ETag",
            "do": [{"settings": {"job_duration": 300, "vt_seconds": 1200, "heartbeat": False}}, _watch()],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 1000,
                "unit": "answers",
                "id": "ch3-step-etag",
                "measure": "panel:ch3-row-etag:data-not-modified",
                "question": "The ETag poller asks every 0.5 s, sending the ETag it last saw. How many of its "
                "answers are 304 Not Modified, with no body?",
            },
            "moment": "job.succeeded",
            "look": "ch3-methods",
            "says": "304s with no body: {measured}. Every poll of an unchanged job costs a round trip and headers, "
            "and only the polls that found a change carried the status.",
        },
        {
            "claim": "ch3.watch_panel",
            "title": "A failing receiver",
            "do": [
                {"click": "ch3-fail", "fill": {"ch3-fails": CH3_RECEIVER_FAILS}},
                {"settings": {"job_duration": 300, "vt_seconds": 1200, "heartbeat": False}},
                _watch(),
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 20,
                "unit": "arrivals",
                "id": "ch3-step-hook",
                "measure": "events:webhook.received",
                "question": f"The receiver fails the next {CH3_RECEIVER_FAILS} deliveries. How many times does "
                "the one job's webhook-id arrive at it?",
            },
            "moment": "webhook.delivered",
            "look": "ch3-webhook",
            "says": "Its webhook-id arrived {measured} times: answered 500 until the switch ran out, then 200, each "
            "retry a random (full-jitter) delay later; delivered once, with one id the receiver can dedupe on.",
        },
        {
            "claim": "ch3.cas",
            "title": "Late redelivery of a finished job",
            "do": [
                {"settings": {"job_duration": 300, "vt_seconds": 1200, "heartbeat": False}},
                _watch(),
                {"on": "webhook.delivered", "click": "ch3-late"},
            ],
            "predict": {
                "kind": "choice",
                "id": "ch3-step-cas",
                "measure": "events:job.claim_refused",
                "question": "A real worker receives the finished job once more. Does the state machine let "
                "done → running through?",
                "choices": [["refused", "no: refused"], ["runs", "yes: it runs again"]],
                "buckets": {"refused": [1, 1000], "runs": [0, 0]},
            },
            "moment": "job.claim_refused",
            "look": "ch3-cas",
            "says": "Refused ({measured} refusal): the claim is a compare-and-swap from queued or retrying to running, "
            "so a late delivery finds the job done and backs off; done → running is not a move it has.",
        },
        {
            "claim": "ch3.stale",
            "title": "VT below the job, then a kill",
            "do": [
                {"settings": {"job_duration": 300, "vt_seconds": 200, "heartbeat": False, "guard": "claim"}},
                {"enqueue": {"sample": "bigbuckbunny", "duration_s": 300}},
                {"on": "job.claimed", "kill": True},
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 5000,
                "unit": "s",
                "id": "ch3-step-stale",
                "measure": "gap:job.claimed:job.stale_freed",
                "question": "VT 200 s, no heartbeat, and the worker dies right after its claim. How many "
                "simulated seconds after the claim is its record freed for the next attempt?",
            },
            "moment": "job.stale_freed",
            "look": "event-log",
            "says": "Freed {measured} s after the claim: every redelivered copy found the record running and backed "
            "off, until the stale-job sweeper ({stale_after} s) put it back to queued. With the heartbeat on, "
            "it would be one reset window after the crash.",
        },
    ],
}

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch3.etag",
        3,
        "Try this 2 / Check yourself 2",
        "Polling with an ETag: unchanged status answers 304 with no body",
        "test_try2_check2_an_unchanged_job_answers_304_to_its_etag",
    ),
    Claim(
        "ch3.long_poll",
        3,
        "Try this 1",
        "A long-poll returns as soon as the job changes, not at its timeout",
        "test_try1_a_long_poll_returns_when_the_job_changes",
    ),
    Claim(
        "ch3.cas",
        3,
        "Try this 4 / Check yourself 4",
        "CAS: a late delivery of a finished job finds it done and is refused (done → running)",
        "test_try4_check4_a_late_delivery_of_a_finished_job_is_refused",
    ),
    Claim(
        "ch3.stale",
        3,
        "Try this 5 / Check yourself 5",
        "VT below the job under claim: the copy backs off, done "
        "once; a crashed holder's record is freed by the stale-job sweeper after stale_after, or by the "
        "heartbeat within one reset window",
        "test_try5_check5_a_short_vt_copy_backs_off_and_a_crashed_holder_is_freed",
    ),
    Claim(
        "ch3.halve_poll",
        3,
        "Check yourself 1",
        "Halving the poll interval doubles the requests and halves the mean delay",
        "test_check1_halving_the_poll_interval_doubles_requests_and_halves_the_delay",
        status="model",
    ),
    Claim(
        "ch3.watch_panel",
        3,
        "Try this 1–3",
        "Five watchers side by side; polling's requests per job near W/P; "
        "with the receiver failing the next N deliveries, one job's webhook-id arrives N + 1 times (N = 2: "
        "three), full-jitter delays apart, and is delivered once",
        "test_try1_3_five_watchers_polling_near_w_over_p_and_a_failing_receiver_gets_one_id_n_plus_1_times",
    ),
    Claim(
        "ch3.design",
        3,
        "Check yourself 3, 6",
        "Webhook outbox; which mechanism to build first",
        status="thought",
        why="design judgement, not an outcome the lab produces",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    lam, L = core["lam"], core["L"]
    polls = L / inputs.poll_interval_s
    unchanged = max(0.0, 1 - lam / polls)
    ws_bytes = L * inputs.websocket_kb_per_connection * BYTES_PER_KB
    long_poll_rate = max(lam, L / inputs.long_poll_max_wait_s)
    interval_rows = [
        {
            "interval_s": t,
            "polls_per_s": L / t,
            "polls_per_completion": L / t / lam,
            "mean_delay_to_learn_s": t / 2,
            "worst_delay_to_learn_s": t,
        }
        for t in inputs.poll_interval_options
    ]
    return {
        "watched_jobs": L,
        "poll_interval_s": inputs.poll_interval_s,
        "polls_per_s": polls,
        "completions_per_s": lam,
        "polls_per_completion": polls / lam,
        "poll_mean_delay_to_learn_s": inputs.poll_interval_s / 2,
        "poll_interval_table": interval_rows,
        "webhook_requests_per_s": lam,
        "webhook_reduction_x": polls / lam,
        "websocket_connections": L,
        "websocket_memory_bytes": ws_bytes,
        "websocket_memory_mb": ws_bytes / BYTES_PER_MB,
        "long_poll_max_wait_s": inputs.long_poll_max_wait_s,
        "long_poll_delay_to_learn_s": inputs.long_poll_check_s,
        "long_poll_held_connections": L,
        "long_poll_requests_per_s": long_poll_rate,
        "etag_unchanged_fraction": unchanged,
        "etag_not_modified_per_s": polls * unchanged,
        "status_body_bytes": inputs.status_body_bytes,
        "etag_bandwidth_saved_bytes_per_s": polls * unchanged * inputs.status_body_bytes,
        "delivery_mechanisms": [
            {
                "mechanism": "polling",
                "requests_per_s": polls,
                "mean_delay_to_learn_s": inputs.poll_interval_s / 2,
                "server_holds": "nothing",
                "best_for": "first version; any client",
            },
            {
                "mechanism": "long polling",
                "requests_per_s": long_poll_rate,
                "mean_delay_to_learn_s": inputs.long_poll_check_s,
                "server_holds": f"{L:,.0f} open requests",
                "best_for": "browsers without a socket tier",
            },
            {
                "mechanism": "webhook",
                "requests_per_s": lam,
                "mean_delay_to_learn_s": 0.0,
                "server_holds": "outbound calls + retries",
                "best_for": "server-to-server clients",
            },
            {
                "mechanism": "WebSocket",
                "requests_per_s": 0.0,
                "mean_delay_to_learn_s": 0.0,
                "server_holds": f"{ws_bytes / BYTES_PER_MB:,.1f} MB of sockets",
                "best_for": "browser tabs that cannot receive a callback",
            },
        ],
        "state_transitions": [
            {"from": "queued", "to": "running", "valid": True, "when": "a worker claims the job (CAS)"},
            {"from": "running", "to": "done", "valid": True, "when": "the attempt succeeds"},
            {"from": "running", "to": "retrying", "valid": True, "when": "a retryable failure, attempts left"},
            {"from": "retrying", "to": "running", "valid": True, "when": "the retry is claimed"},
            {"from": "running", "to": "failed", "valid": True, "when": "non-retryable or attempts exhausted → DLQ"},
            {
                "from": "done",
                "to": "running",
                "valid": False,
                "when": "a redelivered duplicate after success — CAS updates 0 rows",
            },
        ],
    }


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another: so the page does no arithmetic."""
    c3 = fig["ch3"]
    saved = c3["etag_bandwidth_saved_bytes_per_s"]
    c3["etag_bandwidth_saved_kb_per_s"] = saved / 1000
    c3["etag_bandwidth_saved_gb_per_day"] = saved * 86400 / 1e9
    c3["halved_poll_interval_s"] = c3["poll_interval_s"] / 2
    c3["halved_interval_polls_per_s"] = c3["polls_per_s"] * 2
    c3["halved_interval_mean_delay_s"] = c3["poll_mean_delay_to_learn_s"] / 2


# ---- charts (core/series.py's shapes; chapters.chart_series gathers them) ----


def status_requests(inputs: Inputs, fig: dict) -> Chart:
    rows = fig["ch3"]["delivery_mechanisms"]
    pts = tuple(
        Point(
            r["mechanism"],
            r["requests_per_s"],
            f"{r['requests_per_s']:,.0f}/s"
            + (" — events pushed over open sockets" if r["requests_per_s"] == 0 else ""),
        )
        for r in rows
    )
    summary = " ".join(f"{r['mechanism']}: {r['requests_per_s']:,.0f} requests per second." for r in rows)
    return Chart(
        "status_requests",
        "bars",
        "status-path requests per second",
        series=(Series("requests", "requests per second", pts, "solid", "none", "accent"),),
        summary=summary,
        x_min=0,
        table=(("mechanism", "requests per second"),) + tuple((p.x, f"{p.y:,.0f}") for p in pts),
    )


CHARTS = {"status_requests": status_requests}
