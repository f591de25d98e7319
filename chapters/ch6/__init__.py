"""Chapter 6, Priorities & Fairness: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import SHOWS_RETRIES
from core.lesson import Claim
from core.numbers import Inputs, approx_wait, erlang_c_wait, finite, littles_law_L, workers_for_utilisation
from core.series import Chart, Point, Series

SLUG = "priorities-and-fairness"  # the page is /chapters/6-priorities-and-fairness
ADDON = "fairness"  # its lab panel: templates/_lab_fairness.html, static/js/lab-fairness.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch6": {
        "shows": SHOWS_RETRIES,
        "title": "Fairness between tiers",
        "settings": {"workers": 3, "job_duration": 60, "fairness": "shared", "fair_job_s": 30},
        "controls": ["workers", "clock"],
    },
}


def _clean(strategy: str) -> list[dict[str, Any]]:
    """Each step from an empty queue under its own strategy: the queue reset, then a wait until the panel shows the
    strategy and no tier job left running from the step before (its starts and ends are not this step's)."""
    return [
        {"api": ["POST", "/fairness/reset", {}]},
        {"wait": ["ch6-panel", "data-strategy", strategy]},
        {"wait": ["ch6-panel", "data-idle", "yes"]},
    ]


_QUIET = {"arrival_rate": 0.0, "pro_workers": 1, "fair_job_s": 30}  # no background traffic: the step's jobs only
_WAIT = {"kind": "number", "min": 0, "max": 5000, "unit": "s"}
_NOISY = {"click": "ch6-noisy", "answered": True}  # the panel's burst: f0 drops 60 jobs, then f1…f9 one each
# (answered: every job of it is queued before the step's next act, the pro job that must find them there)

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch6": [
        {
            "claim": "ch6.shared_fifo",
            "title": "Shared FIFO",
            "do": [
                {"settings": {**_QUIET, "fairness": "shared"}},
                *_clean("shared"),
                _NOISY,
                {"api": ["POST", "/fairness/jobs", {"tier": "pro", "count": 1, "customer": "p1"}]},
            ],
            "predict": {
                **_WAIT,
                "id": "ch6-step-fifo",
                "measure": "moment:wait",
                "question": "One shared FIFO queue, three workers: 69 free jobs arrive, then one pro job. How "
                "many simulated seconds does the pro job wait before a worker takes it?",
            },
            "moment": "fairness.started",
            "moment_data": {"tier": "pro"},
            "look": "ch6-tiers",
            "says": "The pro job waited {measured} s: one queue serves in arrival order, so a paying customer's job "
            "sat behind every free job that came before it.",
        },
        {
            "claim": "ch6.noisy_neighbour",
            "title": "Noisy-neighbour burst, round robin",
            "do": [{"settings": {**_QUIET, "fairness": "round_robin"}}, *_clean("round_robin"), _NOISY],
            "predict": {
                **_WAIT,
                "id": "ch6-step-noisy",
                "measure": "moment:wait",
                "question": "Round robin per customer: f0 drops 60 jobs, then f1 to f9 one each. How many "
                "simulated seconds does the last of them, f9, wait?",
            },
            "moment": "fairness.started",
            "moment_data": {"customer": "f9"},
            "look": "ch6-customers",
            "says": "f9 waited {measured} s: round robin takes one job per customer in turn, so a quiet customer is "
            "served within one round, not behind the whole burst (in one FIFO it would wait for all 60).",
        },
        {
            "claim": "ch6.aging",
            "title": "Strict priority with aging",
            "do": [
                {"settings": {**_QUIET, "fairness": "aging", "aging_s": 300}},
                *_clean("aging"),
                {"api": ["POST", "/fairness/jobs", {"tier": "pro", "count": 60, "customer": "p1"}]},
                _NOISY,
            ],
            "predict": {
                **_WAIT,
                "id": "ch6-step-aging",
                "measure": "moment:wait",
                "question": "Strict priority with aging ({aging_s} s), and a 60-job pro backlog ahead of the "
                "free burst. How many simulated seconds does the first free job wait?",
            },
            "moment": "fairness.started",
            "moment_data": {"tier": "free"},
            "look": "ch6-tiers",
            "says": "The first free job started after {measured} s, near the {aging_s} s aging threshold, while pro "
            "jobs still waited: under strict priority alone it would wait until the pro backlog was gone.",
        },
        {
            "claim": "ch6.hard_split_idle",
            "title": "Hard split, no pro traffic",
            "do": [{"settings": {**_QUIET, "fairness": "split"}}, *_clean("split"), _NOISY],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "jobs",
                "id": "ch6-step-split",
                "measure": "concurrent:fairness.started:fairness.finished",
                "question": "Hard split with one of the three workers reserved for pro, and no pro traffic. "
                "While the free burst waits, how many free jobs run at once?",
            },
            "moment": "fairness.finished",
            "moment_n": 4,
            "moment_after": "fairness.started",
            "look": "ch6-tiers",
            "says": "At most {measured} free jobs ran at once while the rest of the burst waited: the third worker, "
            "reserved for pro, sat idle with no pro job to run, and is paid for all the same.",
        },
        {
            "claim": "ch6.poison_storm",
            "title": "Free poison storm, separate fleets",
            "do": [{"settings": {**_QUIET, "fairness": "separate"}}, *_clean("separate"), {"click": "ch6-poison"}],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "workers",
                "id": "ch6-step-poison",
                "measure": "distinct:fairness.crashed:worker_id",
                "question": "Fully separate fleets (one pro worker, two free), and three free jobs that each "
                "take their worker down. How many different workers die?",
            },
            "moment": "fairness.dead_lettered",
            "moment_n": 3,
            "look": "workers",
            "says": "{measured} different workers died, all of them free's own: the pro fleet never saw the poison, so "
            "pro kept its worker through the storm.",
        },
    ],
}

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch6.shared_fifo",
        6,
        "Try this 1",
        "Shared FIFO: workers take jobs in arrival order whatever the tier",
        "test_try1_shared_fifo_serves_in_arrival_order_whatever_the_tier",
    ),
    Claim(
        "ch6.noisy_neighbour",
        6,
        "Try this 2 / Check yourself 3",
        "FIFO puts a quiet customer behind the whole burst; per-customer round robin serves it within one round",
        "test_try2_check3_round_robin_lets_a_quiet_customer_past_the_burst",
    ),
    Claim(
        "ch6.aging",
        6,
        "Try this 3 / Check yourself 2",
        "Strict priority starves free under a pro backlog; aging caps free's wait near the aging threshold",
        "test_try3_check2_strict_priority_starves_free_and_aging_caps_its_wait",
    ),
    Claim(
        "ch6.hard_split_idle",
        6,
        "Try this 4 / Check yourself 1",
        "Hard split: with no pro traffic the "
        "reserved workers sit idle while free jobs wait, and are paid for all the same",
        "test_try4_check1_hard_split_leaves_pro_workers_idle_while_free_waits",
    ),
    Claim(
        "ch6.poison_storm",
        6,
        "Try this 5",
        "Separate fleets keep a free poison storm off pro's workers",
        "test_try5_separate_fleets_keep_a_free_poison_storm_off_pro_workers",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def _tier_row(tier: str, lam: float, W: float, workers: int) -> dict[str, Any]:
    L = littles_law_L(lam, W)
    rho = L / workers if workers > 0 else math.inf
    return {
        "tier": tier,
        "arrival_rate": lam,
        "in_flight": L,
        "workers": workers,
        "rho": finite(rho),
        "approx_wait_s": finite(approx_wait(W, rho)),
        "approx_wait_min": finite(approx_wait(W, rho) / 60),
        "mmc_wait_s": finite(erlang_c_wait(lam, W, workers)),
        "saturated": rho >= 1,
    }


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    W, lam, workers = core["W"], core["lam"], int(core["workers"])
    pro_lam, free_lam = lam * inputs.pro_share, lam * (1 - inputs.pro_share)
    pro_c = inputs.pro_reserved_workers
    free_c = max(0, workers - pro_c)  # a reservation bigger than the pool leaves free with nothing
    split = [_tier_row("pro", pro_lam, W, pro_c), _tier_row("free", free_lam, W, free_c)]
    s = inputs.spike_multiplier
    spike = [_tier_row("pro", pro_lam * s, W, pro_c), _tier_row("free", free_lam * s, W, free_c)]
    fifo_wait = finite(core["wait"])
    floor = 1 - inputs.pro_poll_weight
    saturating_pro = workers / W
    reserved_cost = pro_c * inputs.worker_price_per_hour * inputs.hours_per_month
    pro_revenue = pro_lam * inputs.pro_revenue_per_job * 3600 * inputs.hours_per_month
    pro_wait = split[0]["approx_wait_s"]
    sep_pro = workers_for_utilisation(pro_lam * inputs.peak_multiplier, W, inputs.target_utilisation)
    sep_free = workers_for_utilisation(free_lam * inputs.peak_multiplier, W, inputs.target_utilisation)
    return {
        "pro_arrival_rate": pro_lam,
        "free_arrival_rate": free_lam,
        "pro_share": inputs.pro_share,
        "fifo_wait_s": fifo_wait,
        "hard_split": split,
        "pro_reserved_workers": pro_c,
        "free_workers": free_c,
        "reservation_exceeds_pool": pro_c >= workers,
        "pro_split_wait_s": pro_wait,
        "free_split_wait_s": split[1]["approx_wait_s"],
        "free_split_wait_min": split[1]["approx_wait_min"],
        "pro_split_p99_wait_approx_s": finite(pro_wait * math.log(100)) if pro_wait is not None else None,
        "weighted_pro_weight": inputs.pro_poll_weight,
        "weighted_free_floor": floor,
        "weighted_free_floor_workers": floor * workers,
        "strict_pro_saturation_rate": saturating_pro,
        "strict_pro_utilisation": pro_lam * W / workers,
        # the pool is sized from the total λ, so pro alone saturates it only if pro traffic grows
        # (Ch6 "a sustained pro traffic spike"): how much growth, and whether the spike gets there
        "strict_pro_growth_to_starve_x": saturating_pro / pro_lam if pro_lam else None,
        "strict_free_starves_in_spike": pro_lam * s >= saturating_pro,
        "aging_max_free_wait_s": inputs.aging_threshold_s,
        "burst_jobs": inputs.burst_jobs,
        "fifo_worst_jobs_ahead": inputs.burst_jobs,
        "round_robin_max_jobs_ahead": inputs.burst_other_customers,
        "separate_pool_pro_workers": sep_pro,
        "separate_pool_free_workers": sep_free,
        "separate_pools_total_workers": sep_pro + sep_free,
        "shared_pool_peak_workers": workers_for_utilisation(lam * inputs.peak_multiplier, W, inputs.target_utilisation),
        "pro_reservation_cost_usd_per_month": reserved_cost,
        "pro_revenue_usd_per_month": pro_revenue,
        "pro_reservation_cost_to_revenue": reserved_cost / pro_revenue if pro_revenue else None,
        "spike_multiplier": s,
        "spike_split": spike,
        "fairness_strategies": [
            {
                "strategy": "shared FIFO",
                "pro_wait_s": fifo_wait,
                "free_wait_s": fifo_wait,
                "free_guarantee": "same wait as everyone; pro gets no priority",
            },
            {
                "strategy": "hard split",
                "pro_wait_s": pro_wait,
                "free_wait_s": split[1]["approx_wait_s"],
                "free_guarantee": f"{free_c:,} workers of its own, however busy pro is",
            },
            {
                "strategy": "weighted polling",
                "pro_wait_s": None,
                "free_wait_s": None,
                "free_guarantee": f"≥ {floor:.0%} of polling slots (~{floor * workers:,.0f} workers)",
            },
            {
                "strategy": "strict priority",
                "pro_wait_s": None,
                "free_wait_s": None,
                "free_guarantee": f"none: starves once pro λ ≥ {saturating_pro:,.0f}/s",
            },
            {
                "strategy": "aging",
                "pro_wait_s": None,
                "free_wait_s": None,
                "free_guarantee": f"promoted after {inputs.aging_threshold_s:,.0f} s",
            },
            {
                "strategy": "per-customer round robin",
                "pro_wait_s": None,
                "free_wait_s": None,
                "free_guarantee": f"≤ {inputs.burst_other_customers} jobs ahead (FIFO: up to {inputs.burst_jobs})",
            },
            {
                "strategy": "separate infrastructure",
                "pro_wait_s": None,
                "free_wait_s": None,
                "free_guarantee": "total isolation; no idle capacity flows between tiers",
            },
        ],
    }


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another: so the page does no arithmetic."""
    c2 = fig["ch2"]
    c6 = fig["ch6"]
    c6["pro_pool_share"] = c6["pro_reserved_workers"] / c2["workers_at_target"]
    c6["free_share"] = 1 - c6["pro_share"]
    c6["free_pool_share"] = c6["free_workers"] / c2["workers_at_target"]
    c6["separate_pools_extra_workers"] = c6["separate_pools_total_workers"] - c6["shared_pool_peak_workers"]


# ---- charts (core/series.py's shapes; chapters.chart_series gathers them) ----


def _wait_text(v: float | None) -> str:
    if v is None:
        return "unbounded (ρ ≥ 1)"
    return f"{v:,.0f} s ({v / 60:,.1f} min)" if v >= 120 else f"{v:,.1f} s"


def tier_waits(inputs: Inputs, fig: dict) -> Chart:
    c6 = fig["ch6"]
    pro, free = c6["hard_split"]
    spro, sfree = c6["spike_split"]
    groups = [
        ("Shared FIFO", c6["fifo_wait_s"], c6["fifo_wait_s"]),
        ("Hard split", pro["approx_wait_s"] if pro["in_flight"] > 0 else 0, free["approx_wait_s"]),
        (
            f"Hard split, {c6['spike_multiplier']:g}× spike",
            spro["approx_wait_s"] if spro["in_flight"] > 0 else 0,
            sfree["approx_wait_s"],
        ),
    ]
    series = (
        Series("pro", "pro", tuple(Point(g, p, _wait_text(p)) for g, p, _ in groups), "solid", "none", "accent"),
        Series("free", "free", tuple(Point(g, f, _wait_text(f)) for g, _, f in groups), "hatched", "none", "accent-2"),
    )
    summary = " ".join(f"{g}: pro {_wait_text(p)}, free {_wait_text(f)}." for g, p, f in groups)
    return Chart(
        "tier_waits",
        "bars",
        "expected queue wait, seconds (W / (1 − ρ))",
        series=series,
        summary=summary,
        x_min=0,
        table=(("strategy", "pro wait", "free wait"),) + tuple((g, _wait_text(p), _wait_text(f)) for g, p, f in groups),
    )


CHARTS = {"tier_waits": tier_waits}
