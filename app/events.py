"""Event types: the vocabulary of the lab's event stream, with the counter each one bumps.

The widget reads this table through /api/meta, so the plain-words narration and the counts
shown on screen come from the same place as the broker's bookkeeping.
"""

from __future__ import annotations

# type → (counter incremented when appended, plain-words template for the event log)
EVENT_TYPES: dict[str, tuple[str | None, str]] = {
    "job.enqueued": ("enqueued", "job {job} enqueued"),
    "job.claimed": (None, "worker {worker} claimed job {job} (attempt {attempt})"),
    "lease.extended": ("leases_extended", "heartbeat: lease on job {job} extended to t={deadline}s"),
    "lease.expired": ("leases_expired", "lease on job {job} expired at t={t}s"),
    "job.redelivered": ("redelivered", "job {job} visible again: redelivered as attempt {attempt}"),
    "job.progress": (None, "job {job} {percent}% done on worker {worker}"),
    "job.succeeded": ("succeeded", "job {job} done by worker {worker} (attempt {attempt})"),
    "job.failed": ("failed", "attempt {attempt} of job {job} failed: {error}"),
    "job.retry_scheduled": ("retries_scheduled", "job {job} will retry at t={due}s (waited {delay}s)"),
    "job.retry_started": (None, "job {job} back in the queue for attempt {attempt}"),
    "job.dead_lettered": ("dead_lettered", "job {job} moved to the dead-letter queue: {reason}"),
    "job.replayed": ("replayed", "job {job} replayed from the DLQ"),
    "job.duplicate_blocked": ("duplicates_blocked",
                              "stale attempt {attempt} of job {job} refused by the CAS guard ({reason})"),
    "job.duplicate_completed": ("duplicate_completions",
                                "job {job} completed AGAIN by worker {worker}: no CAS guard"),
    "job.crashed": ("crashes", "job {job} crashed worker {worker}'s work horse (attempt {attempt})"),
    "job.resent": ("resent", "job {job}: a worker took its message and died before claiming it; "
                             "attempt {attempt} sent again"),
    "job.lost": ("lost", "job {job} lost: acked early, its worker died"),
    "output.written": ("outputs_written", "wrote {path}"),
    "email.sent": ("emails_sent", "completion email for job {job} sent"),
    "email.suppressed": ("emails_suppressed", "second completion email for job {job} suppressed"),
    "idempotency.replayed": ("idem_replayed", "Idempotency-Key seen: job {job}'s original response replayed"),
    "idempotency.conflict": ("idem_conflicts", "Idempotency-Key still in progress: resend refused (409)"),
    "idempotency.mismatch": ("idem_mismatches", "Idempotency-Key reused with a different body: refused (422)"),
    "idempotency.refused": ("idem_refused", "dedup store down, failing closed: request refused (503)"),
    "idempotency.unchecked": ("idem_unchecked", "dedup store down, failing open: request let through unchecked"),
    "worker.started": (None, "worker {worker} started (pid {pid})"),
    "worker.killed": ("workers_killed", "worker {worker} killed (SIGKILL pid {pid})"),
    "worker.died": (None, "worker {worker} died"),
    "worker.respawning": (None, "worker {worker} respawning"),
    "worker.booting": (None, "worker {worker} booting: useful after its {lag}s boot lag"),
    "autoscale.scaled": ("autoscaled", "autoscaler: {frm} → {to} workers ({reason})"),
    "loadgen.started": (None, "load generator on: λ = {rate} jobs/s (seed {seed})"),
    "loadgen.rate": (None, "load generator: λ now {rate} jobs/s"),
    "loadgen.stopped": (None, "load generator off"),
    "worker.draining": (None, "worker {worker} draining: finishes its job, claims no more"),
    "worker.stopped": (None, "worker {worker} stopped"),
    "breaker.opened": ("breaker_opened", "circuit breaker OPEN: storage failing, fail fast"),
    "breaker.half_open": (None, "circuit breaker half-open: one trial call"),
    "breaker.closed": (None, "circuit breaker closed: storage healthy again"),
    "lab.branched": (None, "branched from lab {parent} at t={at}s with {changes}: "
                           "{jobs} unfinished jobs enqueued again"),
    "settings.changed": (None, "settings changed: {changes}"),
    "fault.started": (None, "fault: {fault} for {duration}s"),
    "fault.ended": (None, "fault over: {fault}"),
    "clock.paused": (None, "clock paused at t={t}s"),
    "clock.resumed": (None, "clock resumed at t={t}s"),
    "clock.stepped": (None, "clock stepped to t={t}s"),
}

COUNTERS: tuple[str, ...] = tuple(sorted({c for c, _ in EVENT_TYPES.values() if c}))
