"""Chapter 6's fair queues as both processes see them: the per-tier keys, submitting jobs, the summary
the chapter plots, and a reset. The pool's face (releasing jobs to free workers, the tier jobs themselves)
is workers/engines/fairness.py.

A reset starts the measurements afresh: it notes in the meta hash the first job sequence number it did not see
(`since`), and a job queued before it (one already handed to a worker that starts or ends after the reset)
runs on but is never measured: its wait, its worker-seconds and its completion are the step before's, not
rows of the next step's tables."""

from __future__ import annotations

import json
import math

import redis

from core import clock
from core import settings as settings_schema
from core.keys import key

TIERS = ("pro", "free")
STRATEGIES = settings_schema.BY_NAME["fairness"].choices  # shared first: the baseline the bench compares with
SPIKE_FACTOR = 2.0  # the lesson's "2x" spike
WAITS_KEPT = 5000
COUNTERS = ("submitted", "done", "requeued", "crashes", "dead")  # per-tier job counts kept in the meta hash
POISON_CRASHES = 3  # a poison job that has taken down this many workers is dead-lettered, not run again
RELEASE = "fair:release"  # the barrier holder for jobs waiting for the supervisor's release (clock.hold)


def pending_key(lab: str, tier: str) -> str:
    return key(lab, "fair", "pending", tier)


def customer_key(lab: str, tier: str, customer: str) -> str:
    return key(lab, "fair", "cust", tier, customer)


def customers_key(lab: str, tier: str) -> str:
    return key(lab, "fair", "customers", tier)


def inflight_key(lab: str) -> str:
    return key(lab, "fair", "inflight")


def submit(
    r: redis.Redis, lab: str, tier: str, customer: str, count: int, now: float | None = None, poison: bool = False
) -> int:
    """Queue `count` jobs for one customer; members are `seq:customer`, scored by enqueue time.
    Each job sits in its tier's FIFO and in its customer's own queue (what round robin rotates over).
    A poison job takes down the worker that runs it (the process dies, as an OOM kill would).
    Without `now` it is queued at the clock's present, held there (`hold_release`)."""
    now = hold_release(r, lab) if now is None else now
    r.hsetnx(key(lab, "fair", "meta"), "t0", now)
    first = r.hincrby(key(lab, "fair", "meta"), "seq", count) - count
    members = {f"{first + i}:{customer}": now + (first + i) * 1e-6 for i in range(count)}  # FIFO by seq
    if poison:
        r.sadd(poison_key(lab), *members)
    enqueue(r, lab, tier, customer, members)
    r.hincrby(key(lab, "fair", "meta"), f"submitted_{tier}", count)
    return count


def hold_release(r: redis.Redis, lab: str) -> float:
    """Hold the clock at its present until the supervisor's next pass has released what free workers can
    take (RELEASE, lifted by that pass), and return that present: jobs queued now that reach idle workers
    start at the moment they were queued, however late that pass comes on a busy host. Held before the
    clock is read, as a producer's send is (core/broker/handoff.py)."""
    clock.hold(r, lab, RELEASE, 0.0)
    return clock.now(r, lab)


def enqueue(r: redis.Redis, lab: str, tier: str, customer: str, members: dict[str, float]) -> None:
    pipe = r.pipeline()
    pipe.zadd(pending_key(lab, tier), members)
    pipe.zadd(customer_key(lab, tier, customer), members)
    pipe.sadd(customers_key(lab, tier), customer)
    pipe.execute()


def run_holder(member: str) -> str:
    """A released job's barrier: held at its release until its horse starts it, then at its end until it ends."""
    return f"fair:{member}"


def poison_key(lab: str) -> str:
    return key(lab, "fair", "poison")


def pools(settings: dict) -> dict[str, int]:
    """Workers each tier may use at once: hard split and full separation wall off `pro_workers`."""
    total = int(settings["workers"])
    if settings["fairness"] in ("split", "separate"):
        pro = min(int(settings["pro_workers"]), total)
        return {"pro": pro, "free": total - pro}
    return {"pro": total, "free": total}


def oldest(r: redis.Redis, k: str) -> tuple[str, float] | None:
    got = r.zrange(k, 0, 0, withscores=True)
    return got[0] if got else None


def running_counts(r: redis.Redis, lab: str) -> dict[str, int]:
    """Jobs released to RQ and not yet finished, per tier: the in-flight records are the truth, so a
    job whose worker was killed stops counting when the sweep takes its record back."""
    counts = dict.fromkeys(TIERS, 0)
    for raw in r.hvals(inflight_key(lab)):
        counts[json.loads(raw)["tier"]] += 1
    return counts


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 by nearest rank: the tail is the point of the chapter, not the mean."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"n": len(ordered), "p50": rank(0.5), "p95": rank(0.95), "p99": rank(0.99), "max": ordered[-1]}


# KEYS: the lab's fair meta hash, its waits list, its used hash. ARGV: the job's sequence number, then either
# 'start', its wait row (JSON), the rows kept; or 'end', its tier, its worker-seconds; or 'count', the meta counter
# (`crashes_free`). Checked against the last reset's `since` and written in one step, so a reset between the two
# never lets a job from before it count.
_MEASURE = """
local meta, waits, used = KEYS[1], KEYS[2], KEYS[3]
if tonumber(ARGV[1]) < tonumber(redis.call('HGET', meta, 'since') or '0') then return 0 end
if ARGV[2] == 'start' then
  redis.call('RPUSH', waits, ARGV[3])
  redis.call('LTRIM', waits, -tonumber(ARGV[4]), -1)
elseif ARGV[2] == 'end' then
  redis.call('HINCRBYFLOAT', used, ARGV[3], ARGV[4])
  redis.call('HINCRBY', meta, 'done_' .. ARGV[3], 1)
else
  redis.call('HINCRBY', meta, ARGV[3], 1)
end
return 1
"""

# KEYS: the lab's fair meta hash. The first sequence number a reset has not seen (jobs from it on are measured).
_SINCE = """
redis.call('HSET', KEYS[1], 'since', redis.call('HGET', KEYS[1], 'seq') or '0')
return 1
"""


def _measure(r: redis.Redis, lab: str, seq: int, *args) -> bool:
    meta, waits_key, used = key(lab, "fair", "meta"), key(lab, "fair", "waits"), key(lab, "fair", "used")
    return bool(r.eval(_MEASURE, 3, meta, waits_key, used, seq, *args))


def record_start(r: redis.Redis, lab: str, seq: int, row: dict) -> bool:
    """A tier job started: its wait row joins the measurements, unless it was queued before the last reset."""
    return _measure(r, lab, seq, "start", json.dumps(row), WAITS_KEPT)


def record_end(r: redis.Redis, lab: str, seq: int, tier: str, seconds: float) -> bool:
    """A tier job ended: its worker-seconds and its completion count, unless it was queued before the last reset."""
    return _measure(r, lab, seq, "end", tier, seconds)


def record_count(r: redis.Redis, lab: str, member: str, name: str, tier: str) -> bool:
    """A tier job (`seq:customer`) crashed its worker, was dead-lettered or was taken back (`name`: crashes, dead,
    requeued): counted for its tier unless it was queued before the last reset, so a step's poison counters never
    show the step before's."""
    return _measure(r, lab, int(member.split(":", 1)[0]), "count", f"{name}_{tier}")


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
        "strategy": settings["fairness"],
        "now": round(now, 3),
        "pools": cap,
        "pending": {t: r.zcard(pending_key(lab, t)) for t in TIERS},
        # age of each tier's oldest waiting job: climbs without bound while a tier starves
        "oldest_wait": {
            t: round(now - head[1], 1) if (head := oldest(r, pending_key(lab, t))) else None for t in TIERS
        },
        "running": running_counts(r, lab),
        **{name: {t: int(meta.get(f"{name}_{t}", 0)) for t in TIERS} for name in COUNTERS},
        "waits": by_tier,
        "customers": by_customer,
        "used_worker_s": {t: round(used.get(t, 0.0), 1) for t in TIERS},
        "paid_worker_s": paid_worker_s(settings, used, now - float(meta.get("t0", now))),
        "since": int(meta.get("since", 0)),  # moves with each reset that follows new jobs: a view starts afresh
    }


def paid_worker_s(settings: dict, used: dict[str, float], elapsed: float) -> dict[str, float]:
    """A walled-off pool is paid for whether busy or idle; a shared pool's bill is split by use."""
    cap = pools(settings)
    if settings["fairness"] in ("split", "separate"):
        return {t: round(cap[t] * elapsed, 1) for t in TIERS}
    total = sum(used.get(t, 0.0) for t in TIERS) or 1.0
    return {t: round(int(settings["workers"]) * elapsed * used.get(t, 0.0) / total, 1) for t in TIERS}


def reset(r: redis.Redis, lab: str) -> None:
    """Forget queued jobs and measurements, in one step. Jobs already handed to workers run to their end (they
    still count as running) but are not measured: what the tables show next is only what was queued after."""
    cust_keys = [customer_key(lab, t, c) for t in TIERS for c in r.smembers(customers_key(lab, t))]
    with r.pipeline(transaction=True) as pipe:
        pipe.delete(
            *(pending_key(lab, t) for t in TIERS),
            *(customers_key(lab, t) for t in TIERS),
            *cust_keys,
            key(lab, "fair", "waits"),
            key(lab, "fair", "used"),
            key(lab, "fair", "spike"),
            poison_key(lab),
            key(lab, "fair", "crashes"),
        )
        pipe.hdel(
            key(lab, "fair", "meta"),
            "t0",
            *(f"{name}_{t}" for name in COUNTERS for t in TIERS),
            *(f"rr_{t}" for t in TIERS),
        )
        pipe.eval(_SINCE, 1, key(lab, "fair", "meta"))
        pipe.execute()
