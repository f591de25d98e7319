"""Fairness between tiers (chapter 6): per-tier queues and the policy a free worker polls them by.

Jobs wait in the lab's broker queues (one sorted set per tier, scored by enqueue time) and are
released to the lab's RQ queue only when a real worker is free, so the *strategy* decides which
job a freed worker gets next — the application-layer priority the lesson says SQS forces on you.
Each released job is a paced RQ job on the lab clock (no ffmpeg: the chapter needs hundreds of
short jobs on two cores); its wait is measured when a worker actually starts it.

Full separation is more than a count: its pro and free workers are different processes on different
RQ queues, so a free poison job that takes its worker down can only take down free workers. Under a
hard split the wall is a count over one fleet, and the same storm kills the workers pro runs on too.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import time

import redis
from rq import Queue

from core import clock, stream
from core import settings as settings_schema
from core.keys import key, queue_name
from workers.broker import reaper

TIERS = ("pro", "free")
STRATEGIES = settings_schema.BY_NAME["fairness"].choices  # shared first: the baseline the bench compares with
SPIKE_FACTOR = 2.0  # the lesson's "2x" spike
WAITS_KEPT = 5000
COUNTERS = ("submitted", "done", "requeued", "crashes", "dead")  # per-tier job counts kept in the meta hash
TICK = 0.02
POISON_CRASHES = 3  # a poison job that has taken down this many workers is dead-lettered, not run again
START_GRACE_S = 30.0  # real seconds a job RQ has taken may wait for its horse to claim it
SWEEP_S = 0.5  # real seconds between sweeps for released jobs that will never finish
_swept: dict[str, float] = {}  # lab → real time of its last sweep (the supervisor's process only)


def pending_key(lab: str, tier: str) -> str:
    return key(lab, "fair", "pending", tier)


def customer_key(lab: str, tier: str, customer: str) -> str:
    return key(lab, "fair", "cust", tier, customer)


def customers_key(lab: str, tier: str) -> str:
    return key(lab, "fair", "customers", tier)


def inflight_key(lab: str) -> str:
    return key(lab, "fair", "inflight")


def submit(r: redis.Redis, lab: str, tier: str, customer: str, count: int, now: float | None = None,
           poison: bool = False) -> int:
    """Queue `count` jobs for one customer; members are `seq:customer`, scored by enqueue time.
    Each job sits in its tier's FIFO and in its customer's own queue (what round robin rotates over).
    A poison job takes down the worker that runs it (the process dies, as an OOM kill would)."""
    now = clock.now(r, lab) if now is None else now
    r.hsetnx(key(lab, "fair", "meta"), "t0", now)
    first = r.hincrby(key(lab, "fair", "meta"), "seq", count) - count
    members = {f"{first + i}:{customer}": now + (first + i) * 1e-6 for i in range(count)}  # FIFO by seq
    if poison:
        r.sadd(poison_key(lab), *members)
    _enqueue(r, lab, tier, customer, members)
    r.hincrby(key(lab, "fair", "meta"), f"submitted_{tier}", count)
    return count


def _enqueue(r: redis.Redis, lab: str, tier: str, customer: str, members: dict[str, float]) -> None:
    pipe = r.pipeline()
    pipe.zadd(pending_key(lab, tier), members)
    pipe.zadd(customer_key(lab, tier, customer), members)
    pipe.sadd(customers_key(lab, tier), customer)
    pipe.execute()


def poison_key(lab: str) -> str:
    return key(lab, "fair", "poison")


def fleet_of(settings: dict, rank: int) -> str | None:
    """The tier the `rank`-th worker (0-based, by id) serves only, under full separation; else None."""
    if settings.get("fairness") != "separate":
        return None
    return "pro" if rank < min(int(settings["pro_workers"]), int(settings["workers"])) else "free"


def tier_queue_name(lab: str, tier: str) -> str:
    """A separate fleet's own RQ queue (its workers listen to it before the lab's ordinary queue)."""
    return f"{queue_name(lab)}-{tier}"


def pools(settings: dict) -> dict[str, int]:
    """Workers each tier may use at once: hard split and full separation wall off `pro_workers`."""
    total = int(settings["workers"])
    if settings["fairness"] in ("split", "separate"):
        pro = min(int(settings["pro_workers"]), total)
        return {"pro": pro, "free": total - pro}
    return {"pro": total, "free": total}


def _oldest(r: redis.Redis, k: str) -> tuple[str, float] | None:
    got = r.zrange(k, 0, 0, withscores=True)
    return got[0] if got else None


def capacity(settings: dict, rows: list[dict]) -> tuple[dict[str, int], int]:
    """(how many jobs each tier may have running, how many workers are up to run them). Only live
    workers count: a job released while its worker is dead waits in RQ, in release order, out of
    the strategy's reach. Under full separation each tier has only its own fleet's live workers."""
    live = [w for w in rows if w.get("state") in ("idle", "busy")]
    cap = pools(settings)
    if settings["fairness"] == "separate":
        cap = {t: min(cap[t], sum(1 for w in live if w.get("fleet") == t)) for t in TIERS}
    return cap, len(live)


def choose(r: redis.Redis, lab: str, settings: dict, now: float, running: dict[str, int],
           rng: random.Random, cap: dict[str, int] | None = None) -> tuple[str, str, float] | None:
    """The next (tier, member, enqueued_at) a free worker takes under the lab's strategy, with at most
    `cap[tier]` jobs running per tier (the strategy's pools when not given)."""
    cap = pools(settings) if cap is None else cap
    open_tiers = [t for t in TIERS if running.get(t, 0) < cap[t]]
    heads = {t: h for t in open_tiers if (h := _oldest(r, pending_key(lab, t)))}
    if not heads:
        return None
    strategy = settings["fairness"]
    if strategy == "aging" and "free" in heads and now - heads["free"][1] > settings["aging_s"]:
        tier = "free"  # an aged-out free job jumps ahead of ordinary priority
    elif strategy in ("strict", "aging"):
        tier = "pro" if "pro" in heads else "free"
    elif strategy in ("weighted", "round_robin"):
        # the lesson's next_job(): pro first with probability pro_weight, else free, else whichever has work
        if rng.random() < settings["pro_weight"] and "pro" in heads:
            tier = "pro"
        else:
            tier = "free" if "free" in heads else "pro"
        if strategy == "round_robin":
            return _round_robin(r, lab, tier)
    else:  # shared FIFO; split/separate are FIFO inside each walled-off pool
        tier = min(heads, key=lambda t: heads[t][1])
    return tier, heads[tier][0], heads[tier][1]


def _round_robin(r: redis.Redis, lab: str, tier: str) -> tuple[str, str, float] | None:
    """Inside one tier, serve the next customer (sorted by id) after the last one served, that
    customer's oldest job first: one burst customer waits its turn like everyone else."""
    customers = sorted(r.smembers(customers_key(lab, tier)))
    cursor = r.hget(key(lab, "fair", "meta"), f"rr_{tier}") or ""
    start = next((i for i, c in enumerate(customers) if c > cursor), 0)
    for cust in customers[start:] + customers[:start]:
        head = _oldest(r, customer_key(lab, tier, cust))
        if head:
            r.hset(key(lab, "fair", "meta"), f"rr_{tier}", cust)
            return tier, head[0], head[1]
        r.srem(customers_key(lab, tier), cust)  # drained: out of the rotation until it submits again
    return None


def _take(r: redis.Redis, lab: str, tier: str, member: str) -> bool:
    """Remove one job from both of its queues; False if it was not pending (nothing to release)."""
    cust = member.split(":", 1)[1]
    pipe = r.pipeline()
    pipe.zrem(pending_key(lab, tier), member)
    pipe.zrem(customer_key(lab, tier, cust), member)
    return bool(pipe.execute()[0])


def running_counts(r: redis.Redis, lab: str) -> dict[str, int]:
    """Jobs released to RQ and not yet finished, per tier: the in-flight records are the truth, so a
    job whose worker was killed stops counting when the sweep takes its record back."""
    counts = dict.fromkeys(TIERS, 0)
    for raw in r.hvals(inflight_key(lab)):
        counts[json.loads(raw)["tier"]] += 1
    return counts


def generate(r: redis.Redis, lab: str, settings: dict, now: float) -> int:
    """Open-loop traffic at `arrival_rate` (jobs per simulated second), split by `pro_share`;
    a spike doubles one tier's rate until it ends. Poisson counts from a seeded RNG."""
    meta = key(lab, "fair", "meta")
    rate = float(settings["arrival_rate"])
    if rate <= 0:  # off: the next rate starts from its own moment (a lab at rest is not ticked meanwhile)
        r.hdel(meta, "gen_t")
        return 0
    last = r.hget(meta, "gen_t")
    r.hset(meta, "gen_t", now)
    if last is None or now <= float(last):
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
    if time.time() - _swept.get(lab, 0.0) > SWEEP_S:
        _swept[lab] = time.time()
        sweep(r, lab, now)
    running = running_counts(r, lab)
    cap, live = capacity(settings, [json.loads(v) for v in r.hvals(key(lab, "workers"))])
    free_workers = live - sum(running.values())
    sent = 0
    rng = random.Random(f"{lab}:{r.hget(key(lab, 'fair', 'meta'), 'released') or 0}")
    separate = settings["fairness"] == "separate"
    while free_workers > 0:
        pick = choose(r, lab, settings, now, running, rng, cap)
        if pick is None:
            break
        tier, member, enqueued = pick
        if not _take(r, lab, tier, member):
            break
        seq, cust = member.split(":", 1)
        order = r.hincrby(key(lab, "fair", "meta"), "released", 1)
        rq_id = f"{lab}-fair-{seq}-{order}"
        # the record goes first, so a crash between the two leaves a record the sweep can take back
        queue = Queue(tier_queue_name(lab, tier), connection=rq_conn) if separate else reaper.rq_queue(rq_conn, lab)
        r.hset(inflight_key(lab), member, json.dumps({"tier": tier, "enq": enqueued, "rq": rq_id, "q": queue.key,
                                                      "released": time.time()}))
        queue.enqueue_call("workers.engines.fairness.run_job",
                           args=(lab, seq, tier, cust, enqueued, float(settings["fair_job_s"]), order),
                           timeout=-1, result_ttl=0, failure_ttl=300, job_id=rq_id)
        running[tier] += 1
        free_workers -= 1
        sent += 1
    return sent


def sweep(r: redis.Redis, lab: str, now: float) -> int:
    """Put back in its queues (at its original enqueue time, so its wait keeps counting) every released
    job that will never finish: its worker was killed or died (row dead, or the respawned worker moved
    on), its horse failed, or RQ handed it to a worker that died before the horse started it."""
    # The records first, then the rows (run_job writes its row, then its record): a row read before
    # the records could predate a horse that has since started, and its running job would look
    # abandoned by a worker that "moved on".
    records = r.hgetall(inflight_key(lab))
    workers = {w: json.loads(v) for w, v in r.hgetall(key(lab, "workers")).items()}
    back = 0
    for member, raw in records.items():
        rec = json.loads(raw)
        reason = lost_reason(rec, job_label(rec["tier"], member), r.hget(f"rq:job:{rec['rq']}", "status"),
                             workers, lambda rq_id, q=rec["q"]: r.lpos(q, rq_id) is not None)
        if reason and r.hdel(inflight_key(lab), member):  # the finisher HDELs too: only one of us wins
            _enqueue(r, lab, rec["tier"], member.split(":", 1)[1], {member: rec["enq"]})
            r.hincrby(key(lab, "fair", "meta"), f"requeued_{rec['tier']}", 1)
            stream.emit(r, lab, "fairness.requeued", now, worker_id=rec.get("worker") or "?", tier=rec["tier"],
                        customer=member.split(":", 1)[1], reason=reason)
            back += 1
    return back


def lost_reason(rec: dict, label: str, status: str | None, workers: dict[str, dict], waiting) -> str | None:
    """Why a released job will never finish, or None while it still may. `waiting(rq_id)`: is RQ's
    copy still in the queue? A job RQ has taken but no horse has claimed gets START_GRACE_S: on a
    loaded box a fork can take seconds, and taking it back early would only waste the hand-off."""
    if status in ("failed", "stopped", "canceled"):
        return f"its work horse {status}"
    if rec.get("worker"):
        row = workers.get(rec["worker"], {})
        if row.get("state") in (None, "dead", "respawning"):
            return "its worker died"
        if row.get("job_id") != label or status is None:
            return "its worker moved on without finishing it"
        return None
    if time.time() - rec["released"] > START_GRACE_S and not waiting(rec["rq"]):
        return "the worker RQ handed it to never started it"
    return None


def job_label(tier: str, member: str) -> str:
    """How a tier job shows in the widget's worker row (`pro-17`)."""
    return f"{tier}-{member.split(':', 1)[0]}"


_CLAIM = """
local inflight = KEYS[1]
local member, worker = ARGV[1], ARGV[2]
local raw = redis.call('HGET', inflight, member)
if not raw then return nil end
local rec = cjson.decode(raw)
rec['worker'] = worker
redis.call('HSET', inflight, member, cjson.encode(rec))
return 1
"""


def run_job(lab: str, seq: str, tier: str, customer: str, enqueued: float, duration: float,
            order: int = 0) -> None:
    """One tier job in a real work horse: record its wait, hold a worker for `duration` simulated s.
    `order` is the strategy's pick order (start order can differ by a worker's hand-off latency)."""
    from workers.tasks import connection, set_worker, worker_id

    r = connection()
    member = f"{seq}:{customer}"
    # the row first, then the record: the sweep reads the record, then the row, so it never sees a
    # claimed record whose worker row does not show it yet
    set_worker(r, lab, state="busy", job_id=job_label(tier, member), horse_pid=os.getpid())
    try:
        if r.eval(_CLAIM, 1, inflight_key(lab), member, worker_id()) is None:
            return  # taken back by the sweep and queued again: that copy runs, not this one
        if r.sismember(poison_key(lab), member):
            _poison(r, lab, tier, customer, member, worker_id())
            return
        _run(r, lab, tier, customer, member, enqueued, duration, order, worker_id())
    finally:
        set_worker(r, lab, state="idle", job_id=None, horse_pid=None)


def _poison(r: redis.Redis, lab: str, tier: str, customer: str, member: str, wid: str) -> None:
    """Take this worker down with the horse (SIGKILL the RQ worker, then exit), as a job that blows the
    machine's memory would. The sweep puts it back; after POISON_CRASHES it is dead-lettered instead."""
    now = clock.now(r, lab)
    crashes = r.hincrby(key(lab, "fair", "crashes"), member, 1)
    if crashes > POISON_CRASHES:
        if r.hdel(inflight_key(lab), member):
            r.hincrby(key(lab, "fair", "meta"), f"dead_{tier}", 1)
            stream.emit(r, lab, "fairness.dead_lettered", now, worker_id=wid, tier=tier, customer=customer,
                        crashes=crashes - 1)
        return
    r.hincrby(key(lab, "fair", "meta"), f"crashes_{tier}", 1)
    stream.emit(r, lab, "fairness.crashed", now, worker_id=wid, tier=tier, customer=customer, crashes=crashes)
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(1)


def _run(r: redis.Redis, lab: str, tier: str, customer: str, member: str, enqueued: float, duration: float,
         order: int, wid: str) -> None:
    start = clock.now(r, lab)
    wait = max(0.0, start - enqueued)
    seq = int(member.split(":")[0])
    r.rpush(key(lab, "fair", "waits"), json.dumps({"tier": tier, "customer": customer, "wait": round(wait, 3),
                                                   "t": round(start, 3), "seq": seq,
                                                   "order": order, "worker": wid}))
    r.ltrim(key(lab, "fair", "waits"), -WAITS_KEPT, -1)
    stream.emit(r, lab, "fairness.started", start, worker_id=wid, tier=tier, customer=customer,
                wait=round(wait, 1), seq=seq)
    while clock.now(r, lab) - start < duration:
        time.sleep(TICK)
    if r.hdel(inflight_key(lab), member):  # 0: the sweep already gave up on this copy
        r.hincrbyfloat(key(lab, "fair", "used"), tier, duration)
        r.hincrby(key(lab, "fair", "meta"), f"done_{tier}", 1)
        # the end of the run the bill pays for, so the bill can be checked against the time a worker was held
        stream.emit(r, lab, "fairness.finished", clock.now(r, lab), worker_id=wid, tier=tier, customer=customer,
                    seq=seq)


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
        # age of each tier's oldest waiting job: climbs without bound while a tier starves
        "oldest_wait": {t: round(now - head[1], 1) if (head := _oldest(r, pending_key(lab, t))) else None
                        for t in TIERS},
        "running": running_counts(r, lab),
        **{name: {t: int(meta.get(f"{name}_{t}", 0)) for t in TIERS} for name in COUNTERS},
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
    cust_keys = [customer_key(lab, t, c) for t in TIERS for c in r.smembers(customers_key(lab, t))]
    r.delete(*(pending_key(lab, t) for t in TIERS), *(customers_key(lab, t) for t in TIERS), *cust_keys,
             key(lab, "fair", "waits"), key(lab, "fair", "used"), key(lab, "fair", "spike"), poison_key(lab),
             key(lab, "fair", "crashes"))
    r.hdel(key(lab, "fair", "meta"), "t0", *(f"{name}_{t}" for name in COUNTERS for t in TIERS),
           *(f"rr_{t}" for t in TIERS))
