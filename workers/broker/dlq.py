"""The dead-letter queue: jobs that exhausted their attempts or could never succeed.

Replay is paced and filtered by reason on purpose: replaying every dead letter at once, while
the cause is still there, is a retry storm of its own.
"""

from __future__ import annotations

import time

import redis

from core import stream
from core.keys import key
from core.registry import read_job
from workers.broker.state import lab_keys, script

_REPLAY = """
if redis.call('HGET', KEYS[1], 'state') ~= 'dlq' then return 0 end
local att = tonumber(redis.call('HGET', KEYS[1], 'attempt')) + 1
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', att, 'attempt_base', att - 1)
redis.call('HDEL', KEYS[1], 'dlq_reason')
redis.call('ZREM', KEYS[6], ARGV[1])
move(KEYS[2], 'dlq', 'queued')
redis.call('ZADD', KEYS[7], ARGV[3], ARGV[1] .. ':' .. att)
local ev = cjson.decode(ARGV[2])
ev['attempt'] = att
emit(KEYS[3], KEYS[4], cjson.encode(ev), 'replayed')
return att
"""

# Paced: back to `retrying` with a due time, so the reaper's due-retry loop releases it on schedule.
_REPLAY_PACED = """
if redis.call('HGET', KEYS[1], 'state') ~= 'dlq' then return 0 end
local att = tonumber(redis.call('HGET', KEYS[1], 'attempt'))
redis.call('HSET', KEYS[1], 'state', 'retrying', 'attempt_base', att)
redis.call('HDEL', KEYS[1], 'dlq_reason')
redis.call('ZREM', KEYS[6], ARGV[1])
move(KEYS[2], 'dlq', 'retrying')
redis.call('ZADD', KEYS[7], ARGV[3], ARGV[1])
emit(KEYS[3], KEYS[4], ARGV[2], 'replayed')
return att + 1
"""


def list_dead(r: redis.Redis, lab: str) -> list[dict]:
    """Newest first, each with reason, attempts used and last error."""
    out = []
    for job_id, at in r.zrevrange(key(lab, "dlq"), 0, 499, withscores=True):
        j = read_job(r, lab, job_id)
        if j:
            out.append({"job_id": job_id, "dead_at": at, "reason": j.get("dlq_reason", ""),
                        "attempts": len(j["attempts"]), "last_error": j.get("last_error", ""),
                        "job": j})
    return out


def replay(r: redis.Redis, lab: str, now: float, reason: str | None = None, limit: int = 100,
           rate: float | None = None) -> list[str]:
    """Move matching dead letters back to the queue with their attempt count reset, oldest first.

    The fence (attempt number) keeps counting up, so a worker still holding an old attempt can
    never complete the replayed job; only `attempt_base` resets the max_attempts budget.
    With `rate` (jobs per simulated second) the k-th job is due at now + k/rate instead of all
    at once: an unpaced replay of a big DLQ is a retry storm of its own.
    """
    replayed = []
    for entry in reversed(list_dead(r, lab)):
        if reason and reason.lower() not in entry["reason"].lower():
            continue
        if rate:
            due = now + len(replayed) / rate
            ev = stream.encode("job.replayed", now, job_id=entry["job_id"], attempt=entry["job"]["attempt"],
                               reason=entry["reason"], due=round(due, 3), rate=rate)
            res = script(r, _REPLAY_PACED)(keys=lab_keys(lab, entry["job_id"], key(lab, "dlq"),
                                                          key(lab, "scheduled")),
                                           args=[entry["job_id"], ev, due])
        else:
            ev = stream.encode("job.replayed", now, job_id=entry["job_id"], reason=entry["reason"])
            res = script(r, _REPLAY)(keys=lab_keys(lab, entry["job_id"], key(lab, "dlq"),
                                                    key(lab, "dispatch")),
                                     args=[entry["job_id"], ev, time.time()])
        if res:
            replayed.append(entry["job_id"])
        if len(replayed) >= limit:
            break
    return replayed
