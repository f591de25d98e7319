"""Chapter 7's routes: what the scheduler replicas did, tick by tick, and the controls that break them.

Every figure is counted from what the real replica processes wrote (runs per tick, who ran them,
emails, overlaps, catch-ups), beside the numbers model's figure for the same settings. Runs per
tick are also grouped by the strategy that was in force, so one lab can compare them all.
"""

from __future__ import annotations

import json
import math
from typing import Any

import redis
from flask import Blueprint, jsonify

import chapters
from app import bodies
from app.auth import lab_access
from app.errors import ApiError
from app.http import json_body, parse
from app.pool import ask_pool
from app.store import get_redis
from core import clock, numbers, registry, stream
from core.engines import locks, shards
from core.engines.scheduler import TASK, clock_offset, cron_key, digest_tick

bp = Blueprint("schedule", __name__)
RECENT_TICKS = 30
CH7_SETTINGS = (
    "scheduler_replicas",
    "cron_strategy",
    "cron_interval",
    "cron_task_s",
    "cron_lock_ttl",
    "cron_release",
    "leader_lease",
    "clock_skew",
    "cron_idempotent",
    "cron_catch_up",
    "cron_shard",
    "shard_buckets",
    "cron_users",
    "speed",
)
SETTLE_S = 5.0  # simulated seconds after a tick's end before its run count is final (loop resolution)


def _lock_view(r: redis.Redis, lab: str, name: str, now: float, settings: dict) -> dict:
    """Holder and remaining time, judged on the holder's own clock (where its deadline was written)."""
    lock = locks.read(r, lab, name)
    if lock["holder"] is None or lock["expires"] is None:
        return {"holder": None, "remaining_s": None, "fence": lock["fence"], "expired": False}
    remaining = lock["expires"] - (now + clock_offset(settings, lock["holder"]))
    return {
        "holder": lock["holder"],
        "remaining_s": round(remaining, 3),
        "fence": lock["fence"],
        "expired": remaining <= 0,
    }


def _empty_row() -> dict[str, Any]:
    return {"runs": 0, "by": [], "emails": 0, "wasted": 0, "overlaps": 0, "catch_up": False, "strategy": None}


def tick_rows(r: redis.Redis, lab: str, last_complete: int, since: int | None = None) -> dict[int, dict[str, Any]]:
    """{tick: {runs, by, emails, wasted, overlaps, catch_up, strategy}} from the replicas' writes; a
    complete tick inside the observed span that nobody ran or saw (every replica down) has zero runs.

    With a measurement start (`since`, set by reset) the span runs from it to the last complete tick:
    replicas taken down right after a reset leave no write at all, and those ticks are the missed
    ones the learner is there to see (counted live, while everything is still down). Without one,
    the span is what the replicas wrote, so a fresh lab's starting replicas show no false misses."""
    rows: dict[int, dict[str, Any]] = {}
    for field, value in r.hgetall(cron_key(lab, "ticks")).items():
        tick, name = field.split(":", 1)
        row = rows.setdefault(int(tick), _empty_row())
        if name == "by":
            row["by"] = value.split(",")
        elif name == "strategy":
            row["strategy"] = value
        elif name == "catch_up":
            row["catch_up"] = True
        else:
            row[name] = int(value)
    if since is not None:
        span = range(since, last_complete + 1)
    else:
        observed = [t for t in rows if t <= last_complete]
        span = range(min(observed, default=0), max(observed, default=-1) + 1)
    for t in span:
        rows.setdefault(t, _empty_row())
    return rows


def by_strategy(rows: dict[int, dict[str, Any]], last_complete: int) -> dict[str, dict[str, Any]]:
    """Measured runs per tick for each strategy over the complete ticks it was in force."""
    out: dict[str, dict[str, Any]] = {}
    for tick in sorted(rows):
        row = rows[tick]
        if tick > last_complete or row["strategy"] is None:
            continue
        s = out.setdefault(
            row["strategy"],
            {
                "ticks": 0,
                "runs": 0,
                "min_runs": math.inf,
                "max_runs": 0,
                "duplicate_ticks": 0,
                "missed_ticks": 0,
                "overlaps": 0,
                "emails": 0,
            },
        )
        s["ticks"] += 1
        s["runs"] += row["runs"]
        s["min_runs"] = min(s["min_runs"], row["runs"])
        s["max_runs"] = max(s["max_runs"], row["runs"])
        s["duplicate_ticks"] += row["runs"] > 1
        s["missed_ticks"] += row["runs"] == 0
        s["overlaps"] += row["overlaps"]
        s["emails"] += row["emails"]
    for s in out.values():
        s["runs_per_tick"] = round(s["runs"] / s["ticks"], 3)
    return out


def shard_report(settings: dict) -> dict[str, Any]:
    users, buckets = int(settings["cron_users"]), int(settings["shard_buckets"])
    sizes = shards.bucket_sizes(shards.users(users), buckets)
    chi = shards.chi_square(sizes)
    critical = shards.chi_square_critical(buckets - 1) if buckets > 1 else 0.0
    return {
        "users": users,
        "buckets": buckets,
        "sizes": sizes,
        "expected": users / buckets,
        "chi_square": round(chi, 3),
        "df": buckets - 1,
        "critical_0_1pct": round(critical, 3),
        "even": chi <= critical,
        "unsharded_burst": users,
    }


def model(settings: dict) -> dict[str, Any]:
    """The numbers model's chapter-7 figures for this lab's settings (chapters.derive is the one source)."""
    try:
        inputs = numbers.Inputs(
            scheduler_replicas=max(1, int(settings["scheduler_replicas"])),
            cron_interval_s=float(settings["cron_interval"]),
            task_p99_s=float(settings["cron_task_s"]),
            short_lock_ttl_s=float(settings["cron_lock_ttl"]),
            lock_ttl_s=float(settings["cron_lock_ttl"]),
            clock_skew_s=float(settings["clock_skew"]),
            leader_lease_s=float(settings["leader_lease"]),
            users=int(settings["cron_users"]),
            shard_buckets=int(settings["shard_buckets"]),
        )
    except numbers.InputError:
        inputs = numbers.Inputs()
    c7 = chapters.figures_of("schedule", inputs)
    keys = (
        "no_lock_runs_per_tick",
        "no_lock_emails_per_user",
        "lock_margin_s",
        "lock_margin_after_skew_s",
        "lock_ttl_over_p99_x",
        "leader_failover_max_s",
        "missed_tick_after_s",
        "users_per_bucket",
    )
    return {k: c7[k] for k in keys}


def margins(s: dict) -> dict[str, dict[str, Any]]:
    """What is left of each timeout once the work it covers and the clock skew are taken out.

    A lock must outlive the run (the lesson's 120 − 45 − 2 = 73 s); a heartbeat lock and a leader
    lease only need to outlive the gap between renewals, but a replica whose clock runs ahead still
    sees them expire `skew` seconds early."""
    ttl, task, skew, lease = (float(s[n]) for n in ("cron_lock_ttl", "cron_task_s", "clock_skew", "leader_lease"))
    rows = {
        "lock": (ttl, task, "task"),
        "heartbeat": (ttl, ttl / 3, "heartbeat gap"),
        "leader": (lease, lease / 3, "renewal gap"),
    }
    return {
        name: {
            "timeout_s": t,
            "covers_s": round(c, 3),
            "covers": what,
            "clock_skew_s": skew,
            "margin_s": round(t - c - skew, 3),
            "ok": t - c - skew > 0,
        }
        for name, (t, c, what) in rows.items()
    }


def report(lab: str) -> dict[str, Any]:
    r = get_redis()
    s = registry.settings(r, lab)
    now = clock.now(r, lab)
    interval = float(s["cron_interval"])
    last_complete = math.floor((now - SETTLE_S) / interval) - 1
    raw_since = r.hget(cron_key(lab, "meta"), "since_tick")
    since = int(raw_since) if raw_since is not None else None
    rows = {t: row for t, row in tick_rows(r, lab, last_complete, since).items() if since is None or t >= since}
    # digests owed by the measured ticks only: a run of a tick before the reset, still going when it came,
    # goes on mailing its own tick's digests, and they are not the new strategy's
    emails = [int(v) for d, v in r.hgetall(cron_key(lab, "emails")).items() if since is None or digest_tick(d) >= since]
    running = {rid: json.loads(v) for rid, v in r.hgetall(cron_key(lab, "running")).items()}
    leader = _lock_view(r, lab, "leader", now, s)
    seen = r.hgetall(cron_key(lab, "seen"))
    replicas = []
    for raw in r.hvals(cron_key(lab, "replicas")):
        row = json.loads(raw)
        row["offset_s"] = round(clock_offset(s, row["id"]), 3)
        row["leader"] = s["cron_strategy"] == "leader" and leader["holder"] == row["id"] and not leader["expired"]
        row["running_tick"] = running.get(row["id"], {}).get("tick")
        row["seen_tick"] = int(seen[row["id"]]) if row["id"] in seen else None
        if row["state"] == "running" and row["seen_tick"] is None:
            row["state"] = "starting"  # the process is up, its loop has not taken its first step yet
        replicas.append(row)
    replicas.sort(key=lambda x: int(x["id"][1:]))
    complete = [rows[t] for t in sorted(rows) if t <= last_complete]
    return {
        "now": round(now, 3),
        "tick": math.floor(now / interval),
        "last_complete_tick": last_complete,
        "since_tick": since,
        "settings": {n: s[n] for n in CH7_SETTINGS},
        "replicas": replicas,
        "lock": _lock_view(r, lab, TASK, now, s),
        "leader": leader,
        "failovers": [json.loads(x) for x in r.lrange(cron_key(lab, "failovers"), 0, -1)],
        "ticks": [{"tick": t, **rows[t]} for t in sorted(rows)[-RECENT_TICKS:]],
        "totals": {
            "ticks": len(complete),
            "runs": sum(x["runs"] for x in complete),
            "duplicate_runs": sum(max(0, x["runs"] - 1) for x in complete),
            "missed_ticks": sum(1 for x in complete if x["runs"] == 0),
            "overlaps": sum(x["overlaps"] for x in complete),
            "catch_ups": sum(x["catch_up"] for x in complete),
            "emails": sum(emails),
            "digests": len(emails),
            "duplicate_emails": sum(emails) - len(emails),
            "max_emails_per_user": max(emails, default=0),
            "wasted_digests": sum(x["wasted"] for x in complete),
        },
        "by_strategy": by_strategy(rows, last_complete),
        "margin": margins(s),
        "shard": shard_report(s),
        "model": model(s),
    }


@bp.get("/api/labs/<lab_id>/schedule")
@lab_access(write=False)
def get_schedule(lab_id: str):
    """Scheduler replicas, lock and leader lease, runs and emails per tick, per-strategy runs per tick."""
    return jsonify(report(lab_id))


def _kill(r: redis.Redis, lab: str, replica: Any) -> dict:
    """Ask the supervisor (which owns the replica processes) to SIGKILL one; 'leader'/'holder' pick it."""
    if replica in ("leader", "holder"):
        now, s = clock.now(r, lab), registry.settings(r, lab)
        view = _lock_view(r, lab, "leader" if replica == "leader" else TASK, now, s)
        if view["holder"] is None or view["expired"]:
            what = "leader lease" if replica == "leader" else "lock"
            raise ApiError(409, f"no_{replica}", f"no replica holds the {what}")
        replica = view["holder"]
    if not isinstance(replica, str) or not r.hexists(cron_key(lab, "replicas"), replica):
        raise ApiError(404, "unknown_replica", {"replica": "name a replica of this lab (r1, r2, …), leader or holder"})
    return ask_pool(r, {"cmd": "kill_replica", "lab": lab, "replica": replica})


@bp.post("/api/labs/<lab_id>/schedule")
@lab_access(write=True)
def control_schedule(lab_id: str):
    """Kill a replica (or the leader / lock holder), take every replica down, make the next run slow, reset."""
    body = parse(json_body(), bodies.SCHEDULE)
    action = body["action"]
    r = get_redis()
    now = clock.now(r, lab_id)
    result: dict[str, Any] = {"action": action}
    if action == "kill":
        result.update(_kill(r, lab_id, body.get("replica")))
    elif action == "down":
        duration = float(body.get("duration_s", 300))
        r.hset(cron_key(lab_id, "fault"), "down_until", now + duration)
        stream.emit(r, lab_id, "scheduler.down", now, duration=duration)
    elif action == "slow":
        duration = float(body.get("duration_s", 3 * float(registry.settings(r, lab_id)["cron_task_s"])))
        r.set(cron_key(lab_id, "slow_next"), duration)
        stream.emit(r, lab_id, "cron.slow_next", now, duration=duration)
    else:  # measurements restart at the next tick any replica's clock reaches (lock, lease and last run stay)
        s = registry.settings(r, lab_id)
        since = math.floor((now + float(s["clock_skew"])) / float(s["cron_interval"])) + 1
        r.delete(cron_key(lab_id, "ticks"), cron_key(lab_id, "emails"))
        r.hset(cron_key(lab_id, "meta"), "since_tick", since)
        result["since_tick"] = since
    return jsonify({**result, "schedule": report(lab_id)})
