"""The reaper: expired leases come back, due retries go out, dead ack-early jobs are counted lost.

It runs in the pool supervisor every few real milliseconds. Each move is one Lua CAS, so a
lease that a heartbeat extended a moment ago, or a job that just completed, is left alone.
Redeliveries go through a small `dispatch` set before they reach RQ, so a reaper that dies
between the CAS and the enqueue re-sends them on restart instead of losing them.
"""

from __future__ import annotations

import time

import redis
from rq import Queue

from core import stream
from core.keys import key, queue_name
from workers.broker import handoff
from workers.broker.state import lab_keys, script

_REDELIVER = """
local deadline = redis.call('ZSCORE', KEYS[6], ARGV[1])
if not deadline or tonumber(deadline) > tonumber(ARGV[2]) then return -1 end
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then
  redis.call('ZREM', KEYS[6], ARGV[1]) return -1
end
local att = tonumber(redis.call('HGET', KEYS[1], 'attempt'))
local base = tonumber(redis.call('HGET', KEYS[1], 'attempt_base') or '0')
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('HDEL', KEYS[1], 'lease_deadline')
local ev = cjson.decode(ARGV[4])
ev['attempt'] = att
ev['data']['deadline'] = tonumber(deadline)
emit(KEYS[3], KEYS[4], cjson.encode(ev), 'leases_expired')
if att - base >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'state', 'dlq', 'dlq_reason', ARGV[7])
  move(KEYS[2], 'running', 'dlq')
  redis.call('ZADD', KEYS[8], ARGV[2], ARGV[1])
  local dl = cjson.decode(ARGV[6])
  dl['attempt'] = att
  emit(KEYS[3], KEYS[4], cjson.encode(dl), 'dead_lettered')
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', att + 1)
move(KEYS[2], 'running', 'queued')
redis.call('ZADD', KEYS[7], ARGV[8], ARGV[1] .. ':' .. (att + 1))
local rd = cjson.decode(ARGV[5])
rd['attempt'] = att + 1
rd['data']['late_ms'] = math.floor((tonumber(ARGV[2]) - tonumber(deadline)) * 1000 / tonumber(ARGV[9]))
emit(KEYS[3], KEYS[4], cjson.encode(rd), 'redelivered')
return att + 1
"""

_REQUEUE = """
local due = redis.call('ZSCORE', KEYS[6], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[2]) then return -1 end
redis.call('ZREM', KEYS[6], ARGV[1])
if redis.call('HGET', KEYS[1], 'state') ~= 'retrying' then return -1 end
local att = tonumber(redis.call('HGET', KEYS[1], 'attempt')) + 1
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', att)
move(KEYS[2], 'retrying', 'queued')
redis.call('ZADD', KEYS[7], ARGV[4], ARGV[1] .. ':' .. att)
local ev = cjson.decode(ARGV[3])
ev['attempt'] = att
emit(KEYS[3], KEYS[4], cjson.encode(ev), '')
return att
"""

_LOSE = """
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'attempt')) ~= tonumber(ARGV[1]) then return 0 end
if redis.call('HGET', KEYS[1], 'lease_deadline') then return 0 end
redis.call('HSET', KEYS[1], 'state', 'lost')
move(KEYS[2], 'running', 'lost')
emit(KEYS[3], KEYS[4], ARGV[2], 'lost')
return 1
"""


def rq_queue(rq_conn: redis.Redis, lab: str) -> Queue:
    return Queue(queue_name(lab), connection=rq_conn)


def send(rq_conn: redis.Redis, lab: str, job_id: str, attempt: int) -> None:
    """Put one delivery of one attempt on the lab's RQ queue for a real worker to pick up."""
    rq_id = f"{lab}-{job_id}-{attempt}-{time.time_ns() % 10**9}"
    handoff.record(rq_conn, lab, job_id, attempt, rq_id)
    rq_queue(rq_conn, lab).enqueue_call(
        "workers.tasks.run_attempt", args=(lab, job_id, attempt), timeout=-1, result_ttl=0,
        failure_ttl=300, job_id=rq_id)


def resend_lost_handoffs(r: redis.Redis, rq_conn: redis.Redis, lab: str, now: float) -> int:
    """Deliveries taken by a worker that died before claiming them go out again (see handoff.py)."""
    return handoff.sweep(r, rq_conn, lab, rq_queue(rq_conn, lab).key, now, send)


def dispatch(r: redis.Redis, rq_conn: redis.Redis, lab: str, older_than: float | None = None) -> int:
    """Send pending deliveries to RQ, then forget them (at-least-once: a duplicate claim is refused)."""
    k = key(lab, "dispatch")
    limit = "+inf" if older_than is None else older_than
    sent = 0
    for member in r.zrangebyscore(k, "-inf", limit):
        job_id, _, attempt = member.rpartition(":")
        send(rq_conn, lab, job_id, int(attempt))
        r.zrem(k, member)
        sent += 1
    return sent


def redeliver_expired(r: redis.Redis, lab: str, now: float, settings: dict, speed: float) -> int:
    """Every lease whose deadline passed: visible again as attempt + 1, or DLQ at max_attempts."""
    n = 0
    for job_id in r.zrangebyscore(key(lab, "leases"), "-inf", now):
        expired = stream.encode("lease.expired", now, job_id=job_id)
        redelivered = stream.encode("job.redelivered", now, job_id=job_id)
        dead = stream.encode("job.dead_lettered", now, job_id=job_id,
                             reason=f"lease expired on attempt {settings['max_attempts']} of "
                                    f"{settings['max_attempts']} (max receives)")
        res = script(r, _REDELIVER)(
            keys=lab_keys(lab, job_id, key(lab, "leases"), key(lab, "dispatch"), key(lab, "dlq")),
            args=[job_id, now, settings["max_attempts"], expired, redelivered, dead,
                  f"max receives ({settings['max_attempts']}) exceeded: lease expired every time",
                  time.time(), max(speed, 1e-9)])
        n += res >= 0
    return n


def start_due_retries(r: redis.Redis, lab: str, now: float) -> int:
    n = 0
    for job_id in r.zrangebyscore(key(lab, "scheduled"), "-inf", now):
        ev = stream.encode("job.retry_started", now, job_id=job_id)
        res = script(r, _REQUEUE)(keys=lab_keys(lab, job_id, key(lab, "scheduled"),
                                                key(lab, "dispatch")),
                                  args=[job_id, now, ev, time.time()])
        n += res > 0
    return n


def mark_lost(r: redis.Redis, lab: str, job_id: str, attempt: int, worker_id: str, now: float) -> bool:
    """An ack-early job whose worker died: nothing will redeliver it, so the lab counts it lost."""
    ev = stream.encode("job.lost", now, job_id=job_id, worker_id=worker_id, attempt=attempt)
    return bool(script(r, _LOSE)(keys=lab_keys(lab, job_id), args=[attempt, ev]))
