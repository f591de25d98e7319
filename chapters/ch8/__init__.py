"""Chapter 8, Assembling the Pipeline: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here are its preset(s) (settings, controls, what the widget
shows), the widget's scenario buttons, its guided steps, shared set-ups, races, lesson claims and the
names of its add-on. chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

from typing import Any

from chapters.common import JOB, SHOWS_RETRIES
from core.lesson import Claim

SLUG = "assembling-the-pipeline"  # the page is /chapters/8-assembling-the-pipeline

PRESETS: dict[str, dict[str, Any]] = {
    "ch8": {"shows": SHOWS_RETRIES, "title": "The assembled pipeline",
            "settings": {"workers": 3, "heartbeat": True, "vt_seconds": 300, "breaker": True, "guard": "claim"},
            "controls": ["upload", "kill", "workers", "vt_seconds", "heartbeat", "ack_mode", "guard", "stale_after",
                         "retry_policy", "faults", "dlq", "clock"]},
}

BUTTONS: dict[str, list[dict[str, Any]]] = {
    "ch8": [
        {"id": "load", "label": "Steady load: 3 jobs", "enqueue": JOB, "count": 3,
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

STEPS: dict[str, list[dict[str, Any]]] = {
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

CLAIMS: tuple[Claim, ...] = (
    Claim("ch8.dashboard", 8, "The dashboard", "Nine rows, one metric per chapter, from the numbers model",
          "test_the_dashboard_has_one_row_per_chapter", status="model"),
    Claim("ch8.demo_time", 8, "Try this 1", "A transcode takes its simulated duration (the honest clock), so at "
          "the demo speed it takes duration ÷ speed real seconds",
          "test_try1_a_transcode_takes_its_simulated_duration_so_real_time_is_duration_over_speed"),
    Claim("ch8.kill", 8, "Try this 2 / Check yourself 4", "Kill the busy worker: the record is freed one reset "
          "window after its last beat; one file per rendition, one email",
          "test_try2_a_killed_busy_workers_job_is_freed_one_reset_window_after_its_last_beat"),
    Claim("ch8.kills", 8, "Try this 3 / Check yourself 1, 5", "Three rapid kills: the three jobs come back "
          "together, a spike in the redelivery rate; every redelivery matches a kill",
          "test_try3_check1_check5_rapid_kills_are_a_spike_in_the_redelivery_rate"),
    Claim("ch8.doubled", 8, "Check yourself 3", "Doubled traffic: twice the jobs in flight, the pool doubles",
          "test_check3_doubled_traffic_doubles_the_pool", status="model"),
    Claim("ch8.judgement", 8, "Try this 4 / Check yourself 2", "Which dashboard rows move; why a small "
          "dollar figure is worth fixing", status="thought",
          why="reading the dashboard and weighing a cost's shape; try 2–3 produce the movements it asks about"),
    Claim("ch8.why_kills_lost", 8, "Predict first: Three rapid kills (why)", "Acks are late: the message is "
          "deleted only after success, so each killed worker's job comes back when its lease runs out and "
          "finishes; none is lost", "test_try3_check1_check5_rapid_kills_are_a_spike_in_the_redelivery_rate"),
)
