"""Hand-offs: a delivery RQ gave to a worker that died before it claimed the job.

A lease starts at claim, so between RQ moving the message to a worker (BLMOVE into RQ's
intermediate list) and that worker's `leases.claim` the job has no lease for the reaper to
expire; a worker killed in that window took the only copy with it, and the job sat 'queued'
forever. Every send is therefore recorded here first. A delivery whose message is still `pending`
(visible, not yet received as that delivery number) after HANDOFF_S real seconds, and which is no
longer waiting in RQ's queue, was taken by a worker that never received it: the same delivery is
sent again. Sending twice is safe, because receive is a compare-and-swap on (message pending,
receive count + 1 = delivery): whichever copy receives first runs, the other is stale and returns.
"""

from __future__ import annotations

import json
import time

import redis

from core import clock, stream
from core.broker.state import MERGE_ROW_FN, script
from core.config import REAPER_BARRIER_S
from core.keys import key, msg, queue_name

HANDOFF_S = 5.0  # real seconds a taken message may stay unclaimed (a horse claims within milliseconds)
_TRANSIT_PREFIX = "transit:"  # the barrier of a delivery on its way (transit_holder)


def hold_for_transit(r: redis.Redis, lab: str, job_id: str, n: int, now: float = 0.0) -> float | None:
    """A delivery on its way to an idle worker takes no simulated time: the clock waits until the worker
    receives it (the receive lifts this barrier), so RQ's real pick-up latency (a fork, a few round trips:
    tens of simulated seconds at 200×, more on a busy host) does not shift the lesson's timeline. Only as
    many deliveries as there are idle workers are waited for; the others wait in the queue on the
    simulated clock, as they should. A delivery whose worker never receives it (killed in the hand-off)
    stops holding the clock after HANDOFF_S real seconds, when `sweep` sends it again (held again).
    The barrier goes at `now`, or at the clock's present moment if that is later (0: wherever it is).

    A barrier for a delivery no worker is free to take would hold the clock until it lapses (the running jobs
    cannot finish past it, so none frees up to take it): HANDOFF_S real seconds of standstill. So the idle
    workers are counted and the barrier placed in one step (`_TRANSIT`): two producers that look at once cannot
    both take the same idle worker.

    Returns the lab's simulated time at that step (what `clock.now` would read just after; None if the lab's
    clock is gone), so the producer need not read the clock again."""
    keys, args = clock.barrier_call(lab, "hold", transit_holder(job_id, n), now, ttl=HANDOFF_S)
    _, at = script(r, _TRANSIT)(keys=[key(lab, "workers"), *keys], args=[_TRANSIT_PREFIX, *args])
    return float(at) if at else None


# The barrier's keys and change (a hold) as clock.barrier_call gives them.
# Holds only while some idle worker has no delivery on its way to it: idle rows minus transit barriers.
# Returns {held (1/0), the lab's simulated time at real_now as a string (false: no clock)}.
_TRANSIT = (
    clock.BARRIER_FN
    + """
local workers, clock_key, barriers, barrier_alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local transit_prefix, op, holder, at, real_now, alive_until = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local refresh, also = ARGV[7], ARGV[8]
local free = 0
for _, raw in ipairs(redis.call('HVALS', workers)) do
  if cjson.decode(raw)['state'] == 'idle' then free = free + 1 end
end
for _, h in ipairs(redis.call('ZRANGE', barriers, 0, -1)) do
  if string.sub(h, 1, #transit_prefix) == transit_prefix then free = free - 1 end
end
local held, now = 0, nil
if free > 0 then
  held, now = barrier(clock_key, barriers, barrier_alive, op, holder, at, real_now, alive_until, refresh, also)
else
  local st = clock_state(clock_key)
  if next(st) ~= nil then now = clock_now(st, tonumber(real_now)) end
end
return {held, now and string.format('%.17g', now) or false}
"""
)


def received(
    r: redis.Redis,
    lab: str,
    job_id: str,
    n: int,
    holder: str = "",
    at: float = 0.0,
    row: dict | None = None,
    wid: str = "",
) -> None:
    """Delivery n has reached its worker: the hand-off is over, so its barrier goes. A delivery that went
    ahead of the one a barrier was placed for (two producers' sends crossing on the way to RQ's queue)
    takes that barrier instead: the other is queued behind a busy worker now, and holding the clock for it
    would stop the very jobs it waits for. With `holder`, the attempt's own barrier is held at `at` in the
    same step (the clock never runs between the two), and with `row` the worker's row (`wid`) takes those
    fields there too (state.merge_worker_row, as its own process writes it)."""
    mine = transit_holder(job_id, n)
    if holder:  # the choice made in the hold's own step: no read of the barriers first
        keys, args = clock.barrier_call(lab, "hold", holder, at, also_lift=clock.either(mine))
        if row:
            script(r, _ROW_THEN_BARRIER)(keys=[*keys, key(lab, "workers")], args=[*args, wid, json.dumps(row)])
        else:
            clock.apply(r, (keys, args))
        return
    transit = [h for h in clock.holders(r, lab) if h.startswith(_TRANSIT_PREFIX)]
    if transit:
        clock.lift(r, lab, mine if mine in transit else transit[0])


# KEYS: clock.barrier_call's, then the lab's worker rows. ARGV: barrier_call's, then the worker's id and the
# fields its row takes (JSON).
_ROW_THEN_BARRIER = (
    clock.BARRIER_FN
    + MERGE_ROW_FN
    + """
local clock_key, barriers, barrier_alive, rows = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, holder, at, real_now, alive_until, refresh = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local also, wid, fields = ARGV[7], ARGV[8], ARGV[9]
merge_row(rows, wid, fields, '0')
return barrier(clock_key, barriers, barrier_alive, op, holder, at, real_now, alive_until, refresh, also)
"""
)


def hold_for_next(r: redis.Redis, lab: str, now: float, holder: str, row: dict | None = None, wid: str = "") -> None:
    """A worker that finishes while jobs wait takes the next one only after a real hand-off (its horse
    exits, RQ dequeues, forks a new horse): the clock waits for that delivery as it does for one sent to an
    idle worker, so a queued job's wait is the simulated time the jobs ahead of it took, not that plus
    speed × the hand-off. The finishing attempt's own barrier (`holder`) goes in the same step, so no
    simulated time slips between the two, and with `row` the worker's row (`wid`) takes those fields there too
    (state.merge_worker_row, as its own process writes it): one round trip, however the queue stands."""
    real = time.time()
    script(r, _NEXT)(
        keys=[f"rq:queue:{queue_name(lab)}", *clock.barrier_keys(lab), key(lab, "workers")],
        args=[lab, holder, repr(now), repr(real), repr(real + HANDOFF_S), wid, json.dumps(row) if row else ""],
    )


# KEYS: RQ's queue of the lab; the clock's hash, barriers and their stamps (clock.barrier_call); the worker rows.
# ARGV: the lab, the finishing holder, now (simulated), now (real), when the hand-off's barrier lapses (real), the
# worker's id and its row's new fields ('' for none). The queue's head is a delivery the producer or the reaper
# sent (lab-job-n-ns, reaper.send): the clock waits for it; anything else (none, RQ's own) lifts the holder's.
_NEXT = (
    clock.BARRIER_FN
    + MERGE_ROW_FN
    + f"""
local queue, clock_key, barriers, barrier_alive, rows = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lab, holder, now, real_now, alive_until = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local wid, fields = ARGV[6], ARGV[7]
if fields ~= '' then merge_row(rows, wid, fields, '0') end
local head = redis.call('LINDEX', queue, 0)
local owner, job_id, n
if head then owner, job_id, n = string.match(head, '^([^-]*)-([^-]*)-(%d+)-[^-]*$') end
if owner == lab then
  local next_holder = '{_TRANSIT_PREFIX}' .. job_id .. ':' .. string.format('%d', tonumber(n))
  barrier(clock_key, barriers, barrier_alive, 'hold', next_holder, now, real_now, alive_until, '1', holder)
else
  barrier(clock_key, barriers, barrier_alive, 'lift', holder, '0', real_now, alive_until, '1', '')
end
return 1
"""
)


def hold_until_due(r: redis.Redis, lab: str, job_id: str, due: float, now: float) -> None:
    """A retry scheduled for `due` holds the clock there until the supervisor has put it back in the queue
    (reaper.start_due_retries lifts it). The failing attempt places it while its own barrier still holds the
    clock, so simulated time cannot pass the due moment before the supervisor has acted, however late its
    next pass (the reaper's own barrier is placed only on that pass: a 10 s delay at 200× is 50 ms of real
    time). It lapses, as the reaper's does, REAPER_BARRIER_S real seconds after the clock would get there."""
    speed = max(clock.read(r, lab)["speed"], 1e-9)
    clock.hold(r, lab, due_holder(job_id), due, ttl=max(0.0, due - now) / speed + REAPER_BARRIER_S)


def due_holder(job_id: str) -> str:
    return f"due:{job_id}"


def transit_holder(job_id: str, n: int) -> str:
    return f"{_TRANSIT_PREFIX}{job_id}:{n}"


def note_of(job_id: str, attempt: int, rq_id: str) -> str:
    """A delivery's hand-off note: what `record` notes, and the receive takes away (core/broker/leases.py)."""
    return f"{job_id}:{attempt}:{rq_id}"


def record(rq_conn: redis.Redis | redis.client.Pipeline, lab: str, job_id: str, attempt: int, rq_id: str) -> None:
    """Note a delivery with its enqueue (in its MULTI: core/broker/reaper.py send), so neither is ever
    without the other. Its receive takes the note away; one still here HANDOFF_S later was lost (`sweep`)."""
    rq_conn.zadd(key(lab, "handoffs"), {note_of(job_id, attempt, rq_id): time.time()})


def sweep(r: redis.Redis, rq_conn: redis.Redis, lab: str, rq_queue_key: str, now: float, resend) -> int:
    """Forget hand-offs whose delivery moved on, re-check waiting ones later, re-send lost ones (a received
    delivery took its note away itself). Returns the re-sends."""
    k = key(lab, "handoffs")
    resent = 0
    for member in r.zrangebyscore(k, "-inf", time.time() - HANDOFF_S, start=0, num=500):
        job_id, attempt, rq_id = member.split(":", 2)
        state, receives = r.hmget(msg(lab, job_id), "state", "receives")
        if state != "pending" or int(receives or 0) + 1 != int(attempt):
            r.zrem(k, member)  # claimed (or moved on): the hand-off is over
        elif r.lpos(rq_queue_key, rq_id) is not None:
            r.zadd(k, {member: time.time()}, xx=True)  # still waiting its turn in RQ's queue
        elif r.zrem(k, member):
            stream.emit(r, lab, "job.resent", now, job_id=job_id, attempt=int(attempt))
            resend(rq_conn, lab, job_id, int(attempt))
            resent += 1
    return resent
