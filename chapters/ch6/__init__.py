"""Chapter 6, Priorities & Fairness: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here are its preset(s) (settings, controls, what the widget
shows), the widget's scenario buttons, its guided steps, shared set-ups, races, lesson claims and the
names of its add-on. chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

from typing import Any

from chapters.common import SHOWS_RETRIES
from core.lesson import Claim

SLUG = "priorities-and-fairness"  # the page is /chapters/6-priorities-and-fairness
ADDON = "fairness"  # its lab panel: templates/_lab_fairness.html, static/js/lab-fairness.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch6": {"shows": SHOWS_RETRIES, "title": "Fairness between tiers",
            "settings": {"workers": 3, "job_duration": 60, "fairness": "shared", "fair_job_s": 30},
            "controls": ["workers", "clock"]},
}

STEPS: dict[str, list[dict[str, Any]]] = {
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
}

CLAIMS: tuple[Claim, ...] = (
    Claim("ch6.shared_fifo", 6, "Try this 1", "Shared FIFO: workers take jobs in arrival order whatever the "
          "tier", "test_try1_shared_fifo_serves_in_arrival_order_whatever_the_tier"),
    Claim("ch6.noisy_neighbour", 6, "Try this 2 / Check yourself 3", "FIFO puts a quiet customer behind the "
          "whole burst; per-customer round robin serves it within one round",
          "test_try2_check3_round_robin_lets_a_quiet_customer_past_the_burst"),
    Claim("ch6.aging", 6, "Try this 3 / Check yourself 2", "Strict priority starves free under a pro backlog; "
          "aging caps free's wait near the aging threshold",
          "test_try3_check2_strict_priority_starves_free_and_aging_caps_its_wait"),
    Claim("ch6.hard_split_idle", 6, "Try this 4 / Check yourself 1", "Hard split: with no pro traffic the "
          "reserved workers sit idle while free jobs wait, and are paid for all the same",
          "test_try4_check1_hard_split_leaves_pro_workers_idle_while_free_waits"),
    Claim("ch6.poison_storm", 6, "Try this 5", "Separate fleets keep a free poison storm off pro's workers",
          "test_try5_separate_fleets_keep_a_free_poison_storm_off_pro_workers"),
)
