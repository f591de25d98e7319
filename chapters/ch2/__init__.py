"""Chapter 2, Sizing the Worker Pool: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here are its preset(s) (settings, controls, what the widget
shows), the widget's scenario buttons, its guided steps, shared set-ups, races, lesson claims and the
names of its add-on. chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

from typing import Any

from chapters.common import SHOWS_LEASES
from core.lesson import Claim

SLUG = "sizing-the-worker-pool"  # the page is /chapters/2-sizing-the-worker-pool
ADDON = "loadgen"  # its lab panel: templates/_lab_loadgen.html, static/js/lab-loadgen.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch2": {"shows": SHOWS_LEASES, "title": "Sizing the pool: load at λ, measured L vs λW",
            "settings": {"workers": 4, "job_duration": 120, "boot_lag": 90, "exec_timeout": 960,
                         "vt_seconds": 1200, "lock_ttl": 1800},
            "controls": ["upload", "kill", "workers", "scale_in", "autoscale", "autoscale_target_wait",
                         "boot_lag", "exec_timeout", "vt_seconds", "lock_ttl", "clock"]},
}

STEPS: dict[str, list[dict[str, Any]]] = {
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
}

CLAIMS: tuple[Claim, ...] = (
    Claim("ch2.mmc_note", 2, "The utilisation curve", "Where we differ: the exact M/M/c wait beside the lesson's "
          "W/(1−ρ)", "test_lesson_note_mmc_wait_is_on_the_page", status="model"),
    Claim("ch2.overload_grows", 2, "Try this 2", "Past ρ = 1 the queue grows and does not come back down; "
          "arrivals past the lab's bound are shed, counted and still part of the backlog",
          "test_try2_overload_backlog_keeps_growing_and_shed_arrivals_are_counted"),
    Claim("ch2.autoscale_boot", 2, "Try this 3", "The autoscaler's new workers boot for the boot lag before "
          "they take a job", "test_try3_the_autoscalers_new_workers_boot_for_the_boot_lag_before_they_take_a_job"),
    Claim("ch2.drain", 2, "Try this 4 / Check yourself 5", "Scale-in drains: busy workers finish first and "
          "nothing is redelivered; killing mid-job redelivers",
          "test_try4_check5_scale_in_drains_without_redelivery_and_kill_redelivers"),
    Claim("ch2.wait_closer_to_mmc", 2, "Try this 1", "At ρ ≈ 0.8 on the lab's four workers, with every job "
          "W long (the even mix), the measured mean wait is nearer Erlang C than W/(1−ρ)",
          "test_try1_at_rho_08_the_measured_wait_is_nearer_erlang_c_than_the_approximation"),
    Claim("ch2.doubling", 2, "Check yourself 1", "Doubling λ doubles L and the workers needed",
          "test_check1_doubling_traffic_doubles_in_flight_and_workers", status="model"),
    Claim("ch2.peak_rho", 2, "Check yourself 3", "The 1.8× peak on the average pool is past ρ = 1",
          "test_check3_the_peak_on_the_average_pool_is_past_rho_1", status="model"),
    Claim("ch2.caption_wait_curve", 2, "Chart: mean queue wait against ρ (caption)", "The exact Erlang C wait "
          "stays far below the W/(1−ρ) approximation all the way to ρ = 1",
          "test_caption_the_exact_wait_stays_below_the_approximation_up_to_rho_1", status="model"),
)
