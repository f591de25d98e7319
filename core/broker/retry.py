"""Retries: how long to wait, whether to retry at all, and the circuit breaker.

Full jitter (a uniform draw in [0, min(cap, base·2^n)]) is the default because synchronized
retries from many clients arrive as a thundering herd; spreading them flattens the peak.
"""

from __future__ import annotations

import json
import random

import redis

from core import stream
from core.backoff import exponential_delay, full_jitter_delay
from core.broker import handoff, leases
from core.broker.state import script
from core.keys import key
from core.settings import LabSettings


class NonRetryable(Exception):
    """Retrying cannot help (corrupt input): go to the DLQ now instead of burning attempts."""


class StorageDown(Exception):
    """The storage dependency failed; retryable, and counted by the circuit breaker.

    `at` is the simulated moment the call failed when that is known (an outage that starts
    mid-call fails every in-flight call at its start, not whenever each worker next looks)."""

    def __init__(self, message: str, at: float | None = None):
        super().__init__(message)
        self.at = at


def jitter_rng(seed: int, job_id: str, attempt: int) -> random.Random:
    """One reproducible draw stream per (seed, job, attempt); seed 0 means unseeded."""
    return random.Random(f"{seed}:{job_id}:{attempt}") if seed else random.Random()


def retry_delay(policy: str, n: int, base: float, cap: float, rng: random.Random) -> float | None:
    """Delay before the retry after failed attempt n; None means the policy does not retry."""
    if policy == "none":
        return None
    if policy == "fixed":
        return min(cap, base)
    if policy == "linear":
        return min(cap, base * n)
    if policy == "exponential":
        return exponential_delay(n, base, cap)
    return full_jitter_delay(n, base, cap, rng)


# Keys: leases.keys_for's, then scheduled (delayed messages) and the DLQ. outcome 'retry' | 'dlq'; next_ev
# job.retry_scheduled or job.dead_lettered; due in sim s.
# The handler's failure path (the lesson's handle_failure): record → retrying with the message delayed
# until its due time (retry_after), or record → dlq with the message moved to the DLQ.
_FAIL = """
local record, states, events, counts, attempts, message = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local leases, alive, scheduled, dlq = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local delivery, guard, outcome, failed_ev, next_ev = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local blocked_ev, due, job_id, attempt_rec, error = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local dlq_reason, now = ARGV[11], ARGV[12]
redis.call('HSET', attempts, delivery, attempt_rec)
local st = redis.call('HGET', record, 'state')
local holder = tonumber(redis.call('HGET', record, 'holder') or '0')
if st ~= 'running' or holder ~= tonumber(delivery) then
  -- this attempt does not hold the record (overtaken, freed, or the job finished): its failure moves nothing
  if guard == 'off' then emit(events, counts, failed_ev, 'failed') return 0 end
  emit(events, counts, blocked_ev, 'duplicates_blocked')
  return 0
end
redis.call('HSET', record, 'last_error', error)
redis.call('HDEL', record, 'holder')
redis.call('ZREM', alive, job_id)
redis.call('ZREM', leases, job_id)
emit(events, counts, failed_ev, 'failed')
if outcome == 'retry' then
  redis.call('HSET', record, 'state', 'retrying')
  move(states, st, 'retrying')
  redis.call('HSET', message, 'state', 'delayed')
  redis.call('ZADD', scheduled, due, job_id)
  emit(events, counts, next_ev, 'retries_scheduled')
else
  redis.call('HSET', record, 'state', 'dlq', 'dlq_reason', dlq_reason)
  move(states, st, 'dlq')
  redis.call('HSET', message, 'state', 'dlq')
  redis.call('ZADD', dlq, now, job_id)
  emit(events, counts, next_ev, 'dead_lettered')
end
return 1
"""


def fail_attempt(
    r: redis.Redis,
    lab: str,
    job_id: str,
    attempt: int,
    worker_id: str,
    now: float,
    settings: LabSettings,
    error: Exception,
    attempts_used: int,
    first_start: float,
    attempt_record: dict,
    rng: random.Random,
) -> str:
    """Record a failed attempt; schedule the retry or dead-letter it. Returns 'retry'|'dlq'|'stale'.

    `attempts_used` is the record's attempt count (runs started since the last DLQ replay): the
    lesson's `if attempt_count >= max_attempts: move_to_dlq`, so a job that fails every time is
    tried exactly max_attempts times with the policy's delays between them."""
    message = f"{error.__class__.__name__}: {error}"[:300]
    reason = None
    delay = None
    if isinstance(error, NonRetryable) and settings["classify_errors"]:
        reason = "non_retryable: " + str(error)[:200]
    elif attempts_used >= settings["max_attempts"]:
        reason = f"max_attempts ({settings['max_attempts']}) exhausted"
    else:
        delay = retry_delay(settings["retry_policy"], attempts_used, settings["retry_base"], settings["retry_cap"], rng)
        if delay is None:
            reason = "retry_policy none"
        elif settings["retry_budget"] and now + delay - first_start > settings["retry_budget"]:
            reason = f"retry budget ({settings['retry_budget']:g} s) exhausted"
    common: stream.JobRef = {"job_id": job_id, "worker_id": worker_id, "attempt": attempt}
    failed = stream.encode(
        "job.failed", now, **common, error=message, retryable=reason is None, attempt_count=attempts_used
    )
    due = None  # the retry's moment (sim s), if it retries
    if reason is None:
        assert delay is not None  # no reason to stop is left only by a policy that gave a delay
        due = now + delay
        nxt = stream.encode(
            "job.retry_scheduled",
            now,
            **common,
            delay=round(delay, 3),
            due=round(due, 3),
            policy=settings["retry_policy"],
        )
    else:
        nxt = stream.encode(
            "job.dead_lettered", now, **common, reason=reason, last_error=message, attempt_count=attempts_used
        )
    blocked = stream.encode(
        "job.duplicate_blocked",
        now,
        **common,
        guard=settings["guard"],
        reason="a failure from an attempt that no longer holds the record changes nothing",
    )
    attempt_record = {**attempt_record, "outcome": "failed", "error": message, "end": round(now, 3)}
    res = script(r, _FAIL)(
        keys=leases.keys_for(lab, job_id, key(lab, "scheduled"), key(lab, "dlq")),
        args=[
            attempt,
            settings["guard"],
            "retry" if reason is None else "dlq",
            failed,
            nxt,
            blocked,
            0 if due is None else due,
            job_id,
            json.dumps(attempt_record),
            message,
            reason or "",
            now,
        ],
    )
    if not res:
        return "stale"
    if due is not None:
        handoff.hold_until_due(r, lab, job_id, due, now)
        return "retry"
    return "dlq"


# --- circuit breaker on the storage dependency ---------------------------------------------


def breaker_allows(r: redis.Redis, lab: str, now: float, settings: LabSettings) -> bool:
    """Closed → yes. Open → no until the cool-down ends, then half-open lets a trial through."""
    if not settings["breaker"]:
        return True
    b = r.hgetall(key(lab, "breaker"))
    if b.get("state") != "open":
        return True
    if now - float(b.get("opened_at", 0)) >= settings["breaker_cooldown"]:
        if r.hsetnx(key(lab, "breaker"), "trial", "1"):
            r.hset(key(lab, "breaker"), "state", "half_open")
            stream.emit(r, lab, "breaker.half_open", now)
            return True
    return False


def breaker_record(r: redis.Redis, lab: str, now: float, settings: LabSettings, ok: bool) -> None:
    """Count consecutive storage failures; open at the threshold, close on a success."""
    if not settings["breaker"]:
        return
    k = key(lab, "breaker")
    if ok:
        if r.hget(k, "state") in ("open", "half_open"):
            r.delete(k)
            stream.emit(r, lab, "breaker.closed", now)
        else:
            r.hset(k, "failures", 0)
        return
    failures = r.hincrby(k, "failures", 1)
    state = r.hget(k, "state")
    if state == "half_open" or (state != "open" and failures >= settings["breaker_threshold"]):
        r.hset(k, mapping={"state": "open", "opened_at": now})
        r.hdel(k, "trial")
        stream.emit(r, lab, "breaker.opened", now, failures=failures)
