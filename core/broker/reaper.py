"""The reaper: expired leases come back, due retries go out, dead ack-early jobs are counted lost,
and (claim guard) the stale-job sweeper frees records whose holder went silent.

It runs in the pool supervisor every few real milliseconds. Each move is one Lua CAS, so a
lease that a heartbeat extended a moment ago, or a job that just completed, is left alone.
Redeliveries go through a small `dispatch` set before they reach RQ, so a reaper that dies
between the CAS and the enqueue re-sends them on restart instead of losing them.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from rq import Queue

from core import clock, stream
from core.broker import handoff, leases
from core.broker.state import script
from core.keys import key, queue_name
from core.settings import LabSettings

# Keys: leases.keys_for's, then dispatch and the DLQ. real_now: the dispatch score.
# Returns -1 nothing to do, 0 redriven to the DLQ, n the delivery number sent again.
_REDELIVER = """
local record, states, events, counts, message, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7]
local alive, dispatch, dlq = KEYS[8], KEYS[9], KEYS[10]
local job_id, now, max_receives, expired_ev, redelivered_ev = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local dead_ev, dlq_reason, real_now, speed, guard, stale_ev = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local resent_ev = ARGV[12]
local deadline = redis.call('ZSCORE', leases, job_id)
if not deadline or tonumber(deadline) > tonumber(now) then return -1 end
redis.call('ZREM', leases, job_id)
if redis.call('HGET', message, 'state') ~= 'inflight' then return -1 end
local rc = tonumber(redis.call('HGET', message, 'receives'))
local base = tonumber(redis.call('HGET', message, 'base') or '0')
-- a delivery whose run a park stopped (`stopped`): no lease ran out and no receive was spent, so it is sent
-- again, counted as nothing, and its record (held by that run, which nothing runs now) is queued again
if tonumber(redis.call('HGET', message, 'stopped') or '-1') == rc then
  redis.call('HDEL', message, 'stopped')
  redis.call('HSET', message, 'state', 'pending', 'base', base + 1)
  redis.call('ZADD', dispatch, real_now, job_id .. ':' .. (rc + 1))
  local st = redis.call('HGET', record, 'state')
  if st == 'running' and tonumber(redis.call('HGET', record, 'holder') or '0') == rc then
    redis.call('HSET', record, 'state', 'queued')
    redis.call('HDEL', record, 'holder')
    move(states, 'running', 'queued')
    redis.call('ZREM', alive, job_id)
  end
  local rs = cjson.decode(resent_ev)
  rs['attempt'] = rc + 1
  emit(events, counts, cjson.encode(rs), '')
  return rc + 1
end
local ev = cjson.decode(expired_ev)
ev['attempt'] = rc
ev['data']['deadline'] = tonumber(deadline)
emit(events, counts, cjson.encode(ev), 'leases_expired')
-- the record: a heartbeat lease held by the record's holder lapsed, so the holder is presumed dead and
-- (claim guard) its row is freed now rather than after the stale-job sweeper's threshold
local st = redis.call('HGET', record, 'state')
if guard == 'claim' and redis.call('HGET', message, 'hb') == '1' and st == 'running'
   and tonumber(redis.call('HGET', record, 'holder') or '0') == rc then
  redis.call('HSET', record, 'state', 'queued')
  redis.call('HDEL', record, 'holder')
  move(states, 'running', 'queued')
  redis.call('ZREM', alive, job_id)
  local fr = cjson.decode(stale_ev)
  fr['attempt'] = rc
  emit(events, counts, cjson.encode(fr), 'stale_freed')
  st = 'queued'
end
-- the broker's redrive policy: received max_receives times and never deleted
if rc - base >= tonumber(max_receives) then
  redis.call('HSET', message, 'state', 'dlq')
  redis.call('ZADD', dlq, now, job_id)
  if st ~= 'done' and st ~= 'dlq' and st ~= 'lost' then
    redis.call('HSET', record, 'state', 'dlq', 'dlq_reason', dlq_reason)
    move(states, st, 'dlq')
    redis.call('ZREM', alive, job_id)
  end
  local dl = cjson.decode(dead_ev)
  dl['attempt'] = rc
  emit(events, counts, cjson.encode(dl), 'dead_lettered')
  return 0
end
redis.call('HSET', message, 'state', 'pending')
redis.call('ZADD', dispatch, real_now, job_id .. ':' .. (rc + 1))
local rd = cjson.decode(redelivered_ev)
rd['attempt'] = rc + 1
rd['data']['late_ms'] = math.floor((tonumber(now) - tonumber(deadline)) * 1000 / tonumber(speed))
rd['data']['record'] = st
emit(events, counts, cjson.encode(rd), 'redelivered')
return rc + 1
"""

# Keys: leases.keys_for's, then scheduled (delayed messages) and dispatch.
# A delayed message (a retry's wait) becomes visible; the record stays `retrying` until a claim.
_REQUEUE = """
local events, counts, message, scheduled, dispatch = KEYS[3], KEYS[4], KEYS[6], KEYS[9], KEYS[10]
local job_id, now, retry_ev, real_now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local due = redis.call('ZSCORE', scheduled, job_id)
if not due or tonumber(due) > tonumber(now) then return -1 end
redis.call('ZREM', scheduled, job_id)
if redis.call('HGET', message, 'state') ~= 'delayed' then return -1 end
local n = tonumber(redis.call('HGET', message, 'receives') or '0') + 1
redis.call('HSET', message, 'state', 'pending')
redis.call('ZADD', dispatch, real_now, job_id .. ':' .. n)
local ev = cjson.decode(retry_ev)
ev['attempt'] = n
emit(events, counts, cjson.encode(ev), '')
return n
"""

# Keys: leases.keys_for's. A delivery in flight whose run was stopped with its lab (parked, or moved to another host):
# marked `stopped` and its lease brought to `now`, so the next reaper pass (the resume's first) sends it again.
_STOP = """
local message, leases = KEYS[6], KEYS[7]
local job_id, delivery, now = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', message, 'state') ~= 'inflight' then return 0 end
if tonumber(redis.call('HGET', message, 'receives')) ~= tonumber(delivery) then return 0 end
if not redis.call('ZSCORE', leases, job_id) then return 0 end
redis.call('HSET', message, 'stopped', delivery)
redis.call('ZADD', leases, now, job_id)
return 1
"""

# Ack early and the worker died: the message was deleted on receive, so nothing will bring it back.
_LOSE = """
local record, states, events, counts, message, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[8]
local delivery, lost_ev = ARGV[1], ARGV[2]
if redis.call('HGET', record, 'state') ~= 'running' then return 0 end
if tonumber(redis.call('HGET', record, 'holder') or '0') ~= tonumber(delivery) then return 0 end
if redis.call('HGET', message, 'state') ~= 'deleted' then return 0 end
if tonumber(redis.call('HGET', message, 'receives')) ~= tonumber(delivery) then return 0 end
redis.call('HSET', record, 'state', 'lost')
move(states, 'running', 'lost')
redis.call('ZREM', alive, redis.call('HGET', record, 'id'))
emit(events, counts, lost_ev, 'lost')
return 1
"""

# Chapter 7's reprocess_stale_jobs, as a compare-and-swap: only a record STILL running with no sign of
# life since now - stale_after is put back, so two sweeps (or a sweep racing a heartbeat) are harmless.
_SWEEP = """
local record, states, events, counts, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[8]
local job_id, now, stale_after, stale_ev = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('HGET', record, 'state') ~= 'running' then redis.call('ZREM', alive, job_id) return 0 end
local seen = tonumber(redis.call('ZSCORE', alive, job_id) or '0')
if seen > tonumber(now) - tonumber(stale_after) then return 0 end
redis.call('HSET', record, 'state', 'queued')
local ev = cjson.decode(stale_ev)
ev['attempt'] = tonumber(redis.call('HGET', record, 'holder') or '0')
ev['data']['silent_s'] = math.floor((tonumber(now) - seen) * 10 + 0.5) / 10
redis.call('HDEL', record, 'holder')
move(states, 'running', 'queued')
redis.call('ZREM', alive, job_id)
emit(events, counts, cjson.encode(ev), 'stale_freed')
return 1
"""


def rq_queue(rq_conn: redis.Redis, lab: str) -> Queue:
    return Queue(queue_name(lab), connection=rq_conn)


def send(rq_conn: redis.Redis, lab: str, job_id: str, attempt: int) -> None:
    """Put one delivery of one attempt on the lab's RQ queue for a real worker to pick up."""
    rq_id = f"{lab}-{job_id}-{attempt}-{time.time_ns() % 10**9}"
    with rq_conn.pipeline() as pipe:  # the hand-off's note and RQ's enqueue in one MULTI (RQ queues into it)
        pipe.multi()
        handoff.record(pipe, lab, job_id, attempt, rq_id)
        rq_queue(rq_conn, lab).enqueue_call(
            "workers.tasks.run_attempt",
            args=(lab, job_id, attempt),
            timeout=-1,
            result_ttl=0,
            failure_ttl=300,
            job_id=rq_id,
            pipeline=pipe,
        )
        pipe.execute()


def resend_lost_handoffs(r: redis.Redis, rq_conn: redis.Redis, lab: str, now: float) -> int:
    """Deliveries taken by a worker that died before claiming them go out again (see handoff.py)."""
    return handoff.sweep(r, rq_conn, lab, rq_queue(rq_conn, lab).key, now, send)


def dispatch(r: redis.Redis, rq_conn: redis.Redis, lab: str, older_than: float | None = None) -> int:
    """Send pending deliveries to RQ, then forget them (at-least-once: a second copy of one delivery
    finds the message already received and is dropped)."""
    k = key(lab, "dispatch")
    limit = "+inf" if older_than is None else older_than
    sent = 0
    for member in r.zrangebyscore(k, "-inf", limit):
        job_id, _, attempt = member.rpartition(":")
        send(rq_conn, lab, job_id, int(attempt))
        r.zrem(k, member)
        sent += 1
    return sent


def redeliver_expired(
    r: redis.Redis,
    lab: str,
    now: float,
    settings: LabSettings,
    speed: float,
    upto: float | None = None,
    clock_state: dict | None = None,
) -> int:
    """Every lease whose deadline passed (up to `upto`, default now): the message visible again, or
    redriven to the DLQ. `clock_state`: the clock hash `now` was read from, when the caller has it."""
    n = 0
    mr = settings["max_receives"]
    upto = now if upto is None else upto
    expired_leases = r.zrangebyscore(key(lab, "leases"), "-inf", upto, withscores=True)
    if clock_state is None:
        clock_state = r.hgetall(key(lab, "clock")) if expired_leases else {}
    for job_id, deadline in expired_leases:
        # in real time, how long after the lab's clock reached the deadline this scan acted (the clock
        # itself waits at the reaper's barrier, so in simulated time a redelivery is never late)
        reached = clock.reached_at(clock_state, deadline)
        real_lag: dict[str, Any] = {} if reached is None else {"late_real_ms": round((time.time() - reached) * 1000, 2)}
        expired = stream.encode("lease.expired", now, job_id=job_id)
        redelivered = stream.encode("job.redelivered", now, job_id=job_id, **real_lag)
        dead = stream.encode(
            "job.dead_lettered",
            now,
            job_id=job_id,
            reason=f"max receives ({mr}) exceeded: received {mr} times, never deleted",
        )
        freed = stream.encode(
            "job.stale_freed", now, job_id=job_id, reason="its holder's heartbeat lapsed: presumed dead"
        )
        resent = stream.encode("job.resumed", now, job_id=job_id)
        res = script(r, _REDELIVER)(
            keys=leases.keys_for(lab, job_id, key(lab, "dispatch"), key(lab, "dlq")),
            args=[
                job_id,
                upto,
                mr,
                expired,
                redelivered,
                dead,
                f"max receives ({mr}) exceeded: the lease expired every time",
                time.time(),
                max(speed, 1e-9),
                settings["guard"],
                freed,
                resent,
            ],
        )
        n += res >= 0
        if res > 0:
            handoff.hold_for_transit(r, lab, job_id, res, now)
    return n


def start_due_retries(r: redis.Redis, lab: str, now: float, upto: float | None = None) -> int:
    n = 0
    upto = now if upto is None else upto
    for job_id in r.zrangebyscore(key(lab, "scheduled"), "-inf", upto):
        ev = stream.encode("job.retry_started", now, job_id=job_id)
        res = script(r, _REQUEUE)(
            keys=leases.keys_for(lab, job_id, key(lab, "scheduled"), key(lab, "dispatch")),
            args=[job_id, upto, ev, time.time()],
        )
        n += res > 0
        if res > 0:
            handoff.hold_for_transit(r, lab, job_id, res, now)
        clock.lift(r, lab, handoff.due_holder(job_id))  # back in the queue (or gone): the due barrier is done
    return n


def sweep_stale(r: redis.Redis, lab: str, now: float, settings: LabSettings) -> int:
    """The stale-job sweeper (claim guard): free records running with no sign of life for stale_after."""
    stale = settings.get("stale_after", 0)
    if settings["guard"] != "claim" or not stale:
        return 0
    n = 0
    for job_id in r.zrangebyscore(key(lab, "alive"), "-inf", now - stale):
        ev = stream.encode(
            "job.stale_freed",
            now,
            job_id=job_id,
            reason=f"the stale-job sweeper: running with no sign of life for {stale:g}s",
        )
        n += script(r, _SWEEP)(keys=leases.keys_for(lab, job_id), args=[job_id, now, stale, ev])
    return n


def mark_stopped(r: redis.Redis, lab: str, job_id: str, attempt: int, now: float) -> bool:
    """An ack-late delivery whose run was stopped with its lab (parked or moved, not killed: workers/pool.py
    let_go) is sent again at the lab's next reaper pass, as `job.resumed`: no lease ran out and the job did not
    run twice, so it counts as no redelivery, no expired lease and no receive (max receives). False if the
    delivery was not in flight (ack early: `mark_lost`; or already ended)."""
    return bool(script(r, _STOP)(keys=leases.keys_for(lab, job_id), args=[job_id, attempt, now]))


def mark_lost(r: redis.Redis, lab: str, job_id: str, attempt: int, worker_id: str, now: float) -> bool:
    """An ack-early job whose worker died: nothing will redeliver it, so the lab counts it lost."""
    ev = stream.encode("job.lost", now, job_id=job_id, worker_id=worker_id, attempt=attempt)
    return bool(script(r, _LOSE)(keys=leases.keys_for(lab, job_id), args=[attempt, ev]))
