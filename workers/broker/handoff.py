"""Hand-offs: a delivery RQ gave to a worker that died before it claimed the job.

A lease starts at claim, so between RQ moving the message to a worker (BLMOVE into RQ's
intermediate list) and that worker's `leases.claim` the job has no lease for the reaper to
expire; a worker killed in that window took the only copy with it, and the job sat 'queued'
forever. Every send is therefore recorded here first. A record whose attempt is still 'queued'
after HANDOFF_S real seconds, and whose message is no longer waiting in RQ's queue, was taken by
a worker that never claimed it: the same attempt is sent again. Sending twice is safe, because
claim is a compare-and-swap on (state queued, attempt): whichever copy claims first runs, the
other is a stale delivery and returns without doing anything.
"""

from __future__ import annotations

import time

import redis

from core import stream
from core.keys import job, key

HANDOFF_S = 5.0  # real seconds a taken message may stay unclaimed (a horse claims within milliseconds)


def record(rq_conn: redis.Redis, lab: str, job_id: str, attempt: int, rq_id: str) -> None:
    """Note a delivery before it is enqueued, so a crash between the two is covered as well."""
    rq_conn.zadd(key(lab, "handoffs"), {f"{job_id}:{attempt}:{rq_id}": time.time()})


def sweep(r: redis.Redis, rq_conn: redis.Redis, lab: str, rq_queue_key: str, now: float,
          resend) -> int:
    """Forget claimed hand-offs, re-check waiting ones later, re-send lost ones. Returns the re-sends."""
    k = key(lab, "handoffs")
    resent = 0
    for member in r.zrangebyscore(k, "-inf", time.time() - HANDOFF_S, start=0, num=500):
        job_id, attempt, rq_id = member.split(":", 2)
        state, current = r.hmget(job(lab, job_id), "state", "attempt")
        if state != "queued" or current != attempt:
            r.zrem(k, member)  # claimed (or moved on): the hand-off is over
        elif r.lpos(rq_queue_key, rq_id) is not None:
            r.zadd(k, {member: time.time()}, xx=True)  # still waiting its turn in RQ's queue
        elif r.zrem(k, member):
            stream.emit(r, lab, "job.resent", now, job_id=job_id, attempt=int(attempt))
            resend(rq_conn, lab, job_id, int(attempt))
            resent += 1
    return resent
