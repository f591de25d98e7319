"""Chapter 2, Sizing the Worker Pool: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import SHOWS_LEASES
from core.engines.loadgen import MIX_W  # the lab's W (both mixes' mean)
from core.lesson import Claim
from core.numbers import (
    SECONDS_PER_DAY,
    Inputs,
    approx_wait,
    ceil_workers,
    erlang_c,
    erlang_c_wait,
    even_jobs_wait,
    finite,
    littles_law_L,
    workers_for_utilisation,
)
from core.series import Chart, Mark, Point, Series, fmt

SLUG = "sizing-the-worker-pool"  # the page is /chapters/2-sizing-the-worker-pool
ADDON = "loadgen"  # its lab panel: templates/_lab_loadgen.html, static/js/lab-loadgen.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch2": {
        "shows": SHOWS_LEASES,
        "title": "Sizing the pool: load at λ, measured L vs λW",
        "settings": {
            "workers": 4,
            "job_duration": 120,
            "boot_lag": 90,
            "exec_timeout": 960,
            "vt_seconds": 1200,
            "lock_ttl": 1800,
        },
        "controls": [
            "upload",
            "kill",
            "workers",
            "scale_in",
            "autoscale",
            "autoscale_target_wait",
            "boot_lag",
            "exec_timeout",
            "vt_seconds",
            "lock_ttl",
            "clock",
        ],
    },
}


def _step_figures() -> dict[str, float]:
    """Try this 1's set-up on the lab's four workers: λ for ρ = the target, and the two waits it compares."""
    rho, c = Inputs().target_utilisation, 4
    lam = rho * c / MIX_W
    return {
        "lam": round(lam, 5),
        "approx": approx_wait(MIX_W, rho),
        "erlang": erlang_c_wait(lam, MIX_W, c),
        "even": even_jobs_wait(lam, MIX_W, c),
        "over": round(1.5 * c / MIX_W, 3),
    }  # λ·W = 1.5 × the pool: an overload


_F = _step_figures()
_STOP = [{"api": ["POST", "/loadgen", {"action": "stop"}]}, {"wait": ["ch2-panel", "data-state", "stopped"]}]
_WAIT_JOBS = 100  # try this 1's mean: the first hundred jobs' queue waits

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch2": [
        {
            "claim": "ch2.wait_closer_to_mmc",
            "title": "ρ ≈ 0.8 on four workers, even jobs",
            "do": [
                *_STOP,
                {"settings": {"workers": 4, "autoscale": False}},
                {"click": "ch2-start", "fill": {"ch2-rate": _F["lam"]}, "choose": {"ch2-mix": "even"}},
            ],
            "predict": {
                "kind": "choice",
                "id": "ch2-step-wait",
                "measure": f"meanwait:{_WAIT_JOBS}",
                "question": f"λ = {_F['lam']:g}/s on four workers, every job 30 s: ρ = 0.8. Which will the "
                f"mean queue wait of the first {_WAIT_JOBS} jobs sit nearer: W/(1−ρ) = "
                f"{_F['approx']:.0f} s, or Erlang C = {_F['erlang']:.0f} s?",
                "choices": [
                    ["erlang", f"Erlang C ({_F['erlang']:.0f} s)"],
                    ["approx", f"W/(1−ρ) ({_F['approx']:.0f} s)"],
                ],
                "buckets": {
                    "erlang": [0, round((_F["erlang"] + _F["approx"]) / 2)],
                    "approx": [round((_F["erlang"] + _F["approx"]) / 2) + 1, 10**6],
                },
            },
            "moment": "job.claimed",
            "moment_n": _WAIT_JOBS,
            "moment_after": "loadgen.started",
            "look": "ch2-table",
            "says": f"The first {_WAIT_JOBS} jobs waited {{measured}} s on average, against W/(1−ρ)'s "
            f"{_F['approx']:.0f} s and Erlang C's {_F['erlang']:.0f} s: the approximation is far off, and equal "
            f"jobs queue about half as long as Erlang C's exponential ones (the M/D/c figure is "
            f"{_F['even']:.0f} s).",
        },
        {
            "claim": "ch2.overload_grows",
            "title": "Raise λ past the pool",
            "do": [
                *_STOP,
                {"settings": {"workers": 4, "autoscale": False}},
                {"click": "ch2-start", "fill": {"ch2-rate": _F["over"]}, "choose": {"ch2-mix": "even"}},
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 1000,
                "unit": "jobs",
                "id": "ch2-step-overload",
                "measure": "backlog",
                "question": f"λ = {_F['over']:g}/s: λ·W is 1.5 × the four workers. When the 60th job arrives, "
                "how many of the jobs sent since the start are still waiting in the queue?",
            },
            "moment": "job.enqueued",
            "moment_n": 60,
            "moment_after": "loadgen.started",
            "look": "ch2-chart-L",
            "says": "{measured} jobs were waiting when the 60th arrived, and the backlog grows by λ − c/W every second "
            "for as long as the overload lasts: it never comes back down on its own.",
        },
        {
            "claim": "ch2.autoscale_boot",
            "title": "Autoscaler on",
            "do": [
                *_STOP,
                {"settings": {"workers": 4, "autoscale": True, "boot_lag": 90}},
                {"click": "ch2-start", "fill": {"ch2-rate": _F["over"]}, "choose": {"ch2-mix": "even"}},
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 5000,
                "unit": "s",
                "id": "ch2-step-boot",
                "measure": "gap:worker.booting:job.claimed:worker_id",
                "question": "The same overload with the autoscaler on. How many simulated seconds after a new "
                "worker is added does it take its first job?",
            },
            "moment": "worker.booting",
            "look": "workers",
            "says": "Its first job came {measured} s after it was added: it booted for the whole boot lag "
            "({boot_lag} s) first, and the queue kept growing all that time.",
        },
        {
            "claim": "ch2.drain",
            "title": "Drop λ: scale-in",
            "do": [
                *_STOP,
                {"settings": {"workers": 4, "autoscale": False, "scale_in": "drain"}},
                {"click": "ch2-start", "fill": {"ch2-rate": _F["lam"]}, "choose": {"ch2-mix": "even"}},
                {"on": "job.claimed", "n": 12, "settings": {"workers": 2}, "click": "ch2-stop"},
            ],
            "predict": {
                "kind": "choice",
                "id": "ch2-step-drain",
                "measure": "events:job.redelivered",
                "question": "λ drops to nothing and the pool scales in from four workers to two while they "
                "are busy. Is any job redelivered?",
                "choices": [["none", "no"], ["some", "yes"]],
                "buckets": {"none": [0, 0], "some": [1, 10**6]},
            },
            "moment": "worker.stopped",
            "look": "workers",
            "says": "{measured} jobs redelivered: each removed worker showed draining, finished the job it held and "
            "only then stopped, so no lease ran out. (Scale in with kill and the same step redelivers.)",
        },
    ],
}

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch2.mmc_note",
        2,
        "The utilisation curve",
        "Where we differ: the exact M/M/c wait beside the lesson's W/(1−ρ)",
        "test_lesson_note_mmc_wait_is_on_the_page",
        status="model",
    ),
    Claim(
        "ch2.overload_grows",
        2,
        "Try this 2",
        "Past ρ = 1 the queue grows and does not come back down; "
        "arrivals past the lab's bound are shed, counted and still part of the backlog",
        "test_try2_overload_backlog_keeps_growing_and_shed_arrivals_are_counted",
    ),
    Claim(
        "ch2.autoscale_boot",
        2,
        "Try this 3",
        "The autoscaler's new workers boot for the boot lag before they take a job",
        "test_try3_the_autoscalers_new_workers_boot_for_the_boot_lag_before_they_take_a_job",
    ),
    Claim(
        "ch2.drain",
        2,
        "Try this 4 / Check yourself 5",
        "Scale-in drains: busy workers finish first and nothing is redelivered; killing mid-job redelivers",
        "test_try4_check5_scale_in_drains_without_redelivery_and_kill_redelivers",
    ),
    Claim(
        "ch2.wait_closer_to_mmc",
        2,
        "Try this 1",
        "At ρ ≈ 0.8 on the lab's four workers, with every job "
        "W long (the even mix), the measured mean wait is nearer Erlang C than W/(1−ρ)",
        "test_try1_at_rho_08_the_measured_wait_is_nearer_erlang_c_than_the_approximation",
    ),
    Claim(
        "ch2.doubling",
        2,
        "Check yourself 1",
        "Doubling λ doubles L and the workers needed",
        "test_check1_doubling_traffic_doubles_in_flight_and_workers",
        status="model",
    ),
    Claim(
        "ch2.peak_rho",
        2,
        "Check yourself 3",
        "The 1.8× peak on the average pool is past ρ = 1",
        "test_check3_the_peak_on_the_average_pool_is_past_rho_1",
        status="model",
    ),
    Claim(
        "ch2.caption_wait_curve",
        2,
        "Chart: mean queue wait against ρ (caption)",
        "The exact Erlang C wait stays far below the W/(1−ρ) approximation all the way to ρ = 1",
        "test_caption_the_exact_wait_stays_below_the_approximation_up_to_rho_1",
        status="model",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def _wait_row(lam: float, W: float, workers: int) -> dict[str, Any]:
    L = littles_law_L(lam, W)
    rho = L / workers
    mmc = erlang_c_wait(lam, W, workers)
    return {
        "workers": workers,
        "rho": rho,
        "approx_wait_s": finite(approx_wait(W, rho)),
        "mmc_wait_s": finite(mmc),
        "mmc_p_wait": erlang_c(workers, L) if rho < 1 else 1.0,
        "mmc_time_in_system_s": finite(mmc + W),
    }


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    W, lam, L, workers = core["W"], core["lam"], core["L"], int(core["workers"])
    price_month = inputs.worker_price_per_hour * inputs.hours_per_month
    monthly = workers * price_month
    total_share = sum(jt.share_pct for jt in inputs.job_mix)
    peak_lam = lam * inputs.peak_multiplier
    peak_L = littles_law_L(peak_lam, W)
    peak_workers = workers_for_utilisation(peak_lam, W, inputs.target_utilisation)
    backlog = peak_lam * inputs.worker_boot_s
    margin = peak_workers - workers
    autoscaled_avg = workers + margin * inputs.peak_hours_per_day / 24
    curve = [_wait_row(lam, W, workers_for_utilisation(lam, W, rho)) for rho in inputs.wait_curve_utilisations]
    for row, rho in zip(curve, inputs.wait_curve_utilisations, strict=True):
        row["target_rho"] = rho
        row["monthly_cost_usd"] = row["workers"] * price_month
    jobs_month = lam * 3600 * inputs.hours_per_month
    mix_rows = []
    for jt in inputs.job_mix:
        rate = lam * jt.share_pct / total_share
        mix_rows.append(
            {
                "job_type": jt.name,
                "label": jt.label,
                "share": jt.share_pct / total_share,
                "rate_per_s": rate,
                "per_day": rate * SECONDS_PER_DAY,
                "mean_s": jt.mean_s,
                "p99_s": jt.p99_s,
                "in_flight": littles_law_L(rate, jt.mean_s),
                "share_of_in_flight": littles_law_L(rate, jt.mean_s) / L,
            }
        )
    transcode_rate = next(r["rate_per_s"] for r in mix_rows if r["job_type"] == "transcode")
    return {
        "arrival_rate": lam,
        "blended_duration_s": W,
        "in_flight_jobs": L,
        "workers_at_utilisation_1": workers_for_utilisation(lam, W, 1.0),
        "target_utilisation": inputs.target_utilisation,
        "workers_at_target": workers,
        "utilisation_at_target": L / workers,
        "queue_wait_s": finite(core["wait"]),
        "expected_completion_s": finite(core["wait"] + W),
        "mmc_wait_at_target_s": finite(erlang_c_wait(lam, W, workers)),
        "mmc_p_wait_at_target": erlang_c(workers, L),
        "worker_price_per_hour": inputs.worker_price_per_hour,
        "pool_cost_usd_per_hour": workers * inputs.worker_price_per_hour,
        "monthly_cost_usd": monthly,
        "jobs_per_month": jobs_month,
        "cost_per_job_usd": monthly / jobs_month,
        "cost_per_job_cents": monthly / jobs_month * 100,
        "job_mix": mix_rows,
        "transcodes_per_day_from_mix": transcode_rate * SECONDS_PER_DAY,
        "wait_curve": curve,
        "peak_multiplier": inputs.peak_multiplier,
        "peak_arrival_rate": peak_lam,
        "peak_in_flight_jobs": peak_L,
        "peak_workers": peak_workers,
        "peak_utilisation_on_average_pool": peak_L / workers,
        "peak_wait_on_average_pool_s": finite(approx_wait(W, peak_L / workers)),
        "peak_monthly_cost_usd": peak_workers * price_month,
        "autoscaled_avg_workers": autoscaled_avg,
        "autoscaled_monthly_cost_usd": autoscaled_avg * price_month,
        "peak_margin_monthly_cost_usd": (autoscaled_avg - workers) * price_month,
        "always_peak_savings_usd_per_month": (peak_workers - autoscaled_avg) * price_month,
        "worker_boot_s": inputs.worker_boot_s,
        "autoscale_backlog_jobs": backlog,
        "autoscale_backlog_excess_jobs": max(0.0, (peak_lam - workers / W) * inputs.worker_boot_s),
        "autoscale_workers_to_drain_backlog": math.ceil(backlog * W / core["wait"] - 1e-9)
        if math.isfinite(core["wait"])
        else None,
    }


SMALL_POOL_WORKERS = 4  # ch2 compares every pool with a lab-sized one of this many workers


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another (pooling, unit changes, what-ifs): so the page does
    no arithmetic."""
    c2 = fig["ch2"]
    W, rho = c2["blended_duration_s"], inputs.target_utilisation
    c2["small_pool_workers"] = SMALL_POOL_WORKERS
    # Same ρ and W, different pool sizes: how much pooling buys (exact M/M/c beside W/(1 − ρ)).
    pooling = []
    for c in (1, 2, SMALL_POOL_WORKERS, 8, 16, 64):
        wq = finite(erlang_c_wait(rho * c / W, W, c))
        pooling.append(
            {
                "workers": c,
                "approx_wait_s": c2["queue_wait_s"],
                "mmc_wait_s": wq,
                "mmc_p_wait": erlang_c(c, rho * c),
                "mmc_time_in_system_s": None if wq is None else wq + W,
            }
        )
    wq = c2["mmc_wait_at_target_s"]
    pooling.append(
        {
            "workers": c2["workers_at_target"],
            "approx_wait_s": c2["queue_wait_s"],
            "mmc_wait_s": wq,
            "mmc_p_wait": c2["mmc_p_wait_at_target"],
            "mmc_time_in_system_s": None if wq is None else wq + W,
        }
    )
    c2["pooling_table"] = pooling
    # try this 1's even jobs on the lab-sized pool: about half Erlang C's wait (M/D/c)
    small = next(r for r in pooling if r["workers"] == SMALL_POOL_WORKERS)
    c2["small_pool_even_wait_s"] = even_jobs_wait(rho * SMALL_POOL_WORKERS / W, W, SMALL_POOL_WORKERS)
    c2["small_pool_even_over_mmc"] = c2["small_pool_even_wait_s"] / small["mmc_wait_s"]
    tx = next(r for r in c2["job_mix"] if r["job_type"] == "transcode")
    c2["transcode_mean_min"] = tx["mean_s"] / 60
    c2["idle_fraction_at_target"] = 1 - rho
    c2["pool_capacity_per_s"] = c2["workers_at_target"] / W
    c2["peak_backlog_growth_per_s"] = c2["peak_arrival_rate"] - c2["workers_at_target"] / W
    c2["peak_backlog_growth_per_hour"] = c2["peak_backlog_growth_per_s"] * 3600
    c2["peak_utilisation_on_peak_pool"] = c2["peak_in_flight_jobs"] / c2["peak_workers"]
    c2["doubled_arrival_rate"] = 2 * c2["arrival_rate"]
    c2["doubled_in_flight_jobs"] = 2 * c2["in_flight_jobs"]
    c2["doubled_workers_at_target"] = ceil_workers(2 * c2["in_flight_jobs"], rho)
    cheaper = [r for r in c2["wait_curve"] if r["target_rho"] < rho]
    steps = None
    if len(cheaper) >= 2:
        r1, r2 = cheaper[-2], cheaper[-1]
        steps = {
            "r1": r1,
            "r2": r2,
            "first_extra_usd": r1["monthly_cost_usd"] - c2["monthly_cost_usd"],
            "second_saved_s": r1["approx_wait_s"] - r2["approx_wait_s"],
            "second_extra_usd": r2["monthly_cost_usd"] - r1["monthly_cost_usd"],
            "mmc_first_saved_s": None
            if c2["mmc_wait_at_target_s"] is None or r1["mmc_wait_s"] is None
            else c2["mmc_wait_at_target_s"] - r1["mmc_wait_s"],
            "mmc_second_saved_s": None
            if r1["mmc_wait_s"] is None or r2["mmc_wait_s"] is None
            else r1["mmc_wait_s"] - r2["mmc_wait_s"],
        }
    c2["more_workers_steps"] = steps


def lesson_notes(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Where this chapter's figure corrects the lesson's own arithmetic (see chapters.derive)."""
    c2 = fig["ch2"]
    notes = []
    approx, exact = c2["queue_wait_s"], c2["mmc_wait_at_target_s"]
    if approx is not None and exact is not None:
        notes.append(
            {
                "id": "mmc_wait",
                "where": "The utilisation curve",
                "lesson": f"W/(1−ρ): {approx:,.0f} s of queue wait at ρ = {c2['utilisation_at_target']:.2f}",
                "ours": f"exact M/M/c (Erlang C) wait for {c2['workers_at_target']:,} workers: "
                + (f"{exact:.1f} s" if exact >= 0.05 else "effectively 0 s (under a millisecond)"),
                "why": "W/(1−ρ) is the one-server (M/M/1) time in system; the lesson keeps it as an “honest "
                "approximation”. With thousands of servers pooled, a job almost never waits at ρ = "
                f"{c2['utilisation_at_target']:.2f}: the curve's shape holds, its height does not.",
                "values": {"lesson": approx, "ours": exact},
            }
        )
    return notes


# ---- charts (core/series.py's shapes; chapters.chart_series gathers them) ----


def small_pool_wait_s(rho: float, W: float, c: int) -> float | None:
    """Exact (Erlang C) mean wait for a `c`-worker pool at utilisation ρ — erlang_c_wait."""
    if rho >= 1:
        return None
    return erlang_c_wait(rho * c / W, W, c)


def wait_vs_utilisation(inputs: Inputs, fig: dict) -> Chart:
    c2 = fig["ch2"]
    W, small_c = c2["blended_duration_s"], c2["small_pool_workers"]  # the lab-sized pool the chapter compares with
    rows = sorted(c2["wait_curve"], key=lambda r: r["rho"])
    approx = tuple(
        Point(r["rho"], r["approx_wait_s"], f"{r['workers']:,} workers") for r in rows if r["approx_wait_s"] is not None
    )
    exact = tuple(
        Point(r["rho"], r["mmc_wait_s"], f"{r['workers']:,} workers") for r in rows if r["mmc_wait_s"] is not None
    )
    small = tuple(
        Point(r["rho"], small_pool_wait_s(r["rho"], W, small_c), f"{small_c} workers") for r in rows if r["rho"] < 1
    )
    workers = [r["workers"] for r in rows]
    ymax = max((p.y for p in approx), default=0)
    mmc_max = max((p.y for p in exact), default=0)
    rho = inputs.target_utilisation
    first = approx[0] if approx else Point(rho, 0)
    summary = (
        f"The approximation rises from {fmt(first.y)} seconds at ρ = {first.x:.2f} to "
        f"{fmt(ymax)} seconds near ρ = 1 and is unbounded at ρ = 1. The exact wait for this "
        f"pool, sized for each ρ, "
        + ("stays below a millisecond" if mmc_max < 0.001 else f"stays at or below {fmt(mmc_max)} seconds")
        + f" at every ρ below 1. A pool of just {small_c} workers sits in between."
    )
    series = (
        Series("approx", "approximation W/(1−ρ) (solid)", approx, "solid", "circle", "accent"),
        Series("small", f"exact, a {small_c}-worker pool (dotted)", small, "dotted", "none", "ok"),
        Series(
            "exact",
            f"exact, this pool: {min(workers):,}–{max(workers):,} workers (dashed)",
            exact,
            "dashed",
            "square",
            "accent-2",
        ),
    )
    x_min = min([math.floor(min((r["rho"] for r in rows), default=rho) * 10) / 10, rho - 0.05])
    table = (("ρ", "approx. wait (s)", f"exact, {small_c} workers (s)", "exact, this pool (s)"),) + tuple(
        (f"{r['rho']:.2f}", fmt(r["approx_wait_s"]), fmt(small_pool_wait_s(r["rho"], W, small_c)), fmt(r["mmc_wait_s"]))
        for r in rows
    )
    return Chart(
        "wait_vs_utilisation",
        "line",
        "utilisation ρ = L / workers",
        "mean queue wait (s)",
        series=series,
        marks=(Mark(rho, f"target ρ = {rho:.2f}", style="dotted", tone="muted"),),
        summary=summary,
        x_min=x_min,
        x_max=1.0,
        note="∞\nat ρ = 1,\nin every\nmodel",
        table=table,
    )


CHARTS = {"wait_vs_utilisation": wait_vs_utilisation}
