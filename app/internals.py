"""A job's internals, folded from the lab's event stream: what the inspect panel and tools read.

The job hash holds only the latest attempt; the stream remembers every one. Folding the stream
(rather than keeping a second per-job history) means the panel can never disagree with the log.
"""

from __future__ import annotations

from typing import Any

import redis

from core import stream

# event type → the outcome an attempt ends with
_ENDS = {
    "job.succeeded": "succeeded",
    "job.failed": "failed",
    "job.crashed": "crashed",
    "job.duplicate_completed": "completed again (no CAS guard)",
    "job.lost": "lost",
}


def job_history(r: redis.Redis, lab_id: str, job_id: str) -> dict[str, Any]:
    """Every attempt (worker, start, end, outcome, fence), CAS refusals, retry delays, outputs."""
    attempts: dict[int, dict[str, Any]] = {}
    cas: list[dict[str, Any]] = []
    retries: list[dict[str, Any]] = []
    outputs: list[str] = []
    after = "0"
    while batch := stream.read_after(r, lab_id, after, count=5000):
        after = batch[-1]["id"]
        for ev in batch:
            if ev.get("job_id") != job_id:
                continue
            _fold(ev, attempts, cas, retries, outputs)
    return {
        "attempts": [attempts[n] for n in sorted(attempts)],
        "cas_refused": cas,
        "retry_delays": retries,
        "output_files": outputs,
    }


def _attempt(attempts: dict[int, dict[str, Any]], n: int) -> dict[str, Any]:
    # the fence IS the attempt number: a transition carrying an older one is refused
    return attempts.setdefault(
        n,
        {
            "attempt": n,
            "fence": n,
            "worker": None,
            "start": None,
            "end": None,
            "outcome": None,
            "lease_deadline": None,
            "error": None,
        },
    )


def _fold(ev: dict, attempts: dict, cas: list, retries: list, outputs: list) -> None:
    t, n, data = ev["t_sim"], ev.get("attempt"), ev.get("data") or {}
    kind = ev["type"]
    if kind == "job.duplicate_blocked":
        cas.append({"t": t, "attempt": n, "worker": ev.get("worker_id"), "reason": data.get("reason")})
        if n is not None and n not in attempts:  # a receive that backed off (claim guard): it never ran
            attempts[n] = {
                **_attempt({}, n),
                "worker": ev.get("worker_id"),
                "start": t,
                "end": t,
                "outcome": "backed off: the record was already running",
            }
            return
    elif kind == "job.claim_refused":  # a late delivery: its claim (→ running) found the job moved on
        cas.append(
            {
                "t": t,
                "attempt": n,
                "worker": ev.get("worker_id"),
                "found": data.get("state"),
                "reason": f"{data.get('state')} → running refused (the job is at attempt "
                f"{data.get('current_attempt')})",
            }
        )
        return
    elif kind == "job.retry_scheduled":
        retries.append({"t": t, "attempt": n, "delay": data.get("delay"), "due": data.get("due")})
    elif kind == "output.written":
        outputs.append(data.get("path"))
    if kind == "lease.expired":  # the receive whose lease ran out (older events: the open attempt)
        if n is None or n not in attempts:
            n = max((k for k, a in attempts.items() if a["end"] is None), default=None)
        elif attempts[n]["end"] is not None:
            return
    if n is None:
        return
    a = _attempt(attempts, n)
    if kind == "job.claimed":
        a.update(worker=ev.get("worker_id"), start=t, lease_deadline=data.get("lease_deadline"))
    elif kind == "lease.extended":
        a["lease_deadline"] = data.get("deadline")
    elif kind == "lease.expired":
        a.update(end=t, outcome="lease expired")
    elif kind in _ENDS and kind != "job.duplicate_completed":
        a.update(end=t, outcome=_ENDS[kind], error=data.get("error"))
        a["worker"] = a["worker"] or ev.get("worker_id")
