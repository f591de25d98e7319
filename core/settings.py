"""Lab settings: the one schema every layer reads (API validation, widget controls, presets).

Like RQ's defaults.py, each setting has a docstring-like `doc`; all durations are *simulated*
seconds, because the lab runs on a compressed clock.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, TypedDict

from core.numbers import Inputs

_MODEL = Inputs()  # the lesson's figures: settings that stand for one default to it


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # "int" | "float" | "bool" | "choice"
    default: Any
    doc: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    label: str = ""
    unit: str = ""


SCHEMA: tuple[Setting, ...] = (
    Setting(
        "speed",
        "float",
        20.0,
        "Simulated seconds per real second (the lesson's demo runs at 20x).",
        1,
        1000,
        label="Clock speed",
        unit="×",
    ),
    Setting("workers", "int", 2, "Worker processes in the pool: real `rq worker` processes.", 0, 8, label="Workers"),
    Setting(
        "vt_seconds",
        "float",
        1200.0,
        "Visibility timeout: how long a claimed message stays invisible before the reaper hands it to another worker.",
        10,
        7200,
        label="Visibility timeout",
        unit="s",
    ),
    Setting(
        "heartbeat",
        "bool",
        False,
        "Workers extend their lease while they run, so a short VT "
        "still covers a long job and a crash is noticed quickly.",
        label="Heartbeat",
    ),
    Setting(
        "heartbeat_interval",
        "float",
        60.0,
        "Simulated seconds between lease extensions.",
        5,
        3600,
        label="Heartbeat interval",
        unit="s",
    ),
    Setting(
        "heartbeat_extend",
        "float",
        180.0,
        "Each heartbeat pushes the deadline to now + this.",
        10,
        7200,
        label="Heartbeat extends to",
        unit="s",
    ),
    Setting(
        "ack_mode",
        "choice",
        "late",
        "late: delete the message after success (at-least-once); "
        "early: delete on claim (at-most-once: a crash loses the job).",
        choices=("late", "early"),
        label="Acknowledge",
    ),
    Setting(
        "guard",
        "choice",
        "claim",
        "What a worker holding a message may do to the job's record. off: "
        "every copy runs the job (chapter 1's world: the first completion wins, a second is a counted "
        "duplicate); claim: the lesson's compare-and-swap, first claimer wins: a copy that finds the "
        "record running backs off in one round trip and leaves the message in flight, one that finds it "
        "done acks and drops it; fence: newest attempt wins (fencing tokens): an older attempt's writes "
        "are refused, which livelocks when the VT is shorter than the job.",
        choices=("off", "claim", "fence"),
        label="Job-record guard",
    ),
    Setting(
        "stale_after",
        "float",
        1200.0,
        "The stale-job sweeper (chapter 7's reprocess_stale_jobs): a "
        "record left running with no sign of life (claim or heartbeat) for this long is put back to "
        "queued, so a crashed holder cannot block its job forever under the claim guard; 0 = no sweeper.",
        0,
        86400,
        label="Stale-job sweeper after",
        unit="s",
    ),
    Setting(
        "max_receives",
        "int",
        10,
        "The broker's redrive policy (SQS maxReceiveCount): a message "
        "received this many times without being deleted goes to the dead-letter queue. Counts every "
        "receive — crashes, expired leases and copies that backed off — unlike Max attempts, which "
        "counts the handler's failures.",
        1,
        50,
        label="Max receives",
    ),
    Setting(
        "upload_parts",
        "int",
        1,
        "Parts each attempt streams to storage in parallel while it runs "
        "(a multipart upload): every part is one storage call in flight, retried inside the attempt "
        "with the retry policy when storage fails. More parts, more callers in a retry herd.",
        1,
        16,
        label="Upload parts per job",
    ),
    Setting(
        "idempotent_outputs",
        "bool",
        True,
        "Outputs go to a deterministic path written atomically, so a duplicate run overwrites instead of adding files.",
        label="Deterministic output path",
    ),
    Setting(
        "notify_guard",
        "bool",
        True,
        "A 'notified' compare-and-swap flag makes the completion "
        "email go out once however many times the handler runs.",
        label="Send-once email guard",
    ),
    Setting(
        "dedup_fail_mode",
        "choice",
        "open",
        "When the idempotency store is down: open proceeds "
        "unchecked (risking a duplicate job), closed refuses with 503 (the client retries later).",
        choices=("open", "closed"),
        label="Dedup store down",
    ),
    Setting(
        "retry_policy",
        "choice",
        "full_jitter",
        "How long to wait before retrying a failed attempt.",
        choices=("none", "fixed", "linear", "exponential", "full_jitter"),
        label="Retry policy",
    ),
    Setting("retry_base", "float", 10.0, "Base delay of the retry policy.", 0.1, 3600, label="Retry base", unit="s"),
    Setting(
        "retry_cap", "float", 300.0, "Upper bound on any single retry delay.", 1, 86400, label="Retry cap", unit="s"
    ),
    Setting(
        "max_attempts",
        "int",
        5,
        "Attempts a failing job (or a failing storage call inside one) gets "
        "before the handler gives up: the fifth failure goes to the dead-letter queue, as in the lesson.",
        1,
        20,
        label="Max attempts",
    ),
    Setting(
        "retry_budget",
        "float",
        0.0,
        "Wall-clock budget from first attempt; 0 = no budget.",
        0,
        86400,
        label="Retry budget",
        unit="s",
    ),
    Setting(
        "jitter_seed",
        "int",
        0,
        "Seed for the jitter draws (each job and attempt draws from its own "
        "stream of it), so an outage experiment can be repeated exactly; 0 = a fresh random draw.",
        0,
        2**31 - 1,
        label="Jitter seed",
    ),
    Setting(
        "dlq_alert_depth",
        "int",
        5,
        "Alert when this many jobs sit in the dead-letter queue.",
        1,
        10000,
        label="DLQ depth alert",
    ),
    Setting(
        "dlq_alert_rate",
        "float",
        3.0,
        "Alert when dead letters arrive faster than this per simulated "
        "minute: a burst means something upstream broke, not one bad file.",
        0.1,
        10000,
        label="DLQ arrival alert",
        unit="/min",
    ),
    Setting(
        "classify_errors",
        "bool",
        True,
        "Corrupt input is non-retryable and goes straight to the DLQ instead of burning every attempt.",
        label="Non-retryable errors skip retries",
    ),
    Setting(
        "breaker",
        "bool",
        False,
        "A circuit breaker on storage: after repeated failures, fail fast "
        "for a cool-down instead of hammering a dependency that is down.",
        label="Circuit breaker",
    ),
    Setting(
        "breaker_threshold",
        "int",
        3,
        "Consecutive storage failures that open the breaker.",
        1,
        50,
        label="Breaker threshold",
    ),
    Setting(
        "breaker_cooldown",
        "float",
        60.0,
        "How long the breaker stays open before a trial call.",
        1,
        3600,
        label="Breaker cool-down",
        unit="s",
    ),
    Setting(
        "respawn_delay",
        "float",
        30.0,
        "How long a killed worker (or scheduler replica) stays dead before the supervisor starts a replacement.",
        0,
        3600,
        label="Respawn delay",
        unit="s",
    ),
    Setting(
        "scale_in",
        "choice",
        "drain",
        "drain: a removed worker finishes its job first; kill: it is killed mid-job (the job then waits for its VT).",
        choices=("drain", "kill"),
        label="Scale-in",
    ),
    Setting(
        "gateway_timeout",
        "float",
        _MODEL.gateway_timeout_s,
        "Chapter 0: the proxy in front of the inline "
        "handler gives up on a request silent this long and answers 504 Gateway Timeout (the server keeps "
        "transcoding for nobody).",
        1,
        7200,
        label="Gateway timeout",
        unit="s",
    ),
    Setting(
        "job_duration",
        "float",
        600.0,
        "Simulated duration of a transcode (the lesson's 10 minutes).",
        1,
        7200,
        label="Transcode duration",
        unit="s",
    ),
    Setting(
        "fairness",
        "choice",
        "shared",
        "Chapter 6: how a free worker picks between the pro and free "
        "queues — one shared FIFO, a hard split, weighted polling, strict priority, strict priority with "
        "aging, fully separate fleets (each tier its own worker processes and queue), or round robin across "
        "the customers inside a tier (tiers picked by weighted polling).",
        choices=("shared", "split", "weighted", "strict", "aging", "separate", "round_robin"),
        label="Fairness strategy",
    ),
    Setting(
        "pro_workers",
        "int",
        1,
        "Workers walled off for pro: a count under a hard split, a fleet of their own under full separation.",
        0,
        8,
        label="Pro-reserved workers",
    ),
    Setting(
        "pro_weight",
        "float",
        0.7,
        "Weighted polling: chance a free worker checks the pro queue first; 1 − this is the free tier's floor.",
        0,
        1,
        label="P(pro first)",
    ),
    Setting(
        "aging_s",
        "float",
        300.0,
        "Aging: a free job that has waited this long jumps the priority rule.",
        1,
        7200,
        label="Aging threshold",
        unit="s",
    ),
    Setting(
        "arrival_rate",
        "float",
        0.0,
        "Chapter 6 traffic: tier jobs per simulated second (0 = off).",
        0,
        5,
        label="Arrival rate",
        unit="jobs/s",
    ),
    Setting(
        "pro_share",
        "float",
        0.1,
        "Fraction of chapter 6 traffic from pro customers (the lesson's 10%).",
        0,
        1,
        label="Pro share",
    ),
    Setting(
        "fair_job_s",
        "float",
        30.0,
        "Simulated service time of one chapter 6 tier job.",
        1,
        3600,
        label="Tier job duration",
        unit="s",
    ),
    Setting(
        "exec_timeout",
        "float",
        0.0,
        "Per-attempt execution timeout; 0 = none. Keep it below VT.",
        0,
        7200,
        label="Execution timeout",
        unit="s",
    ),
    Setting(
        "lock_ttl",
        "float",
        1800.0,
        "TTL of the job's lock (Chapter 7's run lock): the third timeout, "
        "which should outlast the VT so nothing ever waits for it.",
        10,
        86400,
        label="Lock TTL",
        unit="s",
    ),
    Setting(
        "boot_lag",
        "float",
        0.0,
        "A worker added to a running pool boots this long before it can "
        "claim a job (the lesson's 90 s container start).",
        0,
        3600,
        label="Worker boot lag",
        unit="s",
    ),
    Setting(
        "autoscale",
        "bool",
        False,
        "Scale out when the backlog would take longer than the target "
        "wait to drain; scale in (drain or kill, see Scale-in) when the queue is empty.",
        label="Autoscaler",
    ),
    Setting(
        "autoscale_target_wait",
        "float",
        150.0,
        "The autoscaler's target drain time for the backlog.",
        1,
        3600,
        label="Autoscaler target wait",
        unit="s",
    ),
    Setting(
        "autoscale_min",
        "int",
        1,
        "The standing floor the autoscaler never scales below.",
        0,
        8,
        label="Autoscaler floor",
    ),
    # --- Chapter 7: scheduled work. Replicas are real processes; all times are on their own clocks.
    Setting(
        "scheduler_replicas",
        "int",
        0,
        "Scheduler replicas: real processes, each running the same cron "
        "entry on its own clock (the lesson's 10 API replicas).",
        0,
        10,
        label="Scheduler replicas",
    ),
    Setting(
        "cron_strategy",
        "choice",
        "none",
        "none: each replica fires on its own clock; lock: SET NX EX with a "
        "TTL, losers skip the tick; heartbeat: the same lock, extended while the run lives; leader: one "
        "replica holds a renewed lease and runs every tick.",
        choices=("none", "lock", "heartbeat", "leader"),
        label="Run-once strategy",
    ),
    Setting(
        "cron_interval",
        "float",
        60.0,
        "Simulated seconds between cron ticks (one shard bucket per tick).",
        5,
        3600,
        label="Cron interval",
        unit="s",
    ),
    Setting(
        "cron_task_s",
        "float",
        45.0,
        "How long one run of the task takes (the lesson's 45 s p99).",
        1,
        3600,
        label="Task duration",
        unit="s",
    ),
    Setting(
        "cron_late",
        "float",
        0.0,
        "How long after each tick the latest replica's scheduler fires (a deploy, "
        "a GC pause, a scheduler polling every few seconds): replica k of N fires late·(k−1)/(N−1) s after the "
        "tick, on its own clock. Past the lock TTL, a late replica finds the lock expired under a live holder.",
        0,
        3600,
        label="Latest replica fires after",
        unit="s",
    ),
    Setting(
        "cron_lock_ttl",
        "float",
        120.0,
        "TTL of the run lock: the safety net if the holder dies. Set "
        "shorter than the longest run, a second replica can take the lock while the first still runs.",
        1,
        3600,
        label="Lock TTL",
        unit="s",
    ),
    Setting(
        "cron_release",
        "choice",
        "compare",
        "compare: release deletes the lock only if it is still "
        "yours; delete: a plain DEL, which frees another replica's lock after yours expired.",
        choices=("compare", "delete"),
        label="Lock release",
    ),
    Setting(
        "leader_lease",
        "float",
        60.0,
        "Leader lease, renewed every third of it by the leader; a dead leader is replaced within one lease.",
        5,
        3600,
        label="Leader lease",
        unit="s",
    ),
    Setting(
        "clock_skew",
        "float",
        0.0,
        "Spread of the replicas' clocks: replica k of N runs "
        "skew·(k−1)/(N−1) s ahead of replica 1, and judges a lock's expiry by its own clock.",
        0,
        600,
        label="Clock skew",
        unit="s",
    ),
    Setting(
        "cron_idempotent",
        "bool",
        False,
        "Each digest is claimed with a conditional write before it is "
        "sent, so a second run of the same tick finds nothing left to do (one wasted run, no emails).",
        label="Idempotent task",
    ),
    Setting(
        "cron_catch_up",
        "bool",
        True,
        "A run that finds the last run older than 1.5 intervals also "
        "does the ticks nobody ran (after every replica was down, or a leader failover).",
        label="Catch up missed ticks",
    ),
    Setting(
        "cron_shard",
        "bool",
        False,
        "Spread the daily digest: hash each user into one of the buckets, "
        "and each tick mails only its bucket, instead of everyone on the day's first tick.",
        label="Shard users by hash",
    ),
    Setting(
        "shard_buckets",
        "int",
        12,
        "Buckets per day (the lesson's 1,440 one-minute buckets); a day is this many ticks.",
        1,
        1440,
        label="Shard buckets",
    ),
    Setting("cron_users", "int", 120, "Users who get the daily digest.", 1, 5000, label="Users"),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SCHEMA}


class LabSettings(TypedDict):
    """One lab's settings as they travel (stored JSON, a preset, a supervisor pass): SCHEMA's fields as a type
    checker sees them. Written out because a type checker cannot read a record built at run time;
    tests/unit/test_settings.py fails if a field or its type differs from SCHEMA, which stays the source."""

    speed: float
    workers: int
    vt_seconds: float
    heartbeat: bool
    heartbeat_interval: float
    heartbeat_extend: float
    ack_mode: Literal["late", "early"]
    guard: Literal["off", "claim", "fence"]
    stale_after: float
    max_receives: int
    upload_parts: int
    idempotent_outputs: bool
    notify_guard: bool
    dedup_fail_mode: Literal["open", "closed"]
    retry_policy: Literal["none", "fixed", "linear", "exponential", "full_jitter"]
    retry_base: float
    retry_cap: float
    max_attempts: int
    retry_budget: float
    jitter_seed: int
    dlq_alert_depth: int
    dlq_alert_rate: float
    classify_errors: bool
    breaker: bool
    breaker_threshold: int
    breaker_cooldown: float
    respawn_delay: float
    scale_in: Literal["drain", "kill"]
    gateway_timeout: float
    job_duration: float
    fairness: Literal["shared", "split", "weighted", "strict", "aging", "separate", "round_robin"]
    pro_workers: int
    pro_weight: float
    aging_s: float
    arrival_rate: float
    pro_share: float
    fair_job_s: float
    exec_timeout: float
    lock_ttl: float
    boot_lag: float
    autoscale: bool
    autoscale_target_wait: float
    autoscale_min: int
    scheduler_replicas: int
    cron_strategy: Literal["none", "lock", "heartbeat", "leader"]
    cron_interval: float
    cron_task_s: float
    cron_late: float
    cron_lock_ttl: float
    cron_release: Literal["compare", "delete"]
    leader_lease: float
    clock_skew: float
    cron_idempotent: bool
    cron_catch_up: bool
    cron_shard: bool
    shard_buckets: int
    cron_users: int


DEFAULTS: dict[str, Any] = {s.name: s.default for s in SCHEMA}


def _coerce(s: Setting, value: Any) -> Any:
    """One value to the setting's type, or ValueError with a message a learner can act on."""
    if s.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "on", "off"):
            return value.lower() in ("true", "1", "on")
        raise ValueError("must be true or false")
    if s.kind == "choice":
        if value not in s.choices:
            raise ValueError(f"must be one of {', '.join(s.choices)}")
        return value
    assert s.min is not None and s.max is not None  # every number setting has its range
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"must be a number between {s.min:g} and {s.max:g}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"must be a number between {s.min:g} and {s.max:g}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError("must be a finite number")
    if s.kind == "int":
        if number != int(number):
            raise ValueError("must be a whole number")
        number = int(number)
    if not (s.min <= number <= s.max):
        raise ValueError(f"must be between {s.min:g} and {s.max:g}{' ' + s.unit if s.unit else ''}")
    return number


def validate(changes: Any, partial: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """Check a settings mapping; returns (clean values, {field: message}) — never raises."""
    if not isinstance(changes, dict):
        return {}, {"_": "settings must be a JSON object"}
    clean, errors = {}, {}
    for name, value in changes.items():
        s = BY_NAME.get(name)
        if s is None:
            errors[name] = "unknown setting"
            continue
        try:
            clean[name] = _coerce(s, value)
        except ValueError as e:
            errors[name] = str(e)
    return clean, errors


def schema_json() -> list[dict[str, Any]]:
    """The schema for the widget, which builds its controls from it."""
    return [asdict(s) for s in SCHEMA]
