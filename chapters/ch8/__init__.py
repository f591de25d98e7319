"""Chapter 8, Assembling the Pipeline: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

from typing import Any

from chapters.common import JOB, SHOWS_RETRIES
from core.lesson import Claim
from core.numbers import Inputs, ceil_workers, fmt

SLUG = "assembling-the-pipeline"  # the page is /chapters/8-assembling-the-pipeline

PRESETS: dict[str, dict[str, Any]] = {
    "ch8": {
        "shows": SHOWS_RETRIES,
        "title": "The assembled pipeline",
        "settings": {"workers": 3, "heartbeat": True, "vt_seconds": 300, "breaker": True, "guard": "claim"},
        "controls": [
            "upload",
            "kill",
            "workers",
            "vt_seconds",
            "heartbeat",
            "ack_mode",
            "guard",
            "stale_after",
            "retry_policy",
            "faults",
            "dlq",
            "clock",
        ],
    },
}

BUTTONS: dict[str, list[dict[str, Any]]] = {
    "ch8": [
        {
            "id": "load",
            "label": "Steady load: 3 jobs",
            "enqueue": JOB,
            "count": 3,
            "hint": "Three transcodes. Then try three rapid kills and watch the redelivery rate readout.",
        },
        {
            "id": "rapid-kills",
            "label": "Three rapid kills",
            "kills": 3,
            "hint": "Every busy worker is SIGKILLed in quick succession. Predict: spike, plateau or smooth rise?",
            "predict": {
                "id": "ch8-kills-lost",
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "jobs",
                "measure": "counter:lost",
                "question": "Three workers die mid-job. How many jobs are lost for good?",
                "why": "Acks are {ack_mode}: the message is deleted only after success, so a killed worker's job "
                "comes back when its lease runs out. Lost: {measured}.",
            },
        },
    ],
}

_SECONDS = {"kind": "number", "min": 0, "max": 5000, "unit": "s"}
_EVERYTHING_ON = {
    "heartbeat": True,
    "vt_seconds": 300,
    "guard": "claim",
    "ack_mode": "late",
    "idempotent_outputs": True,
    "notify_guard": True,
}

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch8": [
        {
            "claim": "ch8.demo_time",
            "title": "Everything on, one upload",
            "do": [{"settings": _EVERYTHING_ON}, {"enqueue": JOB}],
            "predict": {
                **_SECONDS,
                "id": "ch8-step-demo",
                "measure": "gap:job.claimed:job.succeeded",
                "question": "Everything on, one upload. How many simulated seconds from a worker's claim "
                "to done (the real seconds are that ÷ the clock's speed)?",
            },
            "moment": "job.succeeded",
            "look": "workers",
            "says": "{measured} simulated seconds from claim to done: the honest clock runs a transcode for its whole "
            "duration ({job_duration} s), so at the demo speed it takes that ÷ the speed in real seconds.",
        },
        {
            "claim": "ch8.kill",
            "title": "Kill the busy worker",
            "do": [{"settings": _EVERYTHING_ON}, {"enqueue": JOB}, {"on": "lease.extended", "kill": True}],
            "predict": {
                **_SECONDS,
                "id": "ch8-step-kill",
                "measure": "gap:lease.extended:job.stale_freed",
                "question": "The worker dies right after its first heartbeat. How many simulated seconds after "
                "that beat is its job's record freed for the next attempt?",
            },
            "moment": "job.stale_freed",
            "look": "event-log",
            "says": "Freed {measured} s after the last beat: one reset window ({heartbeat_extend} s), \"its holder's "
            'heartbeat lapsed"; the next attempt claims it and the guards keep it to one file per rendition '
            "and one email.",
        },
        {
            "claim": "ch8.kills",
            "title": "Three rapid kills",
            "do": [{"settings": _EVERYTHING_ON}, {"scenario": "load"}, {"on": "job.claimed", "n": 3, "kills": 3}],
            "predict": {
                **_SECONDS,
                "id": "ch8-step-kills",
                "measure": "spread:job.redelivered:3",
                "question": "Three busy workers die within a second. Over how many simulated seconds do their "
                "three jobs come back (redelivered)?",
            },
            "moment": "job.redelivered",
            "moment_n": 3,
            "look": "readout-redelivered",
            "says": "All three came back within {measured} s of each other, well inside the rate's 600 s window: the "
            "redelivery rate jumps in one spike, one redelivery per kill, not a plateau or a slow rise.",
        },
        {
            "claim": "ch8.why_kills_lost",
            "title": "Read the dashboard",
            "do": [{"settings": _EVERYTHING_ON}, {"scenario": "load"}, {"on": "job.claimed", "n": 3, "kills": 3}],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "jobs",
                "id": "ch8-step-lost",
                "measure": "counter:lost",
                "question": "While the lab recovers from three kills, how far does the Lost row move?",
            },
            "moment": "job.succeeded",
            "look": "readout-lost",
            "says": "Lost moved by {measured}: acks are late, so each killed worker's job came back when its lease ran "
            "out and finished. The rows that move are redelivered and its rate; lost and the DLQ, the ones "
            "that would page someone, stay still.",
        },
    ],
}

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch8.dashboard",
        8,
        "The dashboard",
        "Nine rows, one metric per chapter, from the numbers model",
        "test_the_dashboard_has_one_row_per_chapter",
        status="model",
    ),
    Claim(
        "ch8.demo_time",
        8,
        "Try this 1",
        "A transcode takes its simulated duration (the honest clock), so at "
        "the demo speed it takes duration ÷ speed real seconds",
        "test_try1_a_transcode_takes_its_simulated_duration_so_real_time_is_duration_over_speed",
    ),
    Claim(
        "ch8.kill",
        8,
        "Try this 2 / Check yourself 4",
        "Kill the busy worker: the record is freed one reset "
        "window after its last beat; one file per rendition, one email",
        "test_try2_a_killed_busy_workers_job_is_freed_one_reset_window_after_its_last_beat",
    ),
    Claim(
        "ch8.kills",
        8,
        "Try this 3 / Check yourself 1, 5",
        "Three rapid kills: the three jobs come back "
        "together, a spike in the redelivery rate; every redelivery matches a kill",
        "test_try3_check1_check5_rapid_kills_are_a_spike_in_the_redelivery_rate",
    ),
    Claim(
        "ch8.doubled",
        8,
        "Check yourself 3",
        "Doubled traffic: twice the jobs in flight, the pool doubles",
        "test_check3_doubled_traffic_doubles_the_pool",
        status="model",
    ),
    Claim(
        "ch8.judgement",
        8,
        "Try this 4 / Check yourself 2",
        "Which dashboard rows move; why a small dollar figure is worth fixing",
        status="thought",
        why="reading the dashboard and weighing a cost's shape; try 2–3 produce the movements it asks about",
    ),
    Claim(
        "ch8.why_kills_lost",
        8,
        "Predict first: Three rapid kills (why)",
        "Acks are late: the message is "
        "deleted only after success, so each killed worker's job comes back when its lease runs out and "
        "finishes; none is lost",
        "test_try3_check1_check5_rapid_kills_are_a_spike_in_the_redelivery_rate",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def _dashboard(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The nine-row on-call dashboard: one metric per chapter, with the model's healthy value."""
    c = fig
    return [
        {
            "chapter": 0,
            "metric": "upload endpoint latency",
            "healthy": c["ch0"]["upload_response_ms"],
            "unit": "ms",
            "alert_when": f"> {inputs.api_budget_ms:g} ms (slow work inline)",
        },
        {
            "chapter": 1,
            "metric": "redelivery rate (over a window)",
            "healthy": 0,
            "unit": "per day",
            "alert_when": f"sustained > 0 (the VT bug alone: {c['ch1']['collisions_per_day']:,.0f}/day)",
        },
        {
            "chapter": 2,
            "metric": "utilisation ρ and queue depth",
            "healthy": c["ch2"]["utilisation_at_target"],
            "unit": "ρ",
            "alert_when": f"ρ trending to 1 (unscaled peak: {c['ch2']['peak_utilisation_on_average_pool']:.2f})",
        },
        {
            "chapter": 3,
            "metric": "status-path requests per completion",
            "healthy": 1.0,
            "unit": "×",
            "alert_when": f"≫ 1 ({inputs.poll_interval_s:g} s polling: {c['ch3']['polls_per_completion']:.0f}×)",
        },
        {
            "chapter": 4,
            "metric": "DLQ depth and arrival rate",
            "healthy": c["ch4"]["poison_pills_per_day"],
            "unit": "per day",
            "alert_when": "a spike in arrivals (upstream breakage)",
        },
        {
            "chapter": 5,
            "metric": "duplicates blocked",
            "healthy": 0,
            "unit": "per day",
            "alert_when": f"rising (key store: {c['ch5']['key_store_mb']:.0f} MB)",
        },
        {
            "chapter": 6,
            "metric": "wait per tier",
            "healthy": c["ch6"]["pro_split_wait_s"],
            "unit": "s (pro)",
            "alert_when": "pro above its SLA, or free starving",
        },
        {
            "chapter": 7,
            "metric": "scheduled runs per tick / missed ticks",
            "healthy": 1,
            "unit": "runs",
            "alert_when": f"> 1 run, or no run for {c['ch7']['missed_tick_after_s']:g} s",
        },
        {
            "chapter": 8,
            "metric": "end-to-end completion time",
            "healthy": c["ch2"]["expected_completion_s"],
            "unit": "s",
            "alert_when": 'above what the UI promises ("a few minutes")',
        },
    ]


def _cost_rollup(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    price_h = inputs.worker_price_per_hour
    days = inputs.hours_per_month / 24
    return [
        {
            "item": "worker pool at target ρ",
            "chapter": 2,
            "monthly_usd": fig["ch2"]["monthly_cost_usd"],
            "quantity": fig["ch2"]["workers_at_target"],
            "unit": "workers",
        },
        {
            "item": "autoscaled peak margin",
            "chapter": 2,
            "monthly_usd": fig["ch2"]["peak_margin_monthly_cost_usd"],
            "quantity": fig["ch2"]["peak_workers"] - fig["ch2"]["workers_at_target"],
            "unit": "extra workers at peak",
        },
        {
            "item": "redelivery waste (VT bug)",
            "chapter": 1,
            "monthly_usd": fig["ch1"]["redelivery_waste_usd_per_month"],
            "quantity": fig["ch1"]["collisions_per_day"],
            "unit": "collisions/day",
        },
        {
            "item": "poison pills, capped attempts",
            "chapter": 4,
            "monthly_usd": fig["ch4"]["poison_worker_hours_per_day_capped"] * price_h * days,
            "quantity": fig["ch4"]["poison_attempts_per_day_capped"],
            "unit": "attempts/day",
        },
        {
            "item": "idempotency key store",
            "chapter": 5,
            "monthly_usd": None,
            "quantity": fig["ch5"]["key_store_mb"],
            "unit": "MB",
        },
        {
            "item": "WebSocket connection memory",
            "chapter": 3,
            "monthly_usd": None,
            "quantity": fig["ch3"]["websocket_memory_mb"],
            "unit": "MB",
        },
    ]


def _checklist(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-job checklist, answered for the transcode job with the model's numbers."""
    c0, c1, c2, c3, c4, c5, c6, c7 = (fig[f"ch{i}"] for i in range(8))
    return [
        {
            "chapter": 0,
            "question": "Does the work fit inside a request?",
            "answer": f"{c0['inline_transcode_s']:g} s vs a {inputs.api_budget_ms:g} ms budget → enqueue, 202",
            "ok": c0["inline_transcode_s"] * 1000 <= inputs.api_budget_ms,
        },
        {
            "chapter": 1,
            "question": "Does the claim outlive the job's worst case?",
            "answer": f"VT {c1['visibility_timeout_s']:g} s vs p99 {c1['transcode_p99_s']:g} s; heartbeat "
            f"{c1['heartbeat_interval_s']:g}/{c1['heartbeat_extend_s']:g} s detects a crash in "
            f"{c1['heartbeat_crash_detection_s']:g} s",
            "ok": c1["vt_covers_p99"],
        },
        {
            "chapter": 2,
            "question": "Is the pool sized for the peak, not the average?",
            "answer": f"{c2['workers_at_target']:,} workers at average, {c2['peak_workers']:,} at the "
            f"{c2['peak_multiplier']:g}× peak",
            "ok": c2["peak_utilisation_on_average_pool"] < 1,
        },
        {
            "chapter": 3,
            "question": "How does the client learn it finished?",
            "answer": f"polling {c3['polls_per_s']:,.0f}/s ({c3['polls_per_completion']:.0f}×) vs webhook "
            f"{c3['webhook_requests_per_s']:,.0f}/s",
            "ok": None,
        },
        {
            "chapter": 4,
            "question": "What happens when it fails, and when does it stop?",
            "answer": f"full jitter, {inputs.max_attempts} attempts or {inputs.retry_budget_s:g} s, then DLQ "
            f"({c4['poison_pills_per_day']:,.0f} poison pills/day)",
            "ok": None,
        },
        {
            "chapter": 5,
            "question": "Is it safe to run twice?",
            "answer": f"{c5['dedup_window_s']:,.0f} s dedup window, {c5['key_store_mb']:,.0f} MB of keys; "
            "deterministic output path; notified CAS flag",
            "ok": None,
        },
        {
            "chapter": 6,
            "question": "Whose queue does it wait in?",
            "answer": f"pro {fmt(c6['pro_split_wait_s'], '.1f', ' s')}, free "
            f"{fmt(c6['free_split_wait_min'], '.1f', ' min')} under the hard split",
            "ok": None,
        },
        {
            "chapter": 7,
            "question": "If scheduled, can it run twice or be missed?",
            "answer": f"lock TTL {c7['lock_ttl_s']:g} s vs p99 {c7['task_p99_s']:g} s: "
            f"{c7['lock_margin_after_skew_s']:g} s margin after skew; catch-up after "
            f"{c7['missed_tick_after_s']:g} s",
            "ok": c7["lock_margin_after_skew_s"] > 0,
        },
        {
            "chapter": 8,
            "question": "Which dashboard row pages someone?",
            "answer": "redelivery rate over a window (infrastructure instability)",
            "ok": None,
        },
    ]


def _inputs_table(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Chapter 8's "five inputs" table: each input and the figure keys it feeds."""
    return [
        {
            "input": "traffic λ",
            "value": inputs.arrival_rate,
            "unit": "jobs/s",
            "feeds": [
                "ch2.in_flight_jobs",
                "ch2.workers_at_target",
                "ch2.peak_workers",
                "ch3.polls_per_s",
                "ch3.websocket_memory_mb",
                "ch4.poison_pills_per_day",
                "ch5.key_store_mb",
                "ch6.pro_arrival_rate",
            ],
        },
        {
            "input": "job mix and durations",
            "value": fig["ch2"]["blended_duration_s"],
            "unit": "s (blended W)",
            "feeds": [
                "ch2.blended_duration_s",
                "ch2.in_flight_jobs",
                "ch1.collision_overlap_s",
                "ch5.dedup_window_s",
                "ch2.queue_wait_s",
            ],
        },
        {
            "input": "utilisation target ρ",
            "value": inputs.target_utilisation,
            "unit": "",
            "feeds": ["ch2.workers_at_target", "ch2.queue_wait_s", "ch2.wait_curve", "ch6.free_workers"],
        },
        {
            "input": "worker price",
            "value": inputs.worker_price_per_hour,
            "unit": "$/worker-hour",
            "feeds": [
                "ch2.monthly_cost_usd",
                "ch2.cost_per_job_usd",
                "ch6.pro_reservation_cost_usd_per_month",
                "ch1.redelivery_waste_usd_per_month",
            ],
        },
        {
            "input": "tier split",
            "value": inputs.pro_share,
            "unit": "pro fraction",
            "feeds": ["ch6.pro_split_wait_s", "ch6.free_split_wait_s", "ch6.pro_revenue_usd_per_month"],
        },
    ]


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rollup = _cost_rollup(inputs, fig)
    total = sum(r["monthly_usd"] for r in rollup if r["monthly_usd"] is not None)
    pool = fig["ch2"]["monthly_cost_usd"]
    return {
        "demo_speed": inputs.demo_speed,
        "demo_fixed_vt_real_s": inputs.fixed_visibility_timeout_s / inputs.demo_speed,
        "demo_heartbeat_detection_real_s": inputs.heartbeat_extend_s / inputs.demo_speed,
        "demo_transcode_real_s": inputs.job("transcode").mean_s / inputs.demo_speed,
        "cost_rollup": rollup,
        "cost_rollup_total_usd_per_month": total,
        "redelivery_share_of_pool": fig["ch1"]["redelivery_waste_usd_per_month"] / pool,
        "dashboard": _dashboard(inputs, fig),
        "checklist": _checklist(inputs, fig),
        "inputs_table": _inputs_table(inputs, fig),
    }


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another (twice the traffic): so the page does no arithmetic."""
    c2 = fig["ch2"]
    c8 = fig["ch8"]
    doubled = ceil_workers(2 * c2["in_flight_jobs"], inputs.target_utilisation)
    c8["doubled_traffic"] = {
        "arrival_rate": 2 * inputs.arrival_rate,
        "in_flight_jobs": 2 * c2["in_flight_jobs"],
        "workers": doubled,
        "pool_usd_per_month": doubled * inputs.worker_price_per_hour * inputs.hours_per_month,
    }
