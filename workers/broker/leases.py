"""Leases: a claimed message is invisible until `now + vt_seconds`, unless acked or extended.

The lease is what turns RQ's at-most-once default into at-least-once: if the worker dies, the
lease simply runs out and the reaper makes the message visible again. With `ack_mode=early`
there is no lease at all — the message was deleted on claim, so a crash loses the job.
"""

from __future__ import annotations

import json

import redis

from core import stream
from core.keys import key
from workers.broker.state import lab_keys, script

_CLAIM = """
local st = redis.call('HGET', KEYS[1], 'state')
local att = tonumber(redis.call('HGET', KEYS[1], 'attempt'))
if st ~= 'queued' or att ~= tonumber(ARGV[1]) then
  if st then
    local ev = cjson.decode(ARGV[7])
    ev['data']['state'] = st
    ev['data']['current_attempt'] = att
    emit(KEYS[3], KEYS[4], cjson.encode(ev), 'claims_refused')
  end
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'running', 'worker', ARGV[2])
move(KEYS[2], 'queued', 'running')
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[6], ARGV[3], ARGV[6])
  redis.call('HSET', KEYS[1], 'lease_deadline', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'lease_deadline')
end
redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
emit(KEYS[3], KEYS[4], ARGV[4], '')
return 1
"""

_EXTEND = """
local att = tonumber(redis.call('HGET', KEYS[1], 'attempt'))
if redis.call('HGET', KEYS[1], 'state') ~= 'running' or att ~= tonumber(ARGV[1]) then return 0 end
if not redis.call('ZSCORE', KEYS[6], ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[6], 'XX', ARGV[2], ARGV[4])
redis.call('HSET', KEYS[1], 'lease_deadline', ARGV[2])
emit(KEYS[3], KEYS[4], ARGV[3], 'leases_extended')
return 1
"""


def claim(r: redis.Redis, lab: str, job_id: str, attempt: int, worker_id: str, now: float,
          vt: float, ack_mode: str, pid: int) -> bool:
    """Take the message for this attempt; False if it is stale (the job has moved on).

    A stale claim is refused inside the same CAS and narrated (`job.claim_refused`, with the state it
    found), so a late redelivery of a finished job shows up as the refused done → running transition.
    """
    deadline = "" if ack_mode == "early" else repr(now + vt)
    ev = stream.encode("job.claimed", now, job_id=job_id, worker_id=worker_id, attempt=attempt,
                       ack_mode=ack_mode, lease_deadline=None if ack_mode == "early" else now + vt)
    rec = json.dumps({"attempt": attempt, "worker": worker_id, "pid": pid, "start": round(now, 3),
                      "outcome": "running", "ack_mode": ack_mode})
    refused = stream.encode("job.claim_refused", now, job_id=job_id, worker_id=worker_id, attempt=attempt)
    return bool(script(r, _CLAIM)(keys=lab_keys(lab, job_id, key(lab, "leases")),
                                  args=[attempt, worker_id, deadline, ev, rec, job_id, refused]))


def extend_lease(r: redis.Redis, lab: str, job_id: str, attempt: int, worker_id: str, now: float,
                 extend: float) -> bool:
    """Heartbeat: push the deadline to now + extend, only while this attempt still owns the job."""
    ev = stream.encode("lease.extended", now, job_id=job_id, worker_id=worker_id, attempt=attempt,
                       deadline=round(now + extend, 1))
    return bool(script(r, _EXTEND)(keys=lab_keys(lab, job_id, key(lab, "leases")),
                                   args=[attempt, repr(now + extend), ev, job_id]))


_CUT = """
local st = redis.call('HGET', KEYS[1], 'state')
if st ~= 'running' or not redis.call('ZSCORE', KEYS[6], ARGV[1]) then return 0 end
local ev = cjson.decode(ARGV[3])
ev['attempt'] = tonumber(redis.call('HGET', KEYS[1], 'attempt'))
ev['data']['was'] = math.floor(tonumber(redis.call('ZSCORE', KEYS[6], ARGV[1])) * 10 + 0.5) / 10
redis.call('ZADD', KEYS[6], 'XX', ARGV[2], ARGV[1])
redis.call('HSET', KEYS[1], 'lease_deadline', ARGV[2])
emit(KEYS[3], KEYS[4], cjson.encode(ev), 'leases_cut')
return 1
"""


def cut(r: redis.Redis, lab: str, job_id: str, now: float) -> bool:
    """The learner expires a lease early: its deadline becomes now, and the reaper's next pass does
    the rest exactly as for a lease that ran out (the message comes back while its worker, which
    knows nothing of this, keeps going). False if the job holds no lease (not running, or acked early)."""
    ev = stream.encode("lease.cut", now, job_id=job_id, deadline=round(now, 3))
    return bool(script(r, _CUT)(keys=lab_keys(lab, job_id, key(lab, "leases")), args=[job_id, repr(now), ev]))


_COMPLETE = """
local st = redis.call('HGET', KEYS[1], 'state')
local att = tonumber(redis.call('HGET', KEYS[1], 'attempt'))
redis.call('HSET', KEYS[5], ARGV[1], ARGV[6])
if st == 'running' and att == tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'state', 'done', 'finished_at', ARGV[7], 'outputs', ARGV[9])
  move(KEYS[2], 'running', 'done')
  redis.call('ZREM', KEYS[6], ARGV[8])
  redis.call('HDEL', KEYS[1], 'lease_deadline')
  emit(KEYS[3], KEYS[4], ARGV[3], 'succeeded')
  return 1
end
if ARGV[2] == '1' then
  emit(KEYS[3], KEYS[4], ARGV[4], 'duplicates_blocked')
  return 0
end
if st ~= 'done' then
  redis.call('HSET', KEYS[1], 'state', 'done', 'finished_at', ARGV[7], 'outputs', ARGV[9])
  move(KEYS[2], st, 'done')
end
emit(KEYS[3], KEYS[4], ARGV[5], 'duplicate_completions')
return 2
"""

APPLIED, REFUSED, DUPLICATE = 1, 0, 2


def complete(r: redis.Redis, lab: str, job_id: str, attempt: int, worker_id: str, now: float,
             guard: bool, attempt_record: dict, outputs: dict) -> int:
    """Ack late: done (with its outputs, in the same step), lease deleted.

    A stale attempt is refused (guard on) or lands twice (guard off).
    """
    ok = stream.encode("job.succeeded", now, job_id=job_id, worker_id=worker_id, attempt=attempt)
    blocked = stream.encode("job.duplicate_blocked", now, job_id=job_id, worker_id=worker_id,
                            attempt=attempt, reason="a newer attempt owns the job")
    dup = stream.encode("job.duplicate_completed", now, job_id=job_id, worker_id=worker_id,
                        attempt=attempt)
    return int(script(r, _COMPLETE)(
        keys=lab_keys(lab, job_id, key(lab, "leases")),
        args=[attempt, "1" if guard else "0", ok, blocked, dup, json.dumps(attempt_record), now,
              job_id, json.dumps(outputs)]))
