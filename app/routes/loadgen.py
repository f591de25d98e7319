"""Chapter 2's load-generator routes: start/stop/retune the Poisson traffic, read L vs λW live.

The generator itself runs in the pool supervisor (workers/engines/loadgen.py); these routes only change
its state in Redis and report what the real run measured beside the numbers model's values.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from app import bodies
from app.auth import lab_access
from app.errors import ApiError
from app.http import json_body, parse
from app.store import get_redis
from core import clock, registry
from core.engines import loadgen
from core.keys import key

bp = Blueprint("loadgen", __name__)


def report(lab_id: str, window_s: float = 600.0) -> dict:
    r = get_redis()
    now = clock.now(r, lab_id)
    settings = registry.settings(r, lab_id)
    state = loadgen.read_state(r, lab_id)
    workers = registry.workers(r, lab_id)
    states = r.hgetall(key(lab_id, "states"))
    measured = loadgen.measure(r, lab_id, now, window_s)
    span, pool = measured["t1"] - measured["t0"], int(settings["workers"])
    # ρ over the window: busy worker-seconds over the pool's worker-seconds (at its current size)
    measured["rho"] = measured["busy_s"] / (pool * span) if pool and span > 0 else None
    in_flight = sum(int(states.get(s, 0)) for s in ("queued", "retrying", "running"))
    return {
        "state": {
            **state,
            "effective_rate": loadgen.effective_rate(state),
            "peak": state["factor"] != 1,
            "peak_factor": loadgen.PEAK_FACTOR,
            "max_in_flight": loadgen.MAX_IN_FLIGHT,
        },
        "now": {
            "t": round(now, 3),
            "in_flight": in_flight,
            # The lab bounds what it really runs (max_in_flight); arrivals past it are shed and counted.
            # In flight + shed is the queue an unbounded broker would hold: under overload it keeps growing.
            "shed": state["shed"],
            "backlog": in_flight + state["shed"],
            "queued": int(states.get("queued", 0)) + int(states.get("retrying", 0)),
            "busy": sum(1 for w in workers if w.get("state") == "busy"),
            "workers": sum(1 for w in workers if w.get("state") in ("idle", "busy")),
            "booting": sum(1 for w in workers if w.get("state") == "booting"),
            "draining": sum(1 for w in workers if w.get("state") == "draining"),
        },
        "measured": measured,
        "model": loadgen.model(loadgen.effective_rate(state), int(settings["workers"]), state["mix"]),
        "ordering": loadgen.timeout_ordering(settings),
        "autoscale": {
            "on": settings["autoscale"],
            "target_wait": settings["autoscale_target_wait"],
            "floor": settings["autoscale_min"],
            "boot_lag": settings["boot_lag"],
        },
    }


@bp.get("/api/labs/<lab_id>/loadgen")
@lab_access(write=False)
def get_loadgen(lab_id: str):
    """Load generator state, measured L, λ, W and queue wait, the model's values and timeout ordering."""
    raw = request.args.get("window", "600")
    try:
        window = float(raw)
    except ValueError:
        window = -1.0
    if not 10 <= window <= 86400:
        raise ApiError(422, "invalid_window", {"window": "must be simulated seconds in [10, 86400]"})
    return jsonify(report(lab_id, window))


@bp.post("/api/labs/<lab_id>/loadgen")
@lab_access(write=True)
def control_loadgen(lab_id: str):
    """Start (rate, seed, mix), stop, change rate, or step to the 1.8× peak and back."""
    body = parse(json_body(), bodies.LOADGEN)
    action, rate = body["action"], body.get("rate")  # rate left out or null: none
    r = get_redis()
    now = clock.now(r, lab_id)
    if action == "start":
        loadgen.start(r, lab_id, now, 0.1 if rate is None else float(rate), body["seed"], body["mix"])
    elif not loadgen.read_state(r, lab_id)["on"] and action != "stop":
        raise ApiError(409, "not_running", "start the load generator first")
    elif action == "stop":
        loadgen.stop(r, lab_id, now)
    elif action == "rate":
        if rate is None:
            raise ApiError(422, "invalid_rate", {"rate": "send the new rate in jobs/s"})
        loadgen.retune(r, lab_id, now, rate=float(rate))
    else:
        loadgen.retune(r, lab_id, now, peak=action == "peak")
    return jsonify(report(lab_id))
