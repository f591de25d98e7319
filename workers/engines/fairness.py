"""Fairness between tiers (chapter 6): per-tier queues and the policy a free worker polls them by.

Jobs wait in the lab's broker queues (one sorted set per tier, scored by enqueue time) and are
released to the lab's RQ queue only when a real worker is free, so the *strategy* decides which
job a freed worker gets next — the application-layer priority the lesson says SQS forces on you.
Each released job is a paced RQ job on the lab clock (no ffmpeg: the chapter needs hundreds of
short jobs on two cores); its wait is measured when a worker actually starts it.

Full separation is more than a count: its pro and free workers are different processes on different
RQ queues, so a free poison job that takes its worker down can only take down free workers. Under a
hard split the wall is a count over one fleet, and the same storm kills the workers pro runs on too.
The face both processes share (state keys, readers, commands) is core/engines/fairness.py.
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
from core.broker import reaper
from core.broker.handoff import HANDOFF_S
from core.config import Config
from core.engines.fairness import (
    POISON_CRASHES,
    RELEASE,
    SPIKE_FACTOR,
    TIERS,
    customer_key,
    customers_key,
    enqueue,
    inflight_key,
    oldest,
    pending_key,
    poison_key,
    pools,
    record_count,
    record_end,
    record_start,
    run_holder,
    running_counts,
    submit,
)
from core.keys import key, queue_name

TICK = 0.02
REFRESH_S = 2.0  # real seconds between refreshes of a running job's barrier (it lapses after clock.BARRIER_TTL)
START_GRACE_S = 30.0  # real seconds a job RQ has taken may wait for its horse to claim it
SWEEP_S = 0.5  # real seconds between sweeps for released jobs that will never finish
_swept: dict[str, float] = {}  # lab → real time of its last sweep (the supervisor's process only)


def fleet_of(settings: dict, rank: int) -> str | None:
    """The tier the `rank`-th worker (0-based, by id) serves only, under full separation; else None."""
    if settings.get("fairness") != "separate":
        return None
    return "pro" if rank < min(int(settings["pro_workers"]), int(settings["workers"])) else "free"


def tier_queue_name(lab: str, tier: str) -> str:
    """A separate fleet's own RQ queue (its workers listen to it before the lab's ordinary queue)."""
    return f"{queue_name(lab)}-{tier}"


def capacity(settings: dict, rows: list[dict]) -> tuple[dict[str, int], int]:
    """(how many jobs each tier may have running, how many workers are up to run them). Only live
    workers count: a job released while its worker is dead waits in RQ, in release order, out of
    the strategy's reach. Under full separation each tier has only its own fleet's live workers."""
    live = [w for w in rows if w.get("state") in ("idle", "busy")]
    cap = pools(settings)
    if settings["fairness"] == "separate":
        cap = {t: min(cap[t], sum(1 for w in live if w.get("fleet") == t)) for t in TIERS}
    return cap, len(live)


def choose(
    r: redis.Redis,
    lab: str,
    settings: dict,
    now: float,
    running: dict[str, int],
    rng: random.Random,
    cap: dict[str, int] | None = None,
) -> tuple[str, str, float] | None:
    """The next (tier, member, enqueued_at) a free worker takes under the lab's strategy, with at most
    `cap[tier]` jobs running per tier (the strategy's pools when not given)."""
    cap = pools(settings) if cap is None else cap
    open_tiers = [t for t in TIERS if running.get(t, 0) < cap[t]]
    heads = {t: h for t in open_tiers if (h := oldest(r, pending_key(lab, t)))}
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
        head = oldest(r, customer_key(lab, tier, cust))
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
    """Release jobs to RQ while workers are free; called from the supervisor's broker loop.

    The hand-offs hold the clock, as a job's delivery does (core/broker/handoff.py): jobs queued for free
    workers held it at their submit, and a job that ended while others waited at its end (RELEASE); each
    released job holds it at this pass's moment until its horse starts it (`run_holder`), and RELEASE goes
    in the same step as the first of those. A late pass or a slow fork costs real time, never a job's wait."""
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
        r.hset(
            inflight_key(lab),
            member,
            json.dumps({"tier": tier, "enq": enqueued, "rq": rq_id, "q": queue.key, "released": time.time()}),
        )
        # held before RQ has it (the horse moves this barrier to the job's end) and, the first time, in the
        # same step as RELEASE goes: the clock does not run between the pass's picks and the horse's start
        clock.hold(r, lab, run_holder(member), now, ttl=HANDOFF_S, also_lift="" if sent else RELEASE)
        queue.enqueue_call(
            "workers.engines.fairness.run_job",
            args=(lab, seq, tier, cust, enqueued, float(settings["fair_job_s"]), order),
            timeout=-1,
            result_ttl=0,
            failure_ttl=300,
            job_id=rq_id,
        )
        running[tier] += 1
        free_workers -= 1
        sent += 1
    if not sent:
        clock.lift(r, lab, RELEASE)
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
        reason = lost_reason(
            rec,
            job_label(rec["tier"], member),
            r.hget(f"rq:job:{rec['rq']}", "status"),
            workers,
            lambda rq_id, q=rec["q"]: r.lpos(q, rq_id) is not None,
        )
        if reason and r.hdel(inflight_key(lab), member):  # the finisher HDELs too: only one of us wins
            enqueue(r, lab, rec["tier"], member.split(":", 1)[1], {member: rec["enq"]})
            record_count(r, lab, member, "requeued", rec["tier"])
            stream.emit(
                r,
                lab,
                "fairness.requeued",
                now,
                worker_id=rec.get("worker") or "?",
                tier=rec["tier"],
                customer=member.split(":", 1)[1],
                reason=reason,
            )
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


def run_job(lab: str, seq: str, tier: str, customer: str, enqueued: float, duration: float, order: int = 0) -> None:
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
            record_count(r, lab, member, "dead", tier)
            stream.emit(
                r, lab, "fairness.dead_lettered", now, worker_id=wid, tier=tier, customer=customer, crashes=crashes - 1
            )
        clock.lift(r, lab, run_holder(member))
        return
    record_count(r, lab, member, "crashes", tier)
    stream.emit(r, lab, "fairness.crashed", now, worker_id=wid, tier=tier, customer=customer, crashes=crashes)
    clock.lift(r, lab, run_holder(member))  # the clock does not wait for a worker about to die
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(1)


def _run(
    r: redis.Redis,
    lab: str,
    tier: str,
    customer: str,
    member: str,
    enqueued: float,
    duration: float,
    order: int,
    wid: str,
) -> None:
    """Start at the moment the clock was held at for this hand-off (`run_holder`, placed by the release), move
    that barrier to the job's end, and end there: a slow fork or a slow poll of the clock costs no simulated
    time. If jobs wait, the clock is held at the end (RELEASE) until the supervisor has released the next."""
    holder = run_holder(member)
    start = clock.now(r, lab)
    clock.hold(r, lab, holder, start + duration)
    wait = max(0.0, start - enqueued)
    seq = int(member.split(":")[0])
    row = {"tier": tier, "customer": customer, "wait": round(wait, 3), "t": round(start, 3), "seq": seq}
    record_start(r, lab, seq, {**row, "order": order, "worker": wid})  # not if queued before the last reset
    stream.emit(
        r, lab, "fairness.started", start, worker_id=wid, tier=tier, customer=customer, wait=round(wait, 1), seq=seq
    )
    fresh_at = time.monotonic()
    while (now := clock.now(r, lab)) - start < duration:
        if time.monotonic() - fresh_at > REFRESH_S:
            fresh_at = time.monotonic()
            if not clock.refresh(r, lab, holder):  # swept while this horse stalled: placed again
                clock.hold(r, lab, holder, start + duration)
        time.sleep(TICK)
    if r.hdel(inflight_key(lab), member):  # 0: the sweep already gave up on this copy
        record_end(r, lab, seq, tier, duration)
        # the end of the run the bill pays for, so the bill can be checked against the time a worker was held
        stream.emit(r, lab, "fairness.finished", now, worker_id=wid, tier=tier, customer=customer, seq=seq)
    with r.pipeline(transaction=False) as pipe:
        for t in TIERS:
            pipe.zcard(pending_key(lab, t))
        waiting = any(pipe.execute())
    if waiting:  # the freed worker's next job is released by the supervisor's next pass: the clock waits for it
        clock.hold(r, lab, RELEASE, now, ttl=HANDOFF_S, also_lift=holder)
    else:
        clock.lift(r, lab, holder)


class Releaser:
    """Chapter 6's traffic in the supervisor's pass (the `Engine` protocol): quiet, neither read nor ticked,
    while none arrives, waits or runs, until a tier's queue changes."""

    name = "fairness"
    wakes = tuple(f"fair:pending:{t}" for t in TIERS)  # each tier's queue (pending_key, after lab:<id>:)
    holder = None

    def start(self, config: Config) -> None:
        """Nothing runs beside the pass."""

    def read(self, pipe: redis.client.Pipeline, lab: str) -> int:
        pipe.hlen(inflight_key(lab))
        for tier in TIERS:
            pipe.zcard(pending_key(lab, tier))
        return 1 + len(TIERS)

    def busy(self, settings: dict, gauges: list) -> bool:
        return any(gauges) or float(settings.get("arrival_rate", 0)) > 0

    def tick(
        self, r: redis.Redis, rq: redis.Redis, lab: str, settings: dict, state: dict, config: Config, quiet: bool
    ) -> int:
        if not state["paused"] and (float(settings["arrival_rate"]) > 0 or not quiet):
            tick(r, rq, lab, settings, state["t_raw"])
        return 0


ENGINE = Releaser()
