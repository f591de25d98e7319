"""Chapter 6 API: submit tier traffic, drop a noisy-neighbour burst, spike a tier, read the waits.

The strategy itself is the `fairness` setting (PATCH /settings switches it live); these calls feed
the per-tier queues in `core.engines.fairness` and read back what the real workers measured.
"""

from __future__ import annotations

import functools

from flask import Blueprint, jsonify

import chapters
from app import bodies, limits
from app.auth import lab_access
from app.http import json_body, parse
from app.store import get_redis
from core import clock, numbers, registry
from core.engines import fairness
from core.keys import key

bp = Blueprint("fairness", __name__)


@bp.get("/api/labs/<lab_id>/fairness")
@lab_access(write=False)
def get_fairness(lab_id: str):
    """Per-tier and per-customer wait percentiles, queue depths, and cost per tier."""
    r = get_redis()
    settings = registry.settings(r, lab_id)
    out = fairness.summary(r, lab_id, settings, clock.now(r, lab_id))
    out["cost_usd"] = cost(out)
    return jsonify(out)


@functools.cache
def _model() -> tuple[numbers.Inputs, dict]:
    inputs = numbers.Inputs()
    return inputs, chapters.figures_of("fairness", inputs)


def cost(summary: dict) -> dict:
    """Worker-seconds used and paid per tier, priced by the numbers model's worker price, against the
    revenue the pro jobs that finished bring in (the model's per-job figure): the lesson's "same
    spreadsheet", measured on this lab, with the model's lesson-scale ratio beside it."""
    inputs, fig = _model()
    price_s = inputs.worker_price_per_hour / 3600
    out = {
        kind: {t: round(v * price_s, 6) for t, v in summary[f"{kind}_worker_s"].items()} for kind in ("used", "paid")
    }
    out["idle"] = {t: round(out["paid"][t] - out["used"][t], 6) for t in fairness.TIERS}
    out["revenue"] = {"pro": round(summary["done"]["pro"] * inputs.pro_revenue_per_job, 6), "free": 0.0}
    out["pro_paid_to_revenue"] = round(out["paid"]["pro"] / out["revenue"]["pro"], 4) if out["revenue"]["pro"] else None
    out["model"] = {
        "worker_price_per_hour": inputs.worker_price_per_hour,
        "pro_revenue_per_job": inputs.pro_revenue_per_job,
        "pro_reservation_cost_to_revenue": round(fig["pro_reservation_cost_to_revenue"], 4),
    }
    return out


@bp.post("/api/labs/<lab_id>/fairness/jobs")
@lab_access(write=True)
def submit_jobs(lab_id: str):
    """Queue `count` jobs for one customer of one tier."""
    body = parse(json_body(), bodies.FAIR_JOBS)
    tier, count = body["tier"], body["count"]
    customer = body.get("customer", f"{tier[0]}1")
    limits.check_lab_rate(get_redis(), lab_id, "batch", count)
    fairness.submit(get_redis(), lab_id, tier, customer, count)
    return jsonify(enqueued=count, tier=tier, customer=customer), 202


@bp.post("/api/labs/<lab_id>/fairness/noisy-neighbour")
@lab_access(write=True)
def noisy_neighbour(lab_id: str):
    """One free customer drops a burst; `others` customers then submit one job each."""
    body = parse(json_body(), bodies.FAIR_NOISY)
    burst, others = body["burst"], body["others"]
    r = get_redis()
    limits.check_lab_rate(r, lab_id, "batch", burst + others)
    now = fairness.hold_release(r, lab_id)
    fairness.submit(r, lab_id, "free", "f0", burst, now)
    for i in range(1, others + 1):
        fairness.submit(r, lab_id, "free", f"f{i}", 1, now + 0.001)
    return jsonify(burst=burst, others=others), 202


@bp.post("/api/labs/<lab_id>/fairness/poison")
@lab_access(write=True)
def poison(lab_id: str):
    """Queue `count` poison jobs for one tier (free by default): each takes down the worker that runs
    it, is put back, and after `POISON_CRASHES` crashes is dead-lettered. Under a hard split the storm
    hits the one fleet pro shares; under full separation only the tier's own workers."""
    body = parse(json_body(), bodies.FAIR_POISON)
    tier, count = body["tier"], body["count"]
    limits.check_lab_rate(get_redis(), lab_id, "batch", count)
    fairness.submit(get_redis(), lab_id, tier, "poison", count, poison=True)
    return jsonify(enqueued=count, tier=tier, crashes_each=fairness.POISON_CRASHES), 202


@bp.post("/api/labs/<lab_id>/fairness/spike")
@lab_access(write=True)
def spike(lab_id: str):
    """Double one tier's arrival rate for `duration_s` simulated seconds."""
    body = parse(json_body(), bodies.FAIR_SPIKE)
    tier, duration = body["tier"], body["duration_s"]
    r = get_redis()
    until = clock.now(r, lab_id) + duration
    r.hset(key(lab_id, "fair", "spike"), tier, until)
    return jsonify(tier=tier, factor=fairness.SPIKE_FACTOR, until=round(until, 3)), 202


@bp.post("/api/labs/<lab_id>/fairness/reset")
@lab_access(write=True)
def reset(lab_id: str):
    """Drop queued tier jobs and measurements, to compare the next strategy from a clean slate."""
    fairness.reset(get_redis(), lab_id)
    return jsonify(ok=True)
