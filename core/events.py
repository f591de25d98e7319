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
    "lease.cut": (
        "leases_cut",
        "you cut job {job}'s lease short (attempt {attempt}): it was good until t={was}s, now it ends at t={deadline}s",
    ),
    "lease.expired": ("leases_expired", "lease on job {job} expired at t={t}s"),
    "job.redelivered": ("redelivered", "job {job} visible again: redelivered as attempt {attempt}"),
    "job.resumed": (None, "job {job} sent again as attempt {attempt}: its run stopped when the lab was parked"),
    "job.progress": (None, "job {job} {percent}% done on worker {worker}"),
    "job.succeeded": ("succeeded", "job {job} done by worker {worker} (attempt {attempt})"),
    "job.failed": ("failed", "attempt {attempt} of job {job} failed: {error}"),
    "job.retry_scheduled": ("retries_scheduled", "job {job} will retry at t={due}s (waited {delay}s)"),
    "job.retry_started": (None, "job {job} back in the queue for attempt {attempt}"),
    "job.dead_lettered": ("dead_lettered", "job {job} moved to the dead-letter queue: {reason}"),
    "job.replayed": ("replayed", "job {job} replayed from the DLQ"),
    "job.duplicate_blocked": (
        "duplicates_blocked",
        "delivery {attempt} of job {job} blocked by the {guard} guard: {reason}",
    ),
    "job.claim_refused": (
        "claims_refused",
        "late delivery {attempt} of job {job} refused by the CAS: the job is "
        "already {state} (done → running is not a transition): acked and dropped",
    ),
    "job.duplicate_completed": (
        "duplicate_completions",
        "job {job} completed AGAIN by worker {worker} ({wasted}s of transcoding done twice): no guard",
    ),
    "job.stale_freed": (
        "stale_freed",
        "job {job}'s record freed ({reason}): running → queued, the next delivery may claim it",
    ),
    "job.crashed": ("crashes", "job {job} crashed worker {worker}'s work horse (attempt {attempt})"),
    "job.resent": (
        "resent",
        "job {job}: a worker took its message and died before claiming it; attempt {attempt} sent again",
    ),
    "job.lost": ("lost", "job {job} lost: acked early, its worker died"),
    "fairness.started": (None, "worker {worker} took a {tier} job from customer {customer} after {wait}s"),
    "fairness.finished": (None, "worker {worker} finished a {tier} job from customer {customer}"),
    "fairness.requeued": (
        "fair_requeued",
        "a {tier} job from customer {customer} was taken back ({reason}): queued again at its original place",
    ),
    "fairness.crashed": ("fair_crashes", "a poison {tier} job took worker {worker} down with it (crash {crashes})"),
    "fairness.dead_lettered": (
        "fair_dead_lettered",
        "a poison {tier} job dead-lettered after taking down {crashes} workers",
    ),
    "output.written": ("outputs_written", "wrote {path}"),
    "email.sent": ("emails_sent", "completion email for job {job} sent"),
    "challenge.started": (None, "challenge {challenge}: run {run} started: {workload}"),
    "challenge.ended": (None, "challenge run ended: {error}"),
    "challenge.checked": (None, "challenge run {run} checked: passed {passed}"),
    "handler.log": (None, "job {job} (attempt {attempt}) logged: {text}"),
    "handler.transcoded": (None, "job {job}'s handler transcoded {rendition} (attempt {attempt}, from t={began}s)"),
    "handler.cas": (None, "job {job}'s handler compare-and-set {key}: {ok}"),
    "handler.claimed": (None, "job {job}'s handler claimed {key}: token {token}"),
    "handler.backed_off": (None, "job {job}'s handler backed off (attempt {attempt}): its message stays in flight"),
    "handler.stopped": (None, "job {job}'s handler was stopped (attempt {attempt}): {why}"),
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
    "inline.started": (
        None,
        "inline handler: request held while a {duration}s transcode runs (gateway gives up after {gateway}s)",
    ),
    "inline.gateway_timeout": (
        None,
        "gateway timeout: after {gateway}s of silence the proxy answered 504; "
        "the server transcodes on for {unheard}s more, for nobody",
    ),
    "inline.finished": (None, "inline transcode finished after {simulated}s (answered: {answered})"),
    "loadgen.started": (None, "load generator on: λ = {rate} jobs/s (seed {seed})"),
    "loadgen.rate": (None, "load generator: λ now {rate} jobs/s"),
    "loadgen.stopped": (None, "load generator off"),
    "worker.draining": (None, "worker {worker} draining: finishes its job, claims no more"),
    "worker.stopped": (None, "worker {worker} stopped"),
    "worker.rewiring": (None, "worker {worker} restarting to serve {fleet}: it finishes its job first"),
    "breaker.opened": ("breaker_opened", "circuit breaker OPEN: storage failing, fail fast"),
    "breaker.half_open": (None, "circuit breaker half-open: one trial call"),
    "breaker.closed": (None, "circuit breaker closed: storage healthy again"),
    "cron.run_started": ("cron_runs", "replica {replica} runs tick {tick} ({strategy}){catch}"),
    "cron.run_finished": (None, "replica {replica} finished tick {tick}: {emails} emails, {wasted} already sent"),
    "cron.skipped": (None, "replica {replica} skipped tick {tick}: {reason}"),
    "cron.overlap": ("cron_overlaps", "tick {tick}: replica {replica} started while {others} still running"),
    "cron.catch_up": (
        "cron_catch_ups",
        "replica {replica}: last run {ago}s ago, over {factor}× the interval: "
        "{missed} ticks missed, one catch-up run does {covered} of them",
    ),
    "cron.missed": (
        "cron_missed",
        "replica {replica}: last run {ago}s ago — {missed} ticks missed, and nothing catches them up",
    ),
    "cron.lock_lost": ("cron_locks_lost", "replica {replica}'s lock is no longer its own ({holder} holds it)"),
    "cron.release_refused": (
        "cron_releases_refused",
        "replica {replica}'s release refused: the lock is {holder}'s now (compare-and-delete)",
    ),
    "cron.foreign_release": ("cron_foreign_releases", "replica {replica} deleted {holder}'s lock (plain DEL)"),
    "leader.elected": ("leader_elections", "replica {replica} is leader (lease {lease}s)"),
    "leader.lost": (None, "replica {replica} lost the leader lease to {holder}"),
    "replica.started": (None, "scheduler replica {replica} started (pid {pid}, clock {offset}s ahead)"),
    "replica.killed": ("replicas_killed", "scheduler replica {replica} killed (SIGKILL pid {pid})"),
    "replica.died": (None, "scheduler replica {replica} died"),
    "scheduler.down": (None, "every scheduler replica down for {duration}s"),
    "scheduler.up": (None, "scheduler replicas coming back"),
    "cron.slow_next": (None, "the next run will take {duration}s"),
    "webhook.registered": (None, "webhook registered: {target}"),
    "webhook.attempted": (
        "webhook_failures",
        "webhook for job {job} failed on try {try} ({reason}); next try in {delay}s (full jitter)",
    ),
    "webhook.delivered": ("webhooks_delivered", "webhook for job {job} delivered on try {try}"),
    "webhook.gave_up": (
        "webhooks_abandoned",
        "webhook for job {job} abandoned after {try} tries: the client must poll",
    ),
    "webhook.received": (
        "webhooks_received",
        "receiver got the {kind} webhook for job {job}: signature {verified}, answered {status}",
    ),
    "pool.placed": (None, "lab placed on pool host {host}"),
    "pool.host_silent": ("host_failovers", "pool host {from_host} went silent; lab moved to {host}"),
    "pool.handover": ("host_handovers", "pool host {from_host} is stopping; lab handed over to {host}"),
    "pool.waiting": (None, "no live pool host has room for {workers} more workers: the lab waits for one"),
    "worker.lost": (None, "worker {worker} went with pool host {from_host}"),
    "lab.branched": (
        None,
        "branched from lab {parent} at t={at}s with {changes}: {jobs} unfinished jobs enqueued again",
    ),
    "settings.changed": (None, "settings changed: {changes}"),
    "lab.parked": (
        None,
        "lab parked ({why}): its workers stopped and its clock paused at t={t}s; its jobs, "
        "events and settings are kept. A job an ack-late worker held comes back when its "
        "lease runs out after the resume; one an ack-early worker held is lost",
    ),
    "lab.resumed": (None, "lab resumed: a page opened it again; workers starting, clock {clock}"),
    "storage.called": ("storage_calls", "storage call from job {job} part {part} (try {try}): {outcome}"),
    "storage.failed": (
        "storage_failures",
        "storage down: job {job}'s {parts} in-flight part calls failed at t={t}s; each retries in {delays}",
    ),
    "fault.started": (None, "fault: {fault} for {duration}s"),
    "fault.ended": (None, "fault over: {fault}"),
    "clock.paused": (None, "clock paused at t={t}s"),
    "clock.resumed": (None, "clock resumed at t={t}s"),
    "clock.stepped": (None, "clock stepped to t={t}s"),
    "clock.slowed": ("clock_slowed", "{asked}× asked, running at {running}×: {reason}"),
    "clock.caught_up": (None, "clock back at {asked}×"),
}

COUNTERS: tuple[str, ...] = tuple(sorted({c for c, _ in EVENT_TYPES.values() if c}))

# What a learner can enqueue and break, with the words the widget shows for each: /api/meta serves
# these, the API validates against them, the OpenAPI document lists them.
SAMPLES: dict[str, str] = {
    "bigbuckbunny": "Big Buck Bunny (animation)",
    "bikes": "Bikes (street scene)",
    "carphone_pristine": "Car phone (small, talking head)",
    "poison": "Poison: a truncated MP4 that never decodes",
}
FAULTS: dict[str, tuple[str, str]] = {
    "storage_outage": ("Storage outage", "Saving outputs fails for a while: attempts fail and are retried."),
    "poison": (
        "Poison pill",
        "Enqueue an undecodable upload: every attempt fails with an error, so the retry "
        "policy decides the waits and Max attempts sends it to the DLQ.",
    ),
    "poison_crash": (
        "Crashing pill",
        "Enqueue a job that kills the process running it (as an OOM would), every "
        "time: no handler runs, only the lease brings it back, until Max receives.",
    ),
    "slow": ("Slow jobs", "Jobs started during the fault take three times as long."),
    "dedup_outage": (
        "Dedup store down",
        "Idempotency keys cannot be checked: the lab fails open or closed (chapter 5).",
    ),
}
