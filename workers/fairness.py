"""Fairness between tiers (chapter 6): per-tier queues and the policy a free worker polls them by.

Jobs wait in the lab's broker queues (one sorted set per tier, scored by enqueue time) and are
released to the lab's RQ queue only when a real worker is free, so the *strategy* decides which
job a freed worker gets next — the application-layer priority the lesson says SQS forces on you.
Each released job is a paced RQ job on the lab clock (no ffmpeg: the chapter needs hundreds of
short jobs on two cores); its wait is measured when a worker actually starts it.
"""

from __future__ import annotations

import json
import math
import os
import random
import time

import redis

from workers.broker import clock, reaper, stream
from workers.broker.keys import key

TIERS = ("pro", "free")
STRATEGIES = ("shared", "split", "weighted", "strict", "aging", "separate", "round_robin")
SPIKE_FACTOR = 2.0  # the lesson's "2x" spike
WAITS_KEPT = 5000
TICK = 0.02


def pending_key(lab: str, tier: str) -> str:
    return key(lab, "fair", "pending", tier)


def submit(r: redis.Redis, lab: str, tier: str, customer: str, count: int, now: float | None = None) -> int:
    """Queue `count` jobs for one customer; members are `seq:customer`, scored by enqueue time."""
    now = clock.now(r, lab) if now is None else now
    r.hsetnx(key(lab, "fair", "meta"), "t0", now)
    first = r.hincrby(key(lab, "fair", "meta"), "seq", count) - count
    members = {f"{first + i}:{customer}": now + (first + i) * 1e-6 for i in range(count)}  # FIFO by seq
    r.zadd(pending_key(lab, tier), members)
    r.hincrby(key(lab, "fair", "meta"), f"submitted_{tier}", count)
    return count


def pools(settings: dict) -> dict[str, int]:
    """Workers each tier may use at once: hard split and full separation wall off `pro_workers`."""
    total = int(settings["workers"])
    if settings["fairness"] in ("split", "separate"):
        pro = min(int(settings["pro_workers"]), total)
        return {"pro": pro, "free": total - pro}
    return {"pro": total, "free": total}


def _oldest(r: redis.Redis, lab: str, tier: str) -> tuple[str, float] | None:
    got = r.zrange(pending_key(lab, tier), 0, 0, withscores=True)
    return got[0] if got else None


def choose(r: redis.Redis, lab: str, settings: dict, now: float, running: dict[str, int],
           rng: random.Random) -> tuple[str, str, float] | None:
    """The next (tier, member, enqueued_at) a free worker takes under the lab's strategy."""
    cap = pools(settings)
    open_tiers = [t for t in TIERS if running.get(t, 0) < cap[t]]
    heads = {t: h for t in open_tiers if (h := _oldest(r, lab, t))}
    if not heads:
        return None
    strategy = settings["fairness"]
    if strategy == "aging" and "free" in heads and now - heads["free"][1] > settings["aging_s"]:
        tier = "free"  # an aged-out free job jumps ahead of ordinary priority
    elif strategy in ("strict", "aging"):
        tier = "pro" if "pro" in heads else "free"
    elif strategy == "weighted":
        if rng.random() < settings["pro_weight"] and "pro" in heads:
            tier = "pro"
        else:
            tier = "free" if "free" in heads else "pro"
    elif strategy == "round_robin":
        return _round_robin(r, lab, open_tiers)
    else:  # shared FIFO; split/separate are FIFO inside each walled-off pool
        tier = min(heads, key=lambda t: heads[t][1])
    return tier, heads[tier][0], heads[tier][1]


def _round_robin(r: redis.Redis, lab: str, tiers: list[str]) -> tuple[str, str, float] | None:
    """Serve the next customer (sorted by id) after the last one served, oldest job first."""
    oldest: dict[str, tuple[str, str, float]] = {}
    for tier in tiers:
        for member, score in r.zrange(pending_key(lab, tier), 0, -1, withscores=True):
            cust = member.split(":", 1)[1]
            if cust not in oldest:
                oldest[cust] = (tier, member, score)
    if not oldest:
        return None
    cursor = r.hget(key(lab, "fair", "meta"), "rr_last") or ""
    customers = sorted(oldest)
    nxt = next((c for c in customers if c > cursor), customers[0])
    r.hset(key(lab, "fair", "meta"), "rr_last", nxt)
    return oldest[nxt]


def running_counts(r: redis.Redis, lab: str) -> dict[str, int]:
    raw = r.hgetall(key(lab, "fair", "running"))
    return {t: max(0, int(raw.get(t, 0))) for t in TIERS}


def generate(r: redis.Redis, lab: str, settings: dict, now: float) -> int:
    """Open-loop traffic at `arrival_rate` (jobs per simulated second), split by `pro_share`;
    a spike doubles one tier's rate until it ends. Poisson counts from a seeded RNG."""
    meta = key(lab, "fair", "meta")
    last = r.hget(meta, "gen_t")
    r.hset(meta, "gen_t", now)
    rate = float(settings["arrival_rate"])
    if last is None or rate <= 0 or now <= float(last):
        return 0
    dt = now - float(last)
    spikes = r.hgetall(key(lab, "fair", "spike"))
    made = 0
    rng = random.Random(f"{lab}:{now}")
    for tier, share in (("pro", settings["pro_share"]), ("free", 1 - settings["pro_share"])):
        boost = SPIKE_FACTOR if float(spikes.get(tier, -1)) > now else 1.0
        n = _poisson(rng, rate * share * boost * dt)
        for _ in range(n):
            cust = f"{tier[0]}{rng.randrange(1, 4 if tier == 'pro' else 10)}"
            made += submit(r, lab, tier, cust, 1, now)
    return made


def _poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def tick(r: redis.Redis, rq_conn: redis.Redis, lab: str, settings: dict, now: float) -> int:
    """Release jobs to RQ while workers are free; called from the supervisor's broker loop."""
    generate(r, lab, settings, now)
    running = running_counts(r, lab)
    free_workers = int(settings["workers"]) - sum(running.values())
    sent = 0
    rng = random.Random(f"{lab}:{r.hget(key(lab, 'fair', 'meta'), 'released') or 0}")
    while free_workers > 0:
        pick = choose(r, lab, settings, now, running, rng)
        if pick is None:
            break
        tier, member, enqueued = pick
        if not r.zrem(pending_key(lab, tier), member):
            break
        seq, cust = member.split(":", 1)
        r.hincrby(key(lab, "fair", "running"), tier, 1)
        order = r.hincrby(key(lab, "fair", "meta"), "released", 1)
        reaper.rq_queue(rq_conn, lab).enqueue_call(
            "workers.fairness.run_job",
            args=(lab, seq, tier, cust, enqueued, float(settings["fair_job_s"]), order),
            timeout=-1, result_ttl=0, failure_ttl=300)
        running[tier] += 1
        free_workers -= 1
        sent += 1
    return sent


def run_job(lab: str, seq: str, tier: str, customer: str, enqueued: float, duration: float,
            order: int = 0) -> None:
    """One tier job in a real work horse: record its wait, hold a worker for `duration` simulated s.
    `order` is the strategy's pick order (start order can differ by a worker's hand-off latency)."""
    from workers.tasks import connection, set_worker, worker_id

    r = connection()
    start = clock.now(r, lab)
    wait = max(0.0, start - enqueued)
    r.rpush(key(lab, "fair", "waits"), json.dumps({"tier": tier, "customer": customer, "wait": round(wait, 3),
                                                   "t": round(start, 3), "seq": int(seq),
                                                   "order": order}))
    r.ltrim(key(lab, "fair", "waits"), -WAITS_KEPT, -1)
    set_worker(r, lab, state="busy", job_id=f"{tier}-{seq}", horse_pid=os.getpid())
    stream.emit(r, lab, "fairness.started", start, worker_id=worker_id(), tier=tier, customer=customer,
                wait=round(wait, 1))
    try:
        while clock.now(r, lab) - start < duration:
            time.sleep(TICK)
        r.hincrbyfloat(key(lab, "fair", "used"), tier, duration)
    finally:
        r.hincrby(key(lab, "fair", "running"), tier, -1)
        set_worker(r, lab, state="idle", job_id=None, horse_pid=None)


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 by nearest rank: the tail is the point of the chapter, not the mean."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"n": len(ordered), "p50": rank(0.5), "p95": rank(0.95), "p99": rank(0.99), "max": ordered[-1]}


def waits(r: redis.Redis, lab: str) -> list[dict]:
    return [json.loads(x) for x in r.lrange(key(lab, "fair", "waits"), 0, -1)]


def summary(r: redis.Redis, lab: str, settings: dict, now: float) -> dict:
    """What the chapter plots: pending and running per tier, wait percentiles per tier and customer,
    and worker-seconds used vs paid per tier (paid = the tier's pool × elapsed lab time)."""
    rows = waits(r, lab)
    by_tier = {t: percentiles([w["wait"] for w in rows if w["tier"] == t]) for t in TIERS}
    customers = sorted({w["customer"] for w in rows})
    by_customer = {c: percentiles([w["wait"] for w in rows if w["customer"] == c]) for c in customers}
    used = {t: float(v) for t, v in r.hgetall(key(lab, "fair", "used")).items()}
    cap = pools(settings)
    meta = r.hgetall(key(lab, "fair", "meta"))
    return {
        "strategy": settings["fairness"], "now": round(now, 3), "pools": cap,
        "pending": {t: r.zcard(pending_key(lab, t)) for t in TIERS},
        "running": running_counts(r, lab),
        "submitted": {t: int(meta.get(f"submitted_{t}", 0)) for t in TIERS},
        "waits": by_tier, "customers": by_customer,
        "used_worker_s": {t: round(used.get(t, 0.0), 1) for t in TIERS},
        "paid_worker_s": paid_worker_s(settings, used, now - float(meta.get("t0", now))),
    }


def paid_worker_s(settings: dict, used: dict[str, float], elapsed: float) -> dict[str, float]:
    """A walled-off pool is paid for whether busy or idle; a shared pool's bill is split by use."""
    cap = pools(settings)
    if settings["fairness"] in ("split", "separate"):
        return {t: round(cap[t] * elapsed, 1) for t in TIERS}
    total = sum(used.get(t, 0.0) for t in TIERS) or 1.0
    return {t: round(int(settings["workers"]) * elapsed * used.get(t, 0.0) / total, 1) for t in TIERS}


def reset(r: redis.Redis, lab: str) -> None:
    """Forget queued jobs and measurements (running jobs finish and are still counted)."""
    r.delete(*(pending_key(lab, t) for t in TIERS), key(lab, "fair", "waits"), key(lab, "fair", "used"),
             key(lab, "fair", "spike"))
    r.hdel(key(lab, "fair", "meta"), "submitted_pro", "submitted_free", "rr_last", "t0")
