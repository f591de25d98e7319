"""The dead-letter queue: jobs that exhausted their attempts or could never succeed.

Replay is paced and filtered by reason on purpose: replaying every dead letter at once, while
the cause is still there, is a retry storm of its own.
"""

from __future__ import annotations

import time

import redis

from core import stream
from core.broker import leases
from core.broker.state import script
from core.keys import key
from core.registry import read_job

# Keys: leases.keys_for's. Record dlq → queued with its attempt count reset (attempt_base); message visible again
# with its receive count reset for the redrive policy (base); delivery numbers keep counting up.
_REPLAY = """
local record, states, events, counts, message, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[9]
local dispatch = KEYS[10]
local job_id, replayed_ev, real_now = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', record, 'state') ~= 'dlq' then return 0 end
local n = tonumber(redis.call('HGET', message, 'receives') or '0') + 1
redis.call('HSET', record, 'state', 'queued', 'attempt_base', redis.call('HGET', record, 'attempt') or '0')
redis.call('HDEL', record, 'dlq_reason', 'holder')
redis.call('HSET', message, 'state', 'pending', 'base', n - 1)
redis.call('ZREM', dlq, job_id)
move(states, 'dlq', 'queued')
redis.call('ZADD', dispatch, real_now, job_id .. ':' .. n)
local ev = cjson.decode(replayed_ev)
ev['attempt'] = n
emit(events, counts, cjson.encode(ev), 'replayed')
return n
"""

# Paced (due in sim s): record back to `retrying` and the message delayed until its slot, so the reaper's due-retry loop
# releases it on schedule.
_REPLAY_PACED = """
local record, states, events, counts, message, dlq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[9]
local scheduled = KEYS[10]
local job_id, replayed_ev, due = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', record, 'state') ~= 'dlq' then return 0 end
local n = tonumber(redis.call('HGET', message, 'receives') or '0') + 1
redis.call('HSET', record, 'state', 'retrying', 'attempt_base', redis.call('HGET', record, 'attempt') or '0')
redis.call('HDEL', record, 'dlq_reason', 'holder')
redis.call('HSET', message, 'state', 'delayed', 'base', n - 1)
redis.call('ZREM', dlq, job_id)
move(states, 'dlq', 'retrying')
redis.call('ZADD', scheduled, due, job_id)
emit(events, counts, replayed_ev, 'replayed')
return n
"""


def list_dead(r: redis.Redis, lab: str) -> list[dict]:
    """Newest first, each with reason, attempts used and last error."""
    out = []
    for job_id, at in r.zrevrange(key(lab, "dlq"), 0, 499, withscores=True):
        j = read_job(r, lab, job_id)
        if j:
            out.append(
                {
                    "job_id": job_id,
                    "dead_at": at,
                    "reason": j.get("dlq_reason", ""),
                    "attempts": len(j["attempts"]),
                    "last_error": j.get("last_error", ""),
                    "job": j,
                }
            )
    return out


def replay(
    r: redis.Redis, lab: str, now: float, reason: str | None = None, limit: int = 100, rate: float | None = None
) -> list[str]:
    """Move matching dead letters back to the queue with their attempt count reset, oldest first.

    Delivery numbers keep counting up, so a worker still holding an old delivery can never receive
    the replayed message; `attempt_base` resets the max_attempts budget and the message's `base` the
    redrive's receive count.
    With `rate` (jobs per simulated second) the k-th job is due at now + k/rate instead of all
    at once: an unpaced replay of a big DLQ is a retry storm of its own.
    """
    replayed: list[str] = []
    for entry in reversed(list_dead(r, lab)):
        if reason and reason.lower() not in entry["reason"].lower():
            continue
        if rate:
            due = now + len(replayed) / rate
            ev = stream.encode(
                "job.replayed",
                now,
                job_id=entry["job_id"],
                attempt=entry["job"]["attempt"],
                reason=entry["reason"],
                due=round(due, 3),
                rate=rate,
            )
            res = script(r, _REPLAY_PACED)(
                keys=leases.keys_for(lab, entry["job_id"], key(lab, "dlq"), key(lab, "scheduled")),
                args=[entry["job_id"], ev, due],
            )
        else:
            ev = stream.encode("job.replayed", now, job_id=entry["job_id"], reason=entry["reason"])
            res = script(r, _REPLAY)(
                keys=leases.keys_for(lab, entry["job_id"], key(lab, "dlq"), key(lab, "dispatch")),
                args=[entry["job_id"], ev, time.time()],
            )
        if res:
            replayed.append(entry["job_id"])
        if len(replayed) >= limit:
            break
    return replayed
