"""The producer side: write a job record with the lesson's payload, then hand it to RQ.

The record (state queued, attempt count 0) and its message (pending, receive count 0) are written
in one MULTI with the first delivery, so a job either exists and is queued or does not exist at
all; the RQ enqueue that follows is retried by the reaper's dispatcher if this process dies
before it happens.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.client import Pipeline

from core import clock, stream
from core.broker import handoff, reaper
from core.keys import job, key, msg
from core.registry import next_job_number

JOB_TYPES = ("transcode", "thumbnail")


def enqueue_job(
    r: redis.Redis,
    rq_conn: redis.Redis,
    lab: str,
    *,
    job_type: str,
    video_id: str,
    source: str,
    duration_s: float,
    resolutions: list[str],
    idempotency_key: str | None,
    poison: str = "",
    job_input: dict[str, Any] | None = None,
    also: Callable[[Pipeline, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Create job N of this lab in state queued (attempt 1) and send its first delivery. `also` adds writes to
    the job's own transaction, given its payload (an Idempotency-Key's record: the key and its job exist
    together or not at all)."""
    number = next_job_number(r, lab)
    job_id = str(number)
    # held before the clock is read: the job is enqueued, and claimed by an idle worker, at one instant
    now = handoff.hold_for_transit(r, lab, job_id, 1)
    if now is None:
        now = clock.now(r, lab)
    payload = {
        "job_id": job_id,
        "job_type": job_type,
        "video_id": video_id,
        "resolutions": resolutions,
        "idempotency_key": idempotency_key,
        "created_at": round(now, 3),
        "attempt_count": 0,
        "duration_s": duration_s,
        **({"input": job_input} if job_input else {}),
    }
    with r.pipeline(transaction=True) as pipe:
        pipe.hset(
            job(lab, job_id),
            mapping={
                "id": job_id,
                "state": "queued",
                "attempt": 0,
                "attempt_base": 0,
                "type": job_type,
                "created_at": now,
                "source": source,
                "poison": poison,
                "payload": json.dumps(payload),
                "outputs": "{}",
            },
        )
        pipe.hset(msg(lab, job_id), mapping={"state": "pending", "receives": 0, "base": 0})
        pipe.zadd(key(lab, "jobs"), {job_id: number})
        pipe.hincrby(key(lab, "states"), "queued", 1)
        pipe.zadd(key(lab, "dispatch"), {f"{job_id}:1": time.time()})
        stream.append(
            pipe,
            lab,
            "job.enqueued",
            now,
            job_id=job_id,
            attempt=1,
            job_type=job_type,
            video_id=video_id,
            duration_s=duration_s,
            poison=poison or False,
        )
        if also:
            also(pipe, payload)
        pipe.execute()
    try:
        reaper.send(rq_conn, lab, job_id, 1)
        r.zrem(key(lab, "dispatch"), f"{job_id}:1")
    except redis.exceptions.OutOfMemoryError:
        pass  # the job is recorded and listed for dispatch: the reaper sends it once the server has room
    return payload
