"""Chapter presets: which settings a chapter's lab starts from and which controls it shows."""

from __future__ import annotations

import math
from typing import Any

from core.numbers import Inputs, derive, jitter_expected_peak, jitter_peak_per_bucket
from core.settings import DEFAULTS

_MODEL = Inputs()

# What a chapter's widget shows: the parts of the picture the course has introduced by that chapter,
# and nothing a later chapter explains (issue 28). The widget shows a readout, panel, legend entry or
# heading only if its term is here (`shows` in /api/meta; `data-term` on the element). Each list adds
# to the one before, in the course's order.
SHOWS_CH0 = ("queue", "inflight", "workers", "clock", "done", "timeline", "jobs", "log", "history")
SHOWS_CH1 = (*SHOWS_CH0, "lease", "redelivered", "duplicates", "lost")  # leases, redelivery, ack modes, guards
SHOWS_CH4 = (*SHOWS_CH1, "dlq", "retries")  # dead letters, retry backoff waits

# Each preset: settings overrides, the controls the widget shows, what of the picture it shows (`shows`),
# and a one-line scenario.
# `pipeline: False` marks a lab with no job queue at all (its add-on panel is the whole story):
# the widget then leaves out the queue, lease, worker and job panels and their readouts.
PRESETS: dict[str, dict[str, Any]] = {
    "ch0": {"shows": SHOWS_CH0, "title": "Inline vs enqueue", "settings": {"workers": 1},
            "controls": ["upload", "speed", "gateway_timeout"]},
    "ch1": {"shows": SHOWS_CH1, "title": "VT too short: 300 s lease, 600 s job",
            "settings": {"workers": 2, "vt_seconds": 300, "retry_policy": "none", "guard": "off"},
            "controls": ["upload", "kill", "vt_seconds", "heartbeat", "ack_mode", "guard", "clock"]},
    "ch1-heartbeat": {"shows": SHOWS_CH1, "title": "Heartbeat: short lease, extended while alive",
                      "settings": {"workers": 2, "vt_seconds": 300, "heartbeat": True, "guard": "off"},
                      "controls": ["upload", "kill", "vt_seconds", "heartbeat", "clock"]},
    "ch2": {"shows": SHOWS_CH1, "title": "Sizing the pool: load at λ, measured L vs λW",
            "settings": {"workers": 4, "job_duration": 120, "boot_lag": 90, "exec_timeout": 960,
                         "vt_seconds": 1200, "lock_ttl": 1800},
            "controls": ["upload", "kill", "workers", "scale_in", "autoscale", "autoscale_target_wait",
                         "boot_lag", "exec_timeout", "vt_seconds", "lock_ttl", "clock"]},
    "ch3": {"shows": SHOWS_CH1, "title": "Status delivery",
            "settings": {"workers": 2, "job_duration": 300, "guard": "claim"},
            # vt_seconds and heartbeat: "Try this 5" sets the VT below the job and turns the heartbeat on
            "controls": ["upload", "kill", "vt_seconds", "heartbeat", "guard", "stale_after", "clock"]},
    "ch4": {"shows": SHOWS_CH4, "title": "Retries, jitter and the DLQ",
            # the lesson's chapter 4: exponential backoff (10 s base: its 1, 3, 7, 15 s schedule ×10),
            # 5 attempts, a poison pill that fails through the policy (classification off, as in the
            # lesson), 3 workers × 12 upload parts = 36 storage callers for the herd, and a heartbeat so a
            # crashing pill's redeliveries come one reset window (180 s) apart
            "settings": {"job_duration": 300, "retry_policy": "exponential",
                         "retry_base": 10, "retry_cap": 300, "max_attempts": 5, "max_receives": 5,
                         "vt_seconds": 600, "heartbeat": True, "classify_errors": False, "upload_parts": 12,
                         "workers": 3, "guard": "claim"},
            "controls": ["upload", "kill", "retry_policy", "max_attempts", "upload_parts", "classify_errors",
                         "faults", "breaker", "dlq", "clock"]},
    "ch5": {"shows": SHOWS_CH4, "title": "Effectively once",
            "settings": {"workers": 2, "vt_seconds": 300, "heartbeat": False, "guard": "claim"},
            "controls": ["upload", "kill", "vt_seconds", "guard", "idempotent_outputs", "notify_guard",
                         "dedup_fail_mode", "clock"]},
    "ch6": {"shows": SHOWS_CH4, "title": "Fairness between tiers",
            "settings": {"workers": 3, "job_duration": 60, "fairness": "shared", "fair_job_s": 30},
            "controls": ["workers", "clock"]},
    "ch7": {"shows": SHOWS_CH4, "title": "Scheduled jobs: one cron entry, four replicas",
            "settings": {"workers": 0, "scheduler_replicas": 4, "cron_strategy": "none",
                         # replicas do not all fire on the tick: the latest is late enough to find a
                         # 30 s lock expired while a 45 s (p99) run still holds it, as in the lesson
                         "cron_task_s": _MODEL.task_p99_s, "cron_lock_ttl": _MODEL.lock_ttl_s,
                         "cron_late": _MODEL.late_replica_s,
                         # ticks far enough apart that the late replica's run (36–81 s) is over, and its
                         # lock gone, before the next tick: every tick then starts from the same state
                         "cron_interval": 120,
                         # a killed leader stays dead past its lease, so a live follower takes over
                         "respawn_delay": 150},
            "pipeline": False,
            "controls": ["scheduler_replicas", "cron_strategy", "cron_lock_ttl", "cron_task_s", "cron_interval",
                         "cron_late", "clock_skew", "cron_release", "leader_lease", "cron_idempotent", "cron_catch_up",
                         "cron_shard", "shard_buckets", "respawn_delay", "clock"]},
    "ch8": {"shows": SHOWS_CH4, "title": "The assembled pipeline",
            "settings": {"workers": 3, "heartbeat": True, "vt_seconds": 300, "breaker": True, "guard": "claim"},
            "controls": ["upload", "kill", "workers", "vt_seconds", "heartbeat", "ack_mode", "guard", "stale_after",
                         "retry_policy", "faults", "dlq", "clock"]},
}
DEFAULT_PRESET = "ch8"

# Chapter 7's one-click scenarios (the lab panel's strategy buttons): settings each button applies.
# The lesson's bug and its two fixes: a lock shorter than the p99 run, a sized lock, a heartbeat lock.
CH7_SCENARIOS: dict[str, dict[str, Any]] = {
    # sharded, so every tick mails its bucket of users: with no lock each replica mails them again (unsharded,
    # only the day's first tick mails anyone, and two ticks would show no duplicate email at all)
    "none": {"label": "No lock", "settings": {"cron_strategy": "none", "cron_shard": True}},
    "lock": {"label": f"Lock, TTL {_MODEL.lock_ttl_s:g} s",
             "settings": {"cron_strategy": "lock", "cron_lock_ttl": _MODEL.lock_ttl_s}},
    "short": {"label": f"Lock, TTL {_MODEL.short_lock_ttl_s:g} s",
              "settings": {"cron_strategy": "lock", "cron_lock_ttl": _MODEL.short_lock_ttl_s}},
    "heartbeat": {"label": "Lock + heartbeat",
                  "settings": {"cron_strategy": "heartbeat", "cron_lock_ttl": _MODEL.short_lock_ttl_s}},
    "leader": {"label": "Leader lease", "settings": {"cron_strategy": "leader", "leader_lease": _MODEL.leader_lease_s}},
}


def ch7_lab_model() -> dict[str, Any]:
    """The numbers model's chapter 7 figures for the ch7 lab as it starts (its replicas, task, interval,
    late replica) with the scenario buttons' TTLs: what the page says the lab will show, and what the
    conformance suite checks the lab against."""
    s = settings_for("ch7")
    inputs = Inputs(scheduler_replicas=int(s["scheduler_replicas"]), cron_interval_s=float(s["cron_interval"]),
                    task_p99_s=float(s["cron_task_s"]), late_replica_s=float(s["cron_late"]),
                    short_lock_ttl_s=float(CH7_SCENARIOS["short"]["settings"]["cron_lock_ttl"]),
                    lock_ttl_s=float(CH7_SCENARIOS["lock"]["settings"]["cron_lock_ttl"]),
                    clock_skew_s=float(s["clock_skew"]), leader_lease_s=float(s["leader_lease"]))
    model = derive(inputs)["ch7"]
    model["downtime_drill_s"] = DOWNTIME_DRILL_S
    model["downtime_drill_ticks"] = DOWNTIME_DRILL_S / inputs.cron_interval_s
    return model


RETRY_BARS_PER_WINDOW = 10  # bars a retry histogram splits full jitter's first-retry window into


def _delay(n: int, base: float, cap: float) -> float:
    return min(cap, base * 2 ** (n - 1))  # workers.broker.retry.exponential_delay


def retry_bucket_s(base: float, cap: float) -> float:
    """A retry-arrivals histogram's bar, in simulated seconds, for a lab retrying on `base` and `cap`: a tenth
    of full jitter's first-retry window. Why: a fixed or unjittered wave (every caller at one instant) then
    fills one bar while full jitter spreads the same callers over ten; a bar as wide as the fixed policy's
    interval would hold one whole wave of either policy and hide the herd. The retries endpoint's default,
    the lab snapshot's `retry_bucket_s` (the widget's histogram) and chapter 4's page all read this."""
    return _delay(1, base, cap) / RETRY_BARS_PER_WINDOW


def ch4_lab_model() -> dict[str, Any]:
    """What chapter 4's "Try this" says its lab (the ch4 preset) will show, from the preset's settings and
    the numbers model's jitter formulas: the storage herd's size and waves, full jitter's mean and expected
    tallest bucket, and the poison pill's attempts and waits per policy. The page and the conformance
    suite both read it."""
    s = settings_for("ch4")
    base, cap, n_max = float(s["retry_base"]), float(s["retry_cap"]), int(s["max_attempts"])
    callers = int(s["workers"]) * int(s["upload_parts"])
    exp_delays = [_delay(k, base, cap) for k in range(1, n_max)]
    herd_at = [sum(exp_delays[:k]) for k in range(1, len(exp_delays) + 1)]
    window = _delay(1, base, cap)  # full jitter's first-retry window
    bucket = retry_bucket_s(base, cap)
    return {
        "workers": int(s["workers"]), "upload_parts": int(s["upload_parts"]), "callers": callers,
        "retry_base_s": base, "retry_cap_s": cap, "max_attempts": n_max, "max_receives": int(s["max_receives"]),
        "lesson_schedule_s": [d / base for d in herd_at],
        "lesson_delays_s": [d / base for d in exp_delays],  # the lesson's 1, 3, 7, 15 s
        "herd_at_s": herd_at, "herd_failing_at_s": herd_at[:-1], "herd_recovered_at_s": herd_at[-1],
        "jitter_window_s": window, "bucket_s": bucket,
        "jitter_mean_per_bucket": jitter_peak_per_bucket(callers, window, bucket),
        "jitter_expected_peak": jitter_expected_peak(callers, window, bucket),
        "poison_exponential_delays_s": exp_delays, "poison_exponential_to_dlq_s": sum(exp_delays),
        "poison_fixed_to_dlq_s": base * (n_max - 1), "poison_jitter_max_s": sum(exp_delays),
        "crash_redelivery_s": float(s["heartbeat_extend"]),
        # try this 5: a job that starts under a storage outage spends each attempt's storage tries (the
        # schedule's sum) and waits the job-level delays between attempts, so an outage longer than this
        # sends it to the DLQ for max_attempts; the step's outage adds one cap of margin
        "outage_to_dlq_s": n_max * sum(exp_delays) + sum(exp_delays),
        "replay_outage_s": n_max * sum(exp_delays) + sum(exp_delays) + cap,
        "replay_reason": f"max_attempts ({n_max}) exhausted",
    }


CH3_RECEIVER_FAILS = 2  # chapter 3's try this 3: the built-in receiver fails the next two deliveries


def ch3_lab_model() -> dict[str, Any]:
    """What chapter 3's "Try this" 3 says the ch3 lab shows: with the receiver failing the next N deliveries,
    one job's webhook-id arrives N + 1 times, retried with full jitter on the preset's retry settings (the
    deliverer gives a message max_attempts tries, so N + 1 must fit). The page and the suite both read it."""
    s = settings_for("ch3")
    fails = CH3_RECEIVER_FAILS
    assert fails + 1 <= int(s["max_attempts"]), "the ch3 preset gives a webhook too few tries for try this 3"
    # try this 5's VT: below the job, so the lease runs out once while it runs (a copy is redelivered and backs
    # off), but above half of it, so the copy's own lease outlives the job and no second copy comes
    dur = float(s["job_duration"])
    short_vt = round(dur * 2 / 3)
    return {"short_vt_s": short_vt, "short_vt_copies": math.ceil(dur / short_vt) - 1,
            "receiver_fails": fails, "webhook_arrivals": fails + 1, "max_attempts": int(s["max_attempts"]),
            "retry_base_s": float(s["retry_base"]), "retry_cap_s": float(s["retry_cap"]),
            "jitter_windows_s": [_delay(k, float(s["retry_base"]), float(s["retry_cap"]))
                                 for k in range(1, fails + 1)]}


DOWNTIME_DRILL_S = 330  # chapter 7's "All replicas down" button: long enough to miss more than two ticks


def settings_for(preset: str) -> dict[str, Any]:
    """Full settings for a preset: the schema defaults with the preset's overrides on top."""
    return {**DEFAULTS, **PRESETS[preset]["settings"]}
