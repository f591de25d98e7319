"""Chapter 4's readouts: when retries arrive after a storage outage, and how the DLQ is doing.

`storage` is the herd as the storage dependency sees it: every call the workers' upload parts retried
(`storage.called` events of try 2 or later), bucketed by simulated time since the outage began, per policy
and per run (one run per outage).

Everything here is measured from the lab's event stream (what the real workers did), with the
numbers model's figure beside it, so the learner sees the lesson's claim and the run side by side.
"""

from __future__ import annotations

import math
from collections import Counter

import redis
from flask import Blueprint, jsonify, request

from app.auth import lab_access
from app.errors import ApiError
from app.store import get_redis
from core import clock, numbers, registry, stream
from core.backoff import exponential_delay, retry_bucket_s
from core.keys import key

bp = Blueprint("retries", __name__)
EVENT_LIMIT = 50_000  # a lab's whole history at the lab sizes this course runs


def retry_waves(events: list[dict]) -> dict[str, dict]:
    """Retry arrivals (the `due` of each scheduled retry) per policy, relative to the start of the
    outage they followed. Why relative: runs of different policies then share one time axis."""
    outages = [
        e["t_sim"] for e in events if e["type"] == "fault.started" and e["data"].get("fault") == "storage_outage"
    ]
    waves: dict[str, dict] = {}
    for e in events:
        if e["type"] != "job.retry_scheduled":
            continue
        since = [t for t in outages if t <= e["t_sim"]]
        if not since:
            continue
        policy = e["data"]["policy"]
        w = waves.setdefault(policy, {"arrivals": [], "first_wave": []})
        rel = e["data"]["due"] - since[-1]
        w["arrivals"].append(rel)
        if abs(e["t_sim"] - since[-1]) <= 0.001:  # failed at the outage's first instant: in flight then
            w["first_wave"].append(rel)
    return waves


def storage_arrivals(events: list[dict]) -> dict:
    """Calls that reached the storage dependency (`storage.called`), relative to the latest outage start,
    and relative to each caller's own first failure (the same herd with the callers' start times taken out:
    sharp waves whatever order the outage and the jobs came in).

    A retry arrival is a part's second call or later within its attempt: a storage-call retry. A part's
    first call is not one, even refused: with the outage started first, every job's parts call at its start
    and are refused together whatever the policy, and counting those would stack one synchronised wave on
    every policy's chart (full jitter's tallest bar then read 38–40 against no jitter's 36). A job retry (a
    new attempt after the last one failed) is counted apart, as a job retry, per run.

    `runs`: one per storage outage, in order, each holding the retries between its start and the next
    outage's (so two runs are never summed into one bar), with the policy their calls ran under."""
    outages = [
        e["t_sim"] for e in events if e["type"] == "fault.started" and e["data"].get("fault") == "storage_outage"
    ]
    first_fail: dict[tuple, float] = {}
    for e in events:
        if e["type"] == "storage.failed":
            for part in range(1, int(e["data"]["parts"]) + 1):
                first_fail.setdefault((e.get("job_id"), e.get("attempt"), part), e["t_sim"])
    since_outage, retried, since_failure, callers = [], [], [], set()
    by_policy: dict[str, dict] = {}
    runs = [{"from": t, "policies": Counter(), "arrivals": [], "callers": set(), "job_retries": 0} for t in outages]
    for e in events:
        since = [i for i, t in enumerate(outages) if t <= e["t_sim"]]
        if e["type"] == "job.retry_scheduled" and since:
            runs[since[-1]]["job_retries"] += 1
        if e["type"] != "storage.called":
            continue
        caller = (e.get("job_id"), e.get("attempt"), e["data"]["part"])
        if since:
            rel = e["t_sim"] - outages[since[-1]]
            since_outage.append(rel)
            if int(e["data"]["try"]) > 1:
                policy = e["data"].get("policy", "?")
                retried.append(rel)
                bp = by_policy.setdefault(policy, {"arrivals": [], "callers": set()})
                bp["arrivals"].append(rel)
                bp["callers"].add(caller)
                run = runs[since[-1]]
                run["arrivals"].append(rel)
                run["callers"].add(caller)
                run["policies"][policy] += 1
        if caller in first_fail:
            since_failure.append(e["t_sim"] - first_fail[caller])
        if not e["data"]["ok"]:
            first_fail.setdefault(caller, e["t_sim"])
        if caller in first_fail:
            callers.add(caller)
    return {
        "since_outage": since_outage,
        "retried": retried,
        "since_failure": since_failure,
        "callers": len(callers),
        "by_policy": by_policy,
        "runs": runs,
    }


def _run(run: dict, bucket_s: float) -> dict:
    """One outage's storage-call retries as the chart draws them: its own histogram, peak and counts. `herd`:
    the parts of each job's first attempt in the run (those the outage failed together, whichever came first),
    not the parts of the job retries that followed: the callers the jitter model spreads."""
    hist = histogram(run["arrivals"], bucket_s)
    policy = run["policies"].most_common(1)[0][0] if run["policies"] else None
    first: dict[str, int] = {}
    for job, attempt, _part in run["callers"]:
        first[job] = min(first.get(job, attempt), attempt)
    return {
        "from": run["from"],
        "policy": policy,
        "histogram": hist,
        "storage_retries": len(run["arrivals"]),
        "callers": len(run["callers"]),
        "job_retries": run["job_retries"],
        "herd": sum(1 for job, attempt, _part in run["callers"] if attempt == first[job]),
        "peak_per_bucket": max((n for _b, n in hist), default=0),
    }


def histogram(values: list[float], bucket_s: float) -> list[list[float]]:
    """[[bucket start, count], …] for the buckets that hold any value, in time order."""
    counts = Counter(math.floor(v / bucket_s) for v in values)
    return [[round(b * bucket_s, 6), n] for b, n in sorted(counts.items())]


def dlq_health(r: redis.Redis, lab: str, events: list[dict], settings: dict) -> dict:
    """Depth and arrival rate over the last simulated minute, each against its alert threshold."""
    now = clock.now(r, lab)
    depth = int(r.zcard(key(lab, "dlq")))
    recent = sum(1 for e in events if e["type"] == "job.dead_lettered" and e["t_sim"] > now - 60)
    return {
        "depth": depth,
        "depth_threshold": settings["dlq_alert_depth"],
        "depth_alert": depth >= settings["dlq_alert_depth"],
        "arrivals_per_min": recent,
        "rate_threshold": settings["dlq_alert_rate"],
        "rate_alert": recent >= settings["dlq_alert_rate"],
    }


@bp.get("/api/labs/<lab_id>/retries")
@lab_access(write=False)
def get_retries(lab_id: str):
    """Retry-arrival histograms per policy (measured) beside the model's peak, DLQ alerts, breaker."""
    raw = request.args.get("bucket_s", "")
    try:
        bucket_s = float(raw) if raw else None
    except ValueError:
        bucket_s = -1.0
    if bucket_s is not None and not 0.01 <= bucket_s <= 3600:
        raise ApiError(422, "invalid_bucket", {"bucket_s": "must be a number of simulated seconds, 0.01–3600"})
    r = get_redis()
    s = registry.settings(r, lab_id)
    window = exponential_delay(1, s["retry_base"], s["retry_cap"])  # full jitter's first-retry window
    bucket_s = bucket_s or retry_bucket_s(s["retry_base"], s["retry_cap"])
    events = stream.read_after(r, lab_id, "0", count=EVENT_LIMIT)
    policies = {}
    for policy, w in retry_waves(events).items():
        first = histogram(w["first_wave"], bucket_s)
        policies[policy] = {
            "retries": len(w["arrivals"]),
            "histogram": histogram(w["arrivals"], bucket_s),
            "first_wave": len(w["first_wave"]),
            "first_wave_peak": max((n for _b, n in first), default=0),
        }
    herd = max((p["first_wave"] for p in policies.values()), default=0)
    breaker = r.hgetall(key(lab_id, "breaker"))
    arrivals = storage_arrivals(events)
    at_storage = histogram(arrivals["retried"], bucket_s)
    by_failure = histogram(arrivals["since_failure"], bucket_s)
    callers = arrivals["callers"]
    runs = [_run(run, bucket_s) for run in arrivals["runs"]]
    herd_now = next((run["herd"] for run in reversed(runs) if run["herd"]), callers)  # the model's: the latest run's
    storage = {
        "callers": callers,
        "calls": len(arrivals["since_outage"]),
        "histogram": at_storage,
        "peak_per_bucket": max((n for _b, n in at_storage), default=0),
        "since_first_failure": by_failure,
        "peak_since_first_failure": max((n for _b, n in by_failure), default=0),
        "runs": runs,
        "policies": {
            p: {
                "histogram": (h := histogram(v["arrivals"], bucket_s)),
                "callers": len(v["callers"]),
                "peak_per_bucket": max((n for _b, n in h), default=0),
            }
            for p, v in arrivals["by_policy"].items()
        },
        "schedule_s": [
            sum(exponential_delay(k, s["retry_base"], s["retry_cap"]) for k in range(1, n + 1))
            for n in range(1, max(2, s["max_attempts"]))
        ],
        "model": {
            "callers": herd_now,
            "no_jitter_peak_per_bucket": herd_now,
            "full_jitter_mean_per_bucket": numbers.jitter_peak_per_bucket(herd_now, window, bucket_s),
            "full_jitter_expected_peak": round(numbers.jitter_expected_peak(herd_now, window, bucket_s), 2),
            "jitter_peak_reduction_x": numbers.jitter_peak_reduction(window, bucket_s),
        },
    }
    return jsonify(
        storage=storage,
        bucket_s=bucket_s,
        window_s=window,
        policies=policies,
        model={
            "clients": herd,
            "no_jitter_peak_per_bucket": herd,
            "full_jitter_peak_per_bucket": numbers.jitter_peak_per_bucket(herd, window, bucket_s),
            "jitter_peak_reduction_x": numbers.jitter_peak_reduction(window, bucket_s),
        },
        dlq=dlq_health(r, lab_id, events, s),
        breaker={
            "enabled": s["breaker"],
            "state": breaker.get("state", "closed") if s["breaker"] else "off",
            "failures": int(breaker.get("failures", 0)),
            "threshold": s["breaker_threshold"],
        },
        budget={"max_attempts": s["max_attempts"], "retry_budget_s": s["retry_budget"]},
    )
