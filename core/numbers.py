"""The numbers model: the ONE source of truth for every figure the course shows.

The source lesson's tables were lost, but its prose kept the facts and figures. This module
turns those facts back into arithmetic: a frozen `Inputs` (defaults = the lesson's values) and
`derive(inputs)`, which recomputes every figure and table row from them. Chapter pages render
`derive()` output (``{{ fig.ch2.workers_at_target }}``) and never hard-code a number, so a
learner who moves a slider sees every dependent figure move with it.

Pure Python, stdlib only. Conventions:

* durations are seconds, rates are per second, money is US dollars, memory is decimal
  (1 MB = 1,000,000 bytes, 1 KB = 1,000 bytes — the lesson's 36 MB only works that way);
* a month is ``hours_per_month`` hours (730, the convention behind the lesson's $54,750);
* a figure that is unbounded (utilisation at or past 1) is ``None`` in `derive()` output, so the
  result stays JSON-serialisable; the helper functions themselves return ``math.inf``.

Retry *delay* functions live in the engine's retry module, not here; this model only does the
arithmetic the lesson does about them (schedule tables, jitter peak reduction).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.backoff import exponential_delay

SECONDS_PER_DAY = 86_400
BYTES_PER_KB = 1_000
BYTES_PER_MB = 1_000_000

# The lesson's own status-endpoint response body (Chapter 3), used as the default body size for
# the ETag bandwidth figure: the lesson gives the shape of the body but not its size.
_SAMPLE_STATUS_BODY = {"job_id": "job_8f2a1c", "status": "running", "attempt_count": 0, "result_url": None}


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobType:
    """One job type in the queue's mix (Chapter 2: "a real queue is a blend")."""

    name: str
    """Stable identifier (snake_case); input names are derived from it, e.g. ``transcode_mean_s``."""
    label: str
    """Human label for tables and controls."""
    share_pct: float
    """Relative share of arrivals, in percent. Normalised by the sum across the mix, so sliders can
    move independently without having to add up to exactly 100."""
    mean_s: float
    """Mean processing time in seconds; the traffic-weighted mean over the mix is Little's W."""
    p99_s: float
    """99th-percentile processing time in seconds; sizes timeouts (visibility timeout, dedup window)."""


# The mix is reconstructed from the lesson's prose: 5 s thumbnails, 10 s waveforms, 15 s previews
# and 600 s transcodes (p99 900 s), blending to W = 30 s at λ = 100/s. The lesson's per-type shares
# were in a lost table; 80/8/8/4 % is a mix that blends to exactly 30 s with small jobs "vastly
# outnumbering" transcodes. Only the transcode p99 is in the lesson; the small jobs' p99s are the
# model's assumption (3x their mean).
DEFAULT_JOB_MIX: tuple[JobType, ...] = (
    JobType("thumbnail", "Thumbnail extraction", 80.0, 5.0, 15.0),
    JobType("waveform", "Audio waveform", 8.0, 10.0, 30.0),
    JobType("preview", "Preview clip", 8.0, 15.0, 45.0),
    JobType("transcode", "Full transcode", 4.0, 600.0, 900.0),
)

_JOB_FIELDS = ("share_pct", "mean_s", "p99_s")


@dataclass(frozen=True)
class Inputs:
    """Every number the lesson's figures are computed from; defaults are the lesson's values.

    The five input groups of Chapter 8 come first (traffic, job mix, utilisation target, worker
    price, tier split); the per-chapter parameters the lesson's other figures need follow.
    Construction validates every value against `INPUT_SPECS` and raises `InputError`.
    """

    # --- 1. traffic --------------------------------------------------------------------------
    arrival_rate: float = 100.0
    """λ, jobs arriving per second, platform-wide daily average (Ch2 "100 jobs/second"; reused by
    Ch3 completions, Ch4 poison pills, Ch5 key volume, Ch6 tier split)."""
    peak_multiplier: float = 1.8
    """Daytime peak as a multiple of the daily average λ (Ch2 "1.8× the daily average")."""
    peak_hours_per_day: float = 4.0
    """How long the peak lasts each day (Ch2: peak capacity all day "wastes money the other twenty
    hours"); prices the autoscaled peak margin."""

    # --- 2. job mix --------------------------------------------------------------------------
    job_mix: tuple[JobType, ...] = DEFAULT_JOB_MIX
    """Job types with share, mean and p99 duration (Ch2's blend; Ch1 and Ch5 read the transcode)."""

    # --- 3. utilisation target ---------------------------------------------------------------
    target_utilisation: float = 0.8
    """ρ the pool is sized for (Ch2 "3,750 workers ... at ρ = 0.8"; Ch6 inherits that pool)."""

    # --- 4. worker price ---------------------------------------------------------------------
    worker_price_per_hour: float = 0.02
    """$ per worker-hour for the lightweight, mostly-I/O-bound pool instance (Ch2 "$0.02/worker-hour")."""
    transcode_price_per_hour: float = 0.04
    """$ per worker-hour for CPU-bound transcode compute (Ch1 "$0.04/worker-hour"); prices redelivery
    waste."""
    hours_per_month: float = 730.0
    """Hours in a billing month: 730 = 365 × 24 / 12 reproduces Ch2's $54,750/month."""

    # --- 5. tier split -----------------------------------------------------------------------
    pro_share: float = 0.10
    """Fraction of λ from paying pro customers (Ch6 "90 come from the free tier and 10 from ... pro")."""
    pro_reserved_workers: int = 1000
    """Workers hard-reserved for pro under the hard split (Ch6 "1,000 workers"); free gets the rest."""
    pro_poll_weight: float = 0.7
    """Probability a worker polls the pro queue first under weighted polling (Ch6 0.7 / 0.3)."""
    aging_threshold_s: float = 300.0
    """Wait after which a free job is promoted ahead of pro under aging (Ch6 "age_threshold_s = 300")."""
    pro_revenue_per_job: float = 0.02
    """Subscription-amortised revenue per pro job, $ (Ch6 "$0.02/job"); prices the reservation."""
    burst_jobs: int = 500
    """Jobs one free customer submits at once (Ch6 per-customer fairness "500 jobs at once")."""
    burst_other_customers: int = 9
    """Other free customers with one job each during that burst (Ch6 "nine other customers")."""
    spike_multiplier: float = 2.0
    """Platform-wide spike applied to both tiers (Ch6 "Scale the whole 100/s baseline by 2×")."""

    # --- Ch0: the hand-off -------------------------------------------------------------------
    enqueue_ms: float = 5.0
    """Time for the producer to durably store a message (Ch1 recalls Ch0's "5ms")."""
    upload_response_ms: float = 55.0
    """Upload handler latency once it enqueues instead of transcoding (Ch3 "returns in 55 milliseconds")."""
    api_budget_ms: float = 200.0
    """The request/response latency budget (closing line: "a 200-millisecond API")."""
    gateway_timeout_s: float = 60.0
    """Idle timeout of the proxy or load balancer in front of the API: a request silent this long gets
    a 504 (Ch0's "gateway gives up"; 60 s is nginx's proxy_read_timeout and an AWS ALB's default).
    The lab's `gateway_timeout` setting defaults to it."""

    # --- Ch1: delivery and the visibility timeout --------------------------------------------
    transcodes_per_day: int = 500_000
    """Daily transcode volume Ch1 prices its bugs against ("500,000 transcodes/day"). Kept as its own
    input because it is NOT consistent with Ch2's λ and mix (see `derive()['ch2']`)."""
    visibility_timeout_s: float = 300.0
    """The misconfigured VT copied from a faster job type (Ch1 "VT = 300 seconds")."""
    fixed_visibility_timeout_s: float = 1200.0
    """The static fix: VT above the worst case (Ch1 "VT = 1,200s"); also feeds Ch5's dedup window."""
    heartbeat_interval_s: float = 60.0
    """How often a worker extends its claim (Ch1 "heartbeat every 60s")."""
    heartbeat_extend_s: float = 180.0
    """How far each heartbeat pushes the deadline from now (Ch1 "reset to 180s from NOW")."""
    redelivery_bug_rate: float = 0.01
    """Fraction of transcodes that outlive the short VT and collide (Ch1 "roughly 1%")."""
    crash_rate: float = 0.0001
    """Fraction of jobs whose worker dies mid-job (Ch1 "0.01% of jobs"); prices ack-early losses."""

    # --- Ch2: pool sizing --------------------------------------------------------------------
    worker_boot_s: float = 90.0
    """Time for a new worker container to start serving (Ch2 "takes 90 seconds to boot")."""

    # --- Ch3: status delivery ----------------------------------------------------------------
    poll_interval_s: float = 2.0
    """Client status-poll interval (Ch3 "every couple of seconds", "2-second polling")."""
    websocket_kb_per_connection: float = 10.0
    """Server memory per open WebSocket (Ch3 "a typical ~10KB per open connection")."""
    long_poll_max_wait_s: float = 25.0
    """How long a long-poll request is held open (Ch3 "say 25 seconds")."""
    long_poll_check_s: float = 0.5
    """How often the long-poll handler re-checks the job (Ch3 "every 500ms")."""
    status_body_bytes: int = len(json.dumps(_SAMPLE_STATUS_BODY))
    """Size of a full status body, bytes. The lesson gives the body's shape, not its size; the default
    is the length of its own example body. Feeds the ETag/304 bandwidth figure."""

    # --- Ch4: retries ------------------------------------------------------------------------
    outage_workers: int = 1000
    """Workers mid-call to storage when it goes down (Ch4 "1,000 workers")."""
    outage_s: float = 10.0
    """Length of the storage outage (Ch4 "ten seconds")."""
    retry_base_s: float = 1.0
    """Base delay of the exponential schedule (Ch4: retries at t = 1 s, 3 s, 7 s)."""
    linear_step_s: float = 2.0
    """Increment of the linear schedule it is compared with (Ch4: linear reaches 10 s by attempt 5)."""
    max_attempts: int = 5
    """Attempts before a job goes to the DLQ (Ch4 "max_attempts = 5")."""
    jitter_bucket_ms: float = 10.0
    """Width of the histogram bucket used to count simultaneous retries (Ch4 "10 milliseconds")."""
    poison_rate: float = 0.001
    """Fraction of arrivals that can never succeed (Ch4 "0.1% of the arrival stream")."""
    poison_attempt_s: float = 30.0
    """Worker time one poison-pill attempt burns. Not in the lesson (model assumption: the blended
    W); only prices the capped poison-pill row of the Ch8 cost roll-up."""
    hang_attempt_s: float = 60.0
    """Duration of an attempt that hangs before timing out (Ch4 "hang for 60 seconds")."""
    retry_budget_s: float = 120.0
    """Wall-clock retry budget (Ch4 "max_wall_s=120", "two minutes of real time")."""

    # --- Ch5: idempotency --------------------------------------------------------------------
    idempotency_key_bytes: int = 100
    """Stored bytes per remembered idempotency key (implied by Ch5's 36 MB for 360,000 keys)."""
    dedup_round_to_s: float = 3600.0
    """Granularity the worst-case chain is rounded up to (Ch5 "a clean 1-hour (3,600s) ... window")."""
    offline_client_retry_s: float = 2400.0
    """A slow legitimate duplicate: a mobile client retrying after being offline (Ch5 "forty minutes")."""

    # --- Ch7: scheduled work -----------------------------------------------------------------
    scheduler_replicas: int = 10
    """API replicas each running the same in-process scheduler (Ch7 "10 replicas")."""
    cron_interval_s: float = 300.0
    """Tick interval of the scheduled task (Ch7 "every five minutes")."""
    task_p99_s: float = 45.0
    """p99 duration of the scheduled task (Ch7 "takes up to 45 seconds at its p99")."""
    short_lock_ttl_s: float = 30.0
    """The too-short lock TTL (Ch7 "a plausible-looking round number, 30 seconds")."""
    lock_ttl_s: float = 120.0
    """The properly sized lock TTL (Ch7 "TTL = 120s, nearly 3× the 45s p99")."""
    clock_skew_s: float = 2.0
    """Pessimistic clock drift between nodes (Ch7 "a pessimistic 2-second skew")."""
    leader_lease_s: float = 60.0
    """Leader-election lease length (Ch7 "say, 60 seconds")."""
    users: int = 10_000_000
    """Users whose feed is reprocessed daily (Ch7 "10,000,000 users")."""
    shard_buckets: int = 1440
    """Hash buckets the daily job is sharded into (Ch7 "1,440 buckets — one per minute")."""
    catchup_factor: float = 1.5
    """A tick counts as missed when the last run is older than this × interval (Ch7 "interval_s * 1.5")."""
    late_replica_s: float = 36.0
    """How long after a tick the latest replica's scheduler fires (a deploy, a GC pause, a scheduler
    polling every few seconds). Not in the lesson: a model assumption between the short TTL (30 s) and
    the p99 (45 s), the window in which a late replica finds the lock expired under a live holder. The
    chapter 7 lab's `cron_late` setting defaults to it."""

    # --- Ch8: the assembled pipeline ---------------------------------------------------------
    demo_speed: float = 20.0
    """Simulated seconds per real second in the demo (Ch8 "roughly 20× real speed")."""

    # --- table layouts (not learner inputs) --------------------------------------------------
    wait_curve_utilisations: tuple[float, ...] = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.3)
    """ρ values of Ch2's wait-vs-pool-size table; at λ = 100/s, W = 30 s they give the lesson's pool
    sizes 3,000 (ρ = 1), 3,750, 6,000 and 10,000."""
    poll_interval_options: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)
    """Poll intervals of Ch3's "widen the poll interval" table."""
    shard_bucket_options: tuple[int, ...] = (1, 24, 1440, 86_400)
    """Bucket counts of Ch7's "choosing the bucket count" table (daily, hourly, per minute, per second)."""

    def __post_init__(self) -> None:
        errors = _validate_inputs(self)
        if errors:
            raise InputError(errors)

    def job(self, name: str) -> JobType:
        """The job type called `name` (Ch1 and Ch5 reason about the transcode specifically)."""
        for jt in self.job_mix:
            if jt.name == name:
                return jt
        raise KeyError(name)

    def flat(self) -> dict[str, float | int]:
        """Every learner-changeable input as ``{name: value}`` — the shape `INPUT_SPECS` describes."""
        names = {jt.name for jt in self.job_mix}
        values: dict[str, float | int] = {}
        for spec in INPUT_SPECS:
            split = _split_job_name(spec.name) if spec.group == "job_mix" else None
            if split is None or split[0] in names:  # a custom mix may lack a default job type
                values[spec.name] = _read_flat(self, spec.name)
        return values


class InputError(ValueError):
    """Bad learner-supplied inputs. ``errors`` (also ``args[0]``) maps field name → message, so an
    API can answer 422 with per-field errors and a form can show each message beside its control."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(errors)
        self.errors = errors


# --------------------------------------------------------------------------------------------
# Input specs: what a page builds controls from and what the API validates against
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    """One learner-changeable input: enough to render a slider and to validate a value."""

    name: str
    label: str
    unit: str
    min: float
    max: float
    step: float
    kind: str = "float"  # "float" or "int"
    group: str = "traffic"  # traffic | job_mix | utilisation | price | tiers | ch0 … ch8

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _job_specs() -> list[InputSpec]:
    specs: list[InputSpec] = []
    for jt in DEFAULT_JOB_MIX:
        # A job of minutes steps by whole seconds, one of seconds by tenths: one ArrowUp must move a figure
        # the page shows (a tenth of a second on a 15-minute p99 rounds away). min is on the step's grid.
        tick = 1.0 if jt.mean_s >= 60 else 0.1
        specs += [
            InputSpec(f"{jt.name}_share_pct", f"{jt.label}: share of arrivals", "%", 0, 100, 0.5,
                      group="job_mix"),
            InputSpec(f"{jt.name}_mean_s", f"{jt.label}: mean duration", "s", tick, 7200, tick,
                      group="job_mix"),
            InputSpec(f"{jt.name}_p99_s", f"{jt.label}: p99 duration", "s", tick, 14400, tick,
                      group="job_mix"),
        ]
    return specs


def _spec(name: str, label: str, unit: str, lo: float, hi: float, step: float, group: str,
          kind: str = "float") -> InputSpec:
    return InputSpec(name, label, unit, lo, hi, step, kind, group)


INPUT_SPECS: tuple[InputSpec, ...] = (
    _spec("arrival_rate", "Arrival rate λ", "jobs/s", 1, 1000, 1, "traffic"),
    _spec("peak_multiplier", "Peak multiplier", "×", 1, 5, 0.1, "traffic"),
    _spec("peak_hours_per_day", "Peak hours per day", "h", 0, 24, 0.5, "traffic"),
    *_job_specs(),
    _spec("target_utilisation", "Target utilisation ρ", "", 0.05, 0.99, 0.01, "utilisation"),
    _spec("worker_price_per_hour", "Worker price (pool)", "$/worker-hour", 0.001, 5, 0.001, "price"),
    _spec("transcode_price_per_hour", "Worker price (CPU transcode)", "$/worker-hour", 0.001, 5, 0.001,
          "price"),
    _spec("hours_per_month", "Hours per month", "h", 672, 744, 1, "price"),
    _spec("pro_share", "Pro share of traffic", "fraction", 0, 1, 0.01, "tiers"),
    _spec("pro_reserved_workers", "Workers reserved for pro", "workers", 0, 1_000_000, 10, "tiers", "int"),
    _spec("pro_poll_weight", "Weighted polling: P(pro first)", "probability", 0, 1, 0.05, "tiers"),
    _spec("aging_threshold_s", "Aging threshold", "s", 1, 86_400, 1, "tiers"),
    _spec("pro_revenue_per_job", "Pro revenue per job", "$", 0, 10, 0.001, "tiers"),
    _spec("burst_jobs", "Burst size (one customer)", "jobs", 1, 100_000, 1, "tiers", "int"),
    _spec("burst_other_customers", "Other customers during burst", "customers", 0, 10_000, 1, "tiers",
          "int"),
    _spec("spike_multiplier", "Platform-wide spike", "×", 1, 10, 0.1, "tiers"),
    _spec("enqueue_ms", "Enqueue (durable write) time", "ms", 0.1, 1000, 0.1, "ch0"),
    _spec("upload_response_ms", "Upload response time with enqueue", "ms", 1, 10_000, 1, "ch0"),
    _spec("api_budget_ms", "API latency budget", "ms", 10, 60_000, 10, "ch0"),
    _spec("gateway_timeout_s", "Gateway (proxy) timeout", "s", 1, 3600, 1, "ch0"),
    # min on the step's grid: a browser counts steps from min, and a default off that grid holds the form invalid
    _spec("transcodes_per_day", "Transcodes per day", "jobs/day", 1000, 100_000_000, 1000, "ch1", "int"),
    _spec("visibility_timeout_s", "Visibility timeout (misconfigured)", "s", 1, 43_200, 1, "ch1"),
    _spec("fixed_visibility_timeout_s", "Visibility timeout (static fix)", "s", 1, 43_200, 1, "ch1"),
    _spec("heartbeat_interval_s", "Heartbeat interval", "s", 1, 3600, 1, "ch1"),
    _spec("heartbeat_extend_s", "Heartbeat extends lease by", "s", 1, 43_200, 1, "ch1"),
    _spec("redelivery_bug_rate", "Share of jobs hitting the VT bug", "fraction", 0, 1, 0.001, "ch1"),
    _spec("crash_rate", "Worker crash rate per job", "fraction", 0, 0.1, 0.0001, "ch1"),
    _spec("worker_boot_s", "Worker boot time", "s", 0, 3600, 1, "ch2"),
    _spec("poll_interval_s", "Poll interval", "s", 0.1, 600, 0.1, "ch3"),
    _spec("websocket_kb_per_connection", "Memory per WebSocket", "KB", 0.1, 1000, 0.1, "ch3"),
    _spec("long_poll_max_wait_s", "Long-poll hold time", "s", 1, 300, 1, "ch3"),
    _spec("long_poll_check_s", "Long-poll re-check interval", "s", 0.01, 60, 0.01, "ch3"),
    _spec("status_body_bytes", "Status body size", "bytes", 1, 1_000_000, 1, "ch3", "int"),
    _spec("outage_workers", "Workers hit by the outage", "workers", 1, 1_000_000, 1, "ch4", "int"),
    _spec("outage_s", "Outage length", "s", 0, 3600, 1, "ch4"),
    _spec("retry_base_s", "Retry base delay", "s", 0.01, 600, 0.01, "ch4"),
    _spec("linear_step_s", "Linear backoff step", "s", 0.01, 600, 0.01, "ch4"),
    _spec("max_attempts", "Max attempts", "attempts", 1, 20, 1, "ch4", "int"),
    _spec("jitter_bucket_ms", "Histogram bucket width", "ms", 0.1, 10_000, 0.1, "ch4"),
    _spec("poison_rate", "Poison-pill rate", "fraction", 0, 0.1, 0.0001, "ch4"),
    _spec("poison_attempt_s", "Worker time per poison attempt", "s", 0, 3600, 1, "ch4"),
    _spec("hang_attempt_s", "Hanging attempt duration", "s", 0, 3600, 1, "ch4"),
    _spec("retry_budget_s", "Retry wall-clock budget", "s", 1, 86_400, 1, "ch4"),
    _spec("idempotency_key_bytes", "Bytes per idempotency key", "bytes", 1, 10_000, 1, "ch5", "int"),
    _spec("dedup_round_to_s", "Round dedup window up to", "s", 1, 86_400, 1, "ch5"),
    _spec("offline_client_retry_s", "Offline client retry delay", "s", 0, 604_800, 60, "ch5"),
    _spec("scheduler_replicas", "Scheduler replicas", "replicas", 1, 1000, 1, "ch7", "int"),
    _spec("cron_interval_s", "Cron interval", "s", 1, 86_400, 1, "ch7"),
    _spec("task_p99_s", "Scheduled task p99", "s", 0.1, 86_400, 0.1, "ch7"),
    _spec("short_lock_ttl_s", "Lock TTL (too short)", "s", 1, 86_400, 1, "ch7"),
    _spec("lock_ttl_s", "Lock TTL (sized)", "s", 1, 86_400, 1, "ch7"),
    _spec("clock_skew_s", "Clock skew between nodes", "s", 0, 600, 0.1, "ch7"),
    _spec("leader_lease_s", "Leader lease", "s", 1, 3600, 1, "ch7"),
    # 0, not 1000: on the 1,000 grid, and chapter 7's lab still models its own 1–5,000 users (app/schedule.py)
    _spec("users", "Users (daily feed job)", "users", 0, 10_000_000_000, 1000, "ch7", "int"),
    _spec("shard_buckets", "Shard buckets per day", "buckets", 1, 86_400, 1, "ch7", "int"),
    _spec("catchup_factor", "Missed-tick factor", "× interval", 1, 10, 0.1, "ch7"),
    _spec("late_replica_s", "Latest replica fires after the tick", "s", 0, 3600, 1, "ch7"),
    _spec("demo_speed", "Demo clock speed", "× real time", 1, 1000, 1, "ch8"),
)
SPECS_BY_NAME: dict[str, InputSpec] = {spec.name: spec for spec in INPUT_SPECS}


def _split_job_name(name: str) -> tuple[str, str] | None:
    """``"transcode_p99_s"`` → ``("transcode", "p99_s")``; None for a non-job-mix input."""
    for suffix in _JOB_FIELDS:
        if name.endswith("_" + suffix):
            return name[: -len(suffix) - 1], suffix
    return None


def _read_flat(inputs: Inputs, name: str) -> float | int:
    split = _split_job_name(name) if SPECS_BY_NAME[name].group == "job_mix" else None
    if split:
        return getattr(inputs.job(split[0]), split[1])
    return getattr(inputs, name)


def _check_value(spec: InputSpec, value: Any) -> tuple[float | int | None, str | None]:
    """Coerce one learner value to the spec's kind; (value, None) or (None, message).

    Numeric strings are accepted because HTML forms (htmx) post strings; booleans, None, lists,
    non-numeric strings, NaN and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None, f"must be a number, got {type(value).__name__}"
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None, f"must be a number, got {value!r}"
    if not math.isfinite(value):
        return None, "must be a finite number"
    if spec.kind == "int":
        if float(value) != int(value):
            return None, f"must be a whole number, got {value}"
        value = int(value)
    else:
        value = float(value)
    if not spec.min <= value <= spec.max:
        unit = f" {spec.unit}" if spec.unit else ""
        return None, f"must be between {spec.min:g} and {spec.max:g}{unit}, got {value:g}"
    return value, None


def _validate_inputs(inputs: Inputs) -> dict[str, str]:
    """Range checks for every spec'd field plus the cross-field rules derive() relies on."""
    errors: dict[str, str] = {}
    names = [jt.name for jt in inputs.job_mix]
    if "transcode" not in names:
        errors["job_mix"] = "must include a 'transcode' job type (Chapters 1 and 5 reason about it)"
    if len(set(names)) != len(names):
        errors["job_mix"] = "job type names must be unique"
    if sum(jt.share_pct for jt in inputs.job_mix) <= 0:
        errors["job_mix"] = "at least one job type needs a share above 0"
    for jt in inputs.job_mix:
        if jt.share_pct < 0:
            errors[f"{jt.name}_share_pct"] = "must be ≥ 0"
        if jt.mean_s <= 0:
            errors[f"{jt.name}_mean_s"] = "must be > 0"
        elif jt.p99_s < jt.mean_s:
            errors[f"{jt.name}_p99_s"] = f"p99 ({jt.p99_s:g} s) cannot be below the mean ({jt.mean_s:g} s)"
    if errors.get("job_mix"):
        return errors
    for spec in INPUT_SPECS:
        split = _split_job_name(spec.name) if spec.group == "job_mix" else None
        if split and split[0] not in names:
            continue  # a custom mix without this default job type
        if spec.name in errors:
            continue
        _, message = _check_value(spec, _read_flat(inputs, spec.name))
        if message:
            errors[spec.name] = message
    if not all(0 < rho <= 1 for rho in inputs.wait_curve_utilisations):
        errors["wait_curve_utilisations"] = "each ρ must be in (0, 1]"
    if not all(t > 0 for t in inputs.poll_interval_options):
        errors["poll_interval_options"] = "each interval must be > 0"
    if not all(isinstance(b, int) and b > 0 for b in inputs.shard_bucket_options):
        errors["shard_bucket_options"] = "each bucket count must be a positive integer"
    return errors


def inputs_from_mapping(mapping: Mapping[str, Any], base: Inputs | None = None) -> Inputs:
    """Build `Inputs` from learner-supplied ``{name: value}`` (JSON body or form), on top of `base`
    (default: the lesson's values). Every problem is collected — unknown name, wrong type, out of
    range, cross-field — and raised at once as `InputError` (a ValueError) with a per-field dict,
    so the caller can return a single 422 listing everything that is wrong."""
    base = base or Inputs()
    errors: dict[str, str] = {}
    clean: dict[str, float | int] = {}
    for name, raw in mapping.items():
        spec = SPECS_BY_NAME.get(name)
        if spec is None:
            errors[str(name)] = "unknown input"
            continue
        value, message = _check_value(spec, raw)
        if message:
            errors[name] = message
        else:
            clean[name] = value  # type: ignore[assignment]
    if errors:
        raise InputError(errors)
    scalar = {k: v for k, v in clean.items() if SPECS_BY_NAME[k].group != "job_mix"}
    mix = list(base.job_mix)
    for name, value in clean.items():
        split = _split_job_name(name) if SPECS_BY_NAME[name].group == "job_mix" else None
        if split:
            idx = next((i for i, jt in enumerate(mix) if jt.name == split[0]), None)
            if idx is None:
                errors[name] = f"the current job mix has no '{split[0]}' job type"
                continue
            mix[idx] = dataclasses.replace(mix[idx], **{split[1]: value})
    if errors:
        raise InputError(errors)
    return dataclasses.replace(base, job_mix=tuple(mix), **scalar)


# --------------------------------------------------------------------------------------------
# Helper formulas (used by derive() and elsewhere in the app)
# --------------------------------------------------------------------------------------------


def littles_law_L(lam: float, W: float) -> float:
    """Jobs in flight L = λW. Why: it converts an arrival rate and a mean duration into the
    concurrency every later figure is sized from (workers, open sockets, polling clients)."""
    return lam * W


def workers_for_utilisation(lam: float, W: float, rho: float) -> int:
    """Workers c so that utilisation L / c is at most `rho`. Why ceil: a fractional worker cannot
    be rented, and rounding down would run the pool hotter than the target. The tiny epsilon keeps
    exact lesson cases (3,000 / 0.8 = 3,750) from being pushed up by float rounding."""
    if not 0 < rho <= 1:
        raise ValueError("rho must be in (0, 1]")
    return max(1, math.ceil(littles_law_L(lam, W) / rho - 1e-9))


def approx_wait(W: float, rho: float) -> float:
    """The lesson's wait approximation W / (1 − ρ), transplanted from the M/M/1 queue.

    Why keep it: it is the lesson's own arithmetic (150 s at ρ = 0.8) and it shows the curve's
    shape. Caveat: for one server it is the exact M/M/1 *time in system* (wait + service), and for
    c parallel servers it overstates the wait enormously — compare `erlang_c_wait`.
    Returns ``math.inf`` at ρ ≥ 1: the queue grows without bound."""
    if rho >= 1:
        return math.inf
    return W / (1 - rho)


def erlang_b(c: int, offered_load: float) -> float:
    """Erlang B blocking probability for c servers and offered load a = λ·S, by the recursion
    B(k) = a·B(k−1) / (k + a·B(k−1)).

    Why this form: the textbook formula needs a^c / c!, which overflows for c in the thousands;
    the recursion only ever holds a probability. Two shortcuts keep it fast for large pools: it
    starts ~10σ below the load (starting error shrinks by ~e^-50 before k reaches a) and stops
    once B underflows (the wait is then 0 to double precision)."""
    if c < 0 or offered_load < 0:
        raise ValueError("c and offered_load must be ≥ 0")
    if offered_load == 0:
        return 0.0 if c > 0 else 1.0
    start = max(0, int(offered_load - 10 * math.sqrt(offered_load) - 10))
    b = 1.0
    for k in range(start + 1, c + 1):
        b = offered_load * b / (k + offered_load * b)
        if b < 1e-300:
            return 0.0
    return b


def erlang_c(c: int, offered_load: float) -> float:
    """Probability an arriving job has to wait in an M/M/c queue (Erlang C), from Erlang B:
    C = c·B / (c − a·(1 − B)). Why: it is the exact counterpart of the lesson's approximation."""
    if offered_load >= c:
        return 1.0
    b = erlang_b(c, offered_load)
    return c * b / (c - offered_load * (1 - b))


def erlang_c_wait(lam: float, mean_service: float, c: int) -> float:
    """Exact mean queue wait Wq of an M/M/c queue: C(c, a) · S / (c − a), with a = λ·S.

    Why: the lesson calls Erlang C "outside this lesson's scope"; the course shows it beside the
    approximation so learners see how much pooling c servers really buys. ``math.inf`` when
    a ≥ c (unstable queue)."""
    if c <= 0:
        return math.inf
    a = lam * mean_service
    if a >= c:
        return math.inf
    return erlang_c(c, a) * mean_service / (c - a)


def blended_duration(job_mix: tuple[JobType, ...]) -> float:
    """Little's W for a mix: the traffic-weighted mean duration. Why traffic-weighted: W is the
    mean time a job *arriving* spends in service, so each type counts by how often it arrives."""
    total = sum(jt.share_pct for jt in job_mix)
    return sum(jt.share_pct * jt.mean_s for jt in job_mix) / total


def jitter_peak_per_bucket(clients: int, window_s: float, bucket_s: float) -> float:
    """Expected retries landing in one histogram bucket when `clients` each pick a delay uniformly
    in [0, window_s] (full jitter). Why: it is the peak load a recovering dependency sees; without
    jitter all `clients` land in the same bucket."""
    buckets = max(1.0, window_s / bucket_s)
    return clients / buckets


def jitter_expected_peak(clients: int, window_s: float, bucket_s: float) -> float:
    """Expected count in the FULLEST bucket when `clients` draw uniformly over `window_s` (full jitter).
    Why: with tens of callers, not thousands, the busiest bucket sits well above the mean
    (jitter_peak_per_bucket); this is the peak a measured histogram should be compared with.
    Each bucket is Binomial(clients, 1/buckets); buckets are treated as independent."""
    buckets = max(1, round(window_s / bucket_s))
    if clients <= 0:
        return 0.0
    p = 1.0 / buckets
    cdf, term = [], (1 - p) ** clients
    acc = 0.0
    for k in range(clients + 1):
        acc += term
        cdf.append(min(1.0, acc))
        term = term * (clients - k) / (k + 1) * p / (1 - p) if p < 1 else 0.0
    return sum(1 - c ** buckets for c in cdf)


def jitter_peak_reduction(window_s: float, bucket_s: float) -> float:
    """How many times lower the peak bucket is with full jitter than without (the lesson's 100×):
    the window divided into buckets, never below 1."""
    return max(1.0, window_s / bucket_s)


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    """Format a figure for a sentence; None (unbounded) reads as "unbounded"."""
    return "unbounded" if x is None else f"{x:{spec}}{unit}"


def _finite(x: float) -> float | None:
    """inf → None so derive() output stays JSON-serialisable; None reads as "unbounded"."""
    return None if math.isinf(x) or math.isnan(x) else x


# --------------------------------------------------------------------------------------------
# Chapter figures
# --------------------------------------------------------------------------------------------


def _core(inputs: Inputs) -> dict[str, float]:
    """The handful of quantities nearly every chapter reuses."""
    W = blended_duration(inputs.job_mix)
    lam = inputs.arrival_rate
    workers = workers_for_utilisation(lam, W, inputs.target_utilisation)
    return {
        "W": W,
        "lam": lam,
        "L": littles_law_L(lam, W),
        "workers": workers,
        "wait": approx_wait(W, inputs.target_utilisation),
    }


def _ch0(inputs: Inputs) -> dict[str, Any]:
    transcode = inputs.job("transcode")
    return {
        "enqueue_ms": inputs.enqueue_ms,
        "upload_response_ms": inputs.upload_response_ms,
        "inline_transcode_s": transcode.mean_s,
        "api_budget_ms": inputs.api_budget_ms,
        "inline_over_budget_x": transcode.mean_s * 1000 / inputs.api_budget_ms,
        "inline_vs_enqueue_x": transcode.mean_s * 1000 / inputs.upload_response_ms,
        "gateway_timeout_s": inputs.gateway_timeout_s,
        "inline_gets_504": transcode.mean_s > inputs.gateway_timeout_s,
        "inline_over_gateway_x": transcode.mean_s / inputs.gateway_timeout_s,
        "inline_unheard_s": max(0.0, transcode.mean_s - inputs.gateway_timeout_s),
    }


def _collision_overlap_s(vt: float, mean: float, p99: float) -> float:
    """Duplicated compute per collision: the original's remaining run after the VT fires (the
    lesson's 600 − 300 = 300 s). If the VT covers the typical job, only slow (p99) jobs collide."""
    duration = mean if vt < mean else p99
    return max(0.0, duration - vt)


def _redelivery_timeline(vt: float, duration: float) -> list[dict[str, Any]]:
    """Ch1's hand-walked timeline of one job under a visibility timeout."""
    rows = [{"t_s": 0.0, "actor": "Worker A", "event": "claims the message; broker hides it for the VT"}]
    if vt >= duration:
        rows.append({"t_s": duration, "actor": "Worker A", "event": "finishes and deletes the message"})
        return rows
    rows += [
        {"t_s": vt, "actor": "Broker", "event": "VT expires while A is still working; message visible again"},
        {"t_s": vt, "actor": "Worker B", "event": "claims the same message and starts a duplicate"},
        {"t_s": duration, "actor": "Worker A", "event": "finishes and deletes — B is still running"},
        {"t_s": vt + duration, "actor": "Worker B", "event": "finishes the duplicate: same work done twice"},
    ]
    return rows


def _heartbeat_timeline(inputs: Inputs, crash_at_s: float = 10.0) -> list[dict[str, Any]]:
    """Lease deadlines with heartbeats vs a static VT, for a worker that dies at `crash_at_s`."""
    beat, extend = inputs.heartbeat_interval_s, inputs.heartbeat_extend_s
    last_beat = math.floor(crash_at_s / beat) * beat
    rows = [{"t_s": 0.0, "event": f"claim; lease runs to t = {extend:g} s"}]
    for k in range(1, 4):
        t = k * beat
        rows.append({"t_s": t, "event": f"heartbeat (if alive): lease extended to t = {t + extend:g} s"})
    rows.append({"t_s": crash_at_s, "event": "worker crashes"})
    rows.append({"t_s": last_beat + extend, "event": "heartbeat lease expires → redelivered"})
    rows.append({"t_s": inputs.fixed_visibility_timeout_s,
                 "event": "static VT would only expire now → redelivered"})
    return sorted(rows, key=lambda r: r["t_s"])


def _ch1(inputs: Inputs, core: dict[str, float]) -> dict[str, Any]:
    t = inputs.job("transcode")
    vt = inputs.visibility_timeout_s
    collides = vt < t.p99_s
    overlap = _collision_overlap_s(vt, t.mean_s, t.p99_s)
    collisions = inputs.transcodes_per_day * inputs.redelivery_bug_rate if collides else 0.0
    wasted_hours_day = collisions * overlap / 3600
    waste_day = wasted_hours_day * inputs.transcode_price_per_hour
    days_per_month = inputs.hours_per_month / 24
    lost_day = inputs.transcodes_per_day * inputs.crash_rate
    hb_safe = inputs.heartbeat_interval_s < inputs.heartbeat_extend_s
    return {
        "transcode_mean_s": t.mean_s,
        "transcode_p99_s": t.p99_s,
        "visibility_timeout_s": vt,
        "vt_covers_mean": vt >= t.mean_s,
        "vt_covers_p99": vt >= t.p99_s,
        "collision_overlap_s": overlap,
        "collisions_per_day": collisions,
        "wasted_worker_hours_per_day": wasted_hours_day,
        "redelivery_waste_usd_per_day": waste_day,
        "redelivery_waste_usd_per_month": waste_day * days_per_month,
        "fixed_vt_s": inputs.fixed_visibility_timeout_s,
        "fixed_vt_over_p99_x": inputs.fixed_visibility_timeout_s / t.p99_s,
        "fixed_vt_over_mean_x": inputs.fixed_visibility_timeout_s / t.mean_s,
        "fixed_vt_crash_detection_s": inputs.fixed_visibility_timeout_s,
        "fixed_vt_crash_detection_min": inputs.fixed_visibility_timeout_s / 60,
        "heartbeat_interval_s": inputs.heartbeat_interval_s,
        "heartbeat_extend_s": inputs.heartbeat_extend_s,
        "heartbeat_crash_detection_s": inputs.heartbeat_extend_s,
        "heartbeat_missed_beats": inputs.heartbeat_extend_s / inputs.heartbeat_interval_s,
        "heartbeat_safe": hb_safe,
        "ack_early_lost_per_day": lost_day,
        "ack_early_lost_per_month": lost_day * days_per_month,
        "ack_late_lost_per_day": 0,
        "redelivery_timeline": _redelivery_timeline(vt, t.mean_s),
        "heartbeat_timeline": _heartbeat_timeline(inputs),
        "delivery_guarantees": [
            {"guarantee": "at-most-once", "ack": "early (delete on claim)",
             "on_crash": "job lost", "lost_per_day": lost_day, "duplicates_per_day": 0.0},
            {"guarantee": "at-least-once", "ack": "late (delete after success)",
             "on_crash": "redelivered after the VT", "lost_per_day": 0.0,
             "duplicates_per_day": collisions + lost_day},
            {"guarantee": "effectively-once", "ack": "late + idempotent handler",
             "on_crash": "redelivered; duplicate is a no-op", "lost_per_day": 0.0,
             "duplicates_per_day": 0.0},
        ],
        "vt_by_job_type": [
            {"job_type": jt.name, "label": jt.label, "mean_s": jt.mean_s, "p99_s": jt.p99_s,
             "vt_s": vt, "vt_covers_p99": vt >= jt.p99_s}
            for jt in inputs.job_mix
        ],
    }


def _wait_row(lam: float, W: float, workers: int) -> dict[str, Any]:
    L = littles_law_L(lam, W)
    rho = L / workers
    mmc = erlang_c_wait(lam, W, workers)
    return {
        "workers": workers,
        "rho": rho,
        "approx_wait_s": _finite(approx_wait(W, rho)),
        "mmc_wait_s": _finite(mmc),
        "mmc_p_wait": erlang_c(workers, L) if rho < 1 else 1.0,
        "mmc_time_in_system_s": _finite(mmc + W),
    }


def _ch2(inputs: Inputs, core: dict[str, float]) -> dict[str, Any]:
    W, lam, L, workers = core["W"], core["lam"], core["L"], int(core["workers"])
    price_month = inputs.worker_price_per_hour * inputs.hours_per_month
    monthly = workers * price_month
    total_share = sum(jt.share_pct for jt in inputs.job_mix)
    peak_lam = lam * inputs.peak_multiplier
    peak_L = littles_law_L(peak_lam, W)
    peak_workers = workers_for_utilisation(peak_lam, W, inputs.target_utilisation)
    backlog = peak_lam * inputs.worker_boot_s
    margin = peak_workers - workers
    autoscaled_avg = workers + margin * inputs.peak_hours_per_day / 24
    curve = [_wait_row(lam, W, workers_for_utilisation(lam, W, rho))
             for rho in inputs.wait_curve_utilisations]
    for row, rho in zip(curve, inputs.wait_curve_utilisations, strict=True):
        row["target_rho"] = rho
        row["monthly_cost_usd"] = row["workers"] * price_month
    jobs_month = lam * 3600 * inputs.hours_per_month
    mix_rows = []
    for jt in inputs.job_mix:
        rate = lam * jt.share_pct / total_share
        mix_rows.append({
            "job_type": jt.name, "label": jt.label, "share": jt.share_pct / total_share,
            "rate_per_s": rate, "per_day": rate * SECONDS_PER_DAY, "mean_s": jt.mean_s, "p99_s": jt.p99_s,
            "in_flight": littles_law_L(rate, jt.mean_s),
            "share_of_in_flight": littles_law_L(rate, jt.mean_s) / L,
        })
    transcode_rate = next(r["rate_per_s"] for r in mix_rows if r["job_type"] == "transcode")
    return {
        "arrival_rate": lam,
        "blended_duration_s": W,
        "in_flight_jobs": L,
        "workers_at_utilisation_1": workers_for_utilisation(lam, W, 1.0),
        "target_utilisation": inputs.target_utilisation,
        "workers_at_target": workers,
        "utilisation_at_target": L / workers,
        "queue_wait_s": _finite(core["wait"]),
        "expected_completion_s": _finite(core["wait"] + W),
        "mmc_wait_at_target_s": _finite(erlang_c_wait(lam, W, workers)),
        "mmc_p_wait_at_target": erlang_c(workers, L),
        "worker_price_per_hour": inputs.worker_price_per_hour,
        "pool_cost_usd_per_hour": workers * inputs.worker_price_per_hour,
        "monthly_cost_usd": monthly,
        "jobs_per_month": jobs_month,
        "cost_per_job_usd": monthly / jobs_month,
        "cost_per_job_cents": monthly / jobs_month * 100,
        "job_mix": mix_rows,
        "transcodes_per_day_from_mix": transcode_rate * SECONDS_PER_DAY,
        "wait_curve": curve,
        "peak_multiplier": inputs.peak_multiplier,
        "peak_arrival_rate": peak_lam,
        "peak_in_flight_jobs": peak_L,
        "peak_workers": peak_workers,
        "peak_utilisation_on_average_pool": peak_L / workers,
        "peak_wait_on_average_pool_s": _finite(approx_wait(W, peak_L / workers)),
        "peak_monthly_cost_usd": peak_workers * price_month,
        "autoscaled_avg_workers": autoscaled_avg,
        "autoscaled_monthly_cost_usd": autoscaled_avg * price_month,
        "peak_margin_monthly_cost_usd": (autoscaled_avg - workers) * price_month,
        "always_peak_savings_usd_per_month": (peak_workers - autoscaled_avg) * price_month,
        "worker_boot_s": inputs.worker_boot_s,
        "autoscale_backlog_jobs": backlog,
        "autoscale_backlog_excess_jobs": max(0.0, (peak_lam - workers / W) * inputs.worker_boot_s),
        "autoscale_workers_to_drain_backlog": math.ceil(backlog * W / core["wait"] - 1e-9)
        if math.isfinite(core["wait"]) else None,
    }


def _ch3(inputs: Inputs, core: dict[str, float]) -> dict[str, Any]:
    lam, L = core["lam"], core["L"]
    polls = L / inputs.poll_interval_s
    unchanged = max(0.0, 1 - lam / polls)
    ws_bytes = L * inputs.websocket_kb_per_connection * BYTES_PER_KB
    long_poll_rate = max(lam, L / inputs.long_poll_max_wait_s)
    interval_rows = [
        {"interval_s": t, "polls_per_s": L / t, "polls_per_completion": L / t / lam,
         "mean_delay_to_learn_s": t / 2, "worst_delay_to_learn_s": t}
        for t in inputs.poll_interval_options
    ]
    return {
        "watched_jobs": L,
        "poll_interval_s": inputs.poll_interval_s,
        "polls_per_s": polls,
        "completions_per_s": lam,
        "polls_per_completion": polls / lam,
        "poll_mean_delay_to_learn_s": inputs.poll_interval_s / 2,
        "poll_interval_table": interval_rows,
        "webhook_requests_per_s": lam,
        "webhook_reduction_x": polls / lam,
        "websocket_connections": L,
        "websocket_memory_bytes": ws_bytes,
        "websocket_memory_mb": ws_bytes / BYTES_PER_MB,
        "long_poll_max_wait_s": inputs.long_poll_max_wait_s,
        "long_poll_delay_to_learn_s": inputs.long_poll_check_s,
        "long_poll_held_connections": L,
        "long_poll_requests_per_s": long_poll_rate,
        "etag_unchanged_fraction": unchanged,
        "etag_not_modified_per_s": polls * unchanged,
        "status_body_bytes": inputs.status_body_bytes,
        "etag_bandwidth_saved_bytes_per_s": polls * unchanged * inputs.status_body_bytes,
        "delivery_mechanisms": [
            {"mechanism": "polling", "requests_per_s": polls,
             "mean_delay_to_learn_s": inputs.poll_interval_s / 2,
             "server_holds": "nothing", "best_for": "first version; any client"},
            {"mechanism": "long polling", "requests_per_s": long_poll_rate,
             "mean_delay_to_learn_s": inputs.long_poll_check_s, "server_holds": f"{L:,.0f} open requests",
             "best_for": "browsers without a socket tier"},
            {"mechanism": "webhook", "requests_per_s": lam, "mean_delay_to_learn_s": 0.0,
             "server_holds": "outbound calls + retries", "best_for": "server-to-server clients"},
            {"mechanism": "WebSocket", "requests_per_s": 0.0, "mean_delay_to_learn_s": 0.0,
             "server_holds": f"{ws_bytes / BYTES_PER_MB:,.1f} MB of sockets",
             "best_for": "browser tabs that cannot receive a callback"},
        ],
        "state_transitions": [
            {"from": "queued", "to": "running", "valid": True, "when": "a worker claims the job (CAS)"},
            {"from": "running", "to": "done", "valid": True, "when": "the attempt succeeds"},
            {"from": "running", "to": "retrying", "valid": True,
             "when": "a retryable failure, attempts left"},
            {"from": "retrying", "to": "running", "valid": True, "when": "the retry is claimed"},
            {"from": "running", "to": "failed", "valid": True,
             "when": "non-retryable or attempts exhausted → DLQ"},
            {"from": "done", "to": "running", "valid": False,
             "when": "a redelivered duplicate after success — CAS updates 0 rows"},
        ],
    }


def _retry_schedule(inputs: Inputs) -> list[dict[str, Any]]:
    rows, lin_total, exp_total = [], 0.0, 0.0
    for n in range(1, inputs.max_attempts + 1):
        lin, exp = inputs.linear_step_s * n, exponential_delay(n, inputs.retry_base_s, math.inf)
        lin_total += lin
        exp_total += exp
        rows.append({
            "attempt": n, "linear_delay_s": lin, "linear_total_s": lin_total,
            "exponential_delay_s": exp, "exponential_total_s": exp_total,
            "full_jitter_max_s": exp, "full_jitter_mean_s": exp / 2,
            "herd_retry_at_s": exp_total, "dependency_down": exp_total < inputs.outage_s,
        })
    return rows


def _retry_budget(inputs: Inputs) -> dict[str, float]:
    """Walk attempts that each hang `hang_attempt_s`, with the un-jittered schedule between them,
    checking the count cap and the wall-clock budget after each failure (Ch4's handle_failure)."""
    elapsed, attempts = 0.0, 0
    while True:
        attempts += 1
        elapsed += inputs.hang_attempt_s
        if attempts >= inputs.max_attempts or elapsed > inputs.retry_budget_s:
            break
        elapsed += exponential_delay(attempts, inputs.retry_base_s, math.inf)
    count_only = inputs.max_attempts * inputs.hang_attempt_s + sum(
        exponential_delay(n, inputs.retry_base_s, math.inf) for n in range(1, inputs.max_attempts))
    return {"count_only_s": count_only, "with_budget_s": elapsed, "with_budget_attempts": attempts}


def _ch4(inputs: Inputs, core: dict[str, float]) -> dict[str, Any]:
    lam, workers, W = core["lam"], core["workers"], core["W"]
    bucket_s = inputs.jitter_bucket_ms / 1000
    window = exponential_delay(1, inputs.retry_base_s, math.inf)
    schedule = _retry_schedule(inputs)
    poison_s = lam * inputs.poison_rate
    poison_day = poison_s * SECONDS_PER_DAY
    budget = _retry_budget(inputs)
    first_up = next((r for r in schedule if not r["dependency_down"]), None)
    n = inputs.max_attempts
    return {
        "outage_workers": inputs.outage_workers,
        "outage_s": inputs.outage_s,
        "retry_schedule": schedule,
        "herd_spikes_during_outage": sum(1 for r in schedule if r["dependency_down"]),
        "herd_recovers_at_s": first_up["herd_retry_at_s"] if first_up else None,
        "no_jitter_peak_per_bucket": inputs.outage_workers,
        "jitter_window_s": window,
        "jitter_buckets": jitter_peak_reduction(window, bucket_s),
        "full_jitter_peak_per_bucket": jitter_peak_per_bucket(inputs.outage_workers, window, bucket_s),
        "jitter_peak_reduction_x": jitter_peak_reduction(window, bucket_s),
        "backoff_schedule_total_s": schedule[-1]["exponential_total_s"],
        "backoff_between_attempts_s": sum(exponential_delay(k, inputs.retry_base_s, math.inf) for k in range(1, n)),
        "linear_schedule_total_s": schedule[-1]["linear_total_s"],
        "exponential_last_delay_s": schedule[-1]["exponential_delay_s"],
        "linear_last_delay_s": schedule[-1]["linear_delay_s"],
        "retry_policies": [
            {"policy": "fixed", "delay_at_last_attempt_s": inputs.retry_base_s,
             "total_s": inputs.retry_base_s * n, "peak_per_bucket": inputs.outage_workers},
            {"policy": "linear", "delay_at_last_attempt_s": schedule[-1]["linear_delay_s"],
             "total_s": schedule[-1]["linear_total_s"], "peak_per_bucket": inputs.outage_workers},
            {"policy": "exponential", "delay_at_last_attempt_s": schedule[-1]["exponential_delay_s"],
             "total_s": schedule[-1]["exponential_total_s"], "peak_per_bucket": inputs.outage_workers},
            {"policy": "full_jitter (expected)",
             "delay_at_last_attempt_s": schedule[-1]["full_jitter_mean_s"],
             "total_s": schedule[-1]["exponential_total_s"] / 2,
             "peak_per_bucket": jitter_peak_per_bucket(inputs.outage_workers, window, bucket_s)},
        ],
        "poison_pills_per_s": poison_s,
        "poison_pills_per_day": poison_day,
        "poison_uncapped_slots_after_day": poison_day,
        "poison_uncapped_pool_fraction_after_day": poison_day / workers,
        "poison_attempts_per_pill": n,
        "poison_attempts_per_day_capped": poison_day * n,
        "poison_attempts_per_day_classified": poison_day,
        "non_retryable_attempts_saved": n - 1,
        "poison_worker_hours_per_day_capped": poison_day * n * inputs.poison_attempt_s / 3600,
        "hang_attempt_s": inputs.hang_attempt_s,
        "hang_time_to_dlq_count_only_s": budget["count_only_s"],
        "hang_time_to_dlq_count_only_min": budget["count_only_s"] / 60,
        "retry_budget_s": inputs.retry_budget_s,
        "hang_time_to_dlq_with_budget_s": budget["with_budget_s"],
        "hang_attempts_with_budget": budget["with_budget_attempts"],
        "retry_budget_worst_case_s": inputs.retry_budget_s + inputs.hang_attempt_s,
        "blended_duration_s": W,
    }


def _ch5(inputs: Inputs, core: dict[str, float]) -> dict[str, Any]:
    t = inputs.job("transcode")
    worst = inputs.fixed_visibility_timeout_s + t.p99_s
    window = math.ceil(worst / inputs.dedup_round_to_s - 1e-9) * inputs.dedup_round_to_s
    keys = core["lam"] * window
    key_bytes = keys * inputs.idempotency_key_bytes
    return {
        "fixed_vt_s": inputs.fixed_visibility_timeout_s,
        "transcode_p99_s": t.p99_s,
        "worst_case_duplicate_gap_s": worst,
        "dedup_window_s": window,
        "dedup_window_h": window / 3600,
        "dedup_margin_s": window - worst,
        "keys_in_window": keys,
        "idempotency_key_bytes": inputs.idempotency_key_bytes,
        "key_store_bytes": key_bytes,
        "key_store_mb": key_bytes / BYTES_PER_MB,
        "offline_client_retry_s": inputs.offline_client_retry_s,
        "offline_retry_caught": inputs.offline_client_retry_s <= window,
        "side_effects": [
            {"operation": "write transcoded/{job_id}/… (deterministic path)", "naturally_idempotent": True,
             "guard": "none needed: a repeat overwrites the same file"},
            {"operation": "set status = done", "naturally_idempotent": True,
             "guard": "CAS on the expected previous state"},
            {"operation": "send completion email", "naturally_idempotent": False,
             "guard": "CAS flag: UPDATE … SET notified = true WHERE notified = false"},
            {"operation": "charge a card", "naturally_idempotent": False,
             "guard": "idempotency key checked before the charge; fail closed"},
            {"operation": "increment a counter", "naturally_idempotent": False,
             "guard": "record the job id with the increment; skip if seen"},
        ],
        "dedup_store_down": [
            {"choice": "fail open (proceed without the check)", "risk": "an uncaught duplicate",
             "right_for": "transcodes: downstream path + CAS make a duplicate merely wasteful"},
            {"choice": "fail closed (reject, client retries)",
             "risk": "unavailability while the store is down",
             "right_for": "payments: nothing downstream un-charges a card"},
        ],
        "key_vs_request_id": [
            {"identifier": "request ID / trace ID", "identifies": "one HTTP call",
             "on_retry": "fresh every attempt", "dedups": False},
            {"identifier": "idempotency key", "identifies": "one logical operation",
             "on_retry": "the SAME key reused", "dedups": True},
        ],
        "defence_layers": [
            {"layer": 1, "mechanism": "heartbeat / VT above p99",
             "stops": "most redeliveries happening at all"},
            {"layer": 2, "mechanism": "CAS queued → running", "stops": "a second worker doing the work"},
            {"layer": 3, "mechanism": "deterministic output path", "stops": "two divergent output files"},
            {"layer": 4, "mechanism": "notified CAS flag", "stops": "a second completion email"},
        ],
    }


def _tier_row(tier: str, lam: float, W: float, workers: int) -> dict[str, Any]:
    L = littles_law_L(lam, W)
    rho = L / workers if workers > 0 else math.inf
    return {
        "tier": tier, "arrival_rate": lam, "in_flight": L, "workers": workers, "rho": _finite(rho),
        "approx_wait_s": _finite(approx_wait(W, rho)),
        "approx_wait_min": _finite(approx_wait(W, rho) / 60),
        "mmc_wait_s": _finite(erlang_c_wait(lam, W, workers)),
        "saturated": rho >= 1,
    }


def _ch6(inputs: Inputs, core: dict[str, float]) -> dict[str, Any]:
    W, lam, workers = core["W"], core["lam"], int(core["workers"])
    pro_lam, free_lam = lam * inputs.pro_share, lam * (1 - inputs.pro_share)
    pro_c = inputs.pro_reserved_workers
    free_c = max(0, workers - pro_c)  # a reservation bigger than the pool leaves free with nothing
    split = [_tier_row("pro", pro_lam, W, pro_c), _tier_row("free", free_lam, W, free_c)]
    s = inputs.spike_multiplier
    spike = [_tier_row("pro", pro_lam * s, W, pro_c), _tier_row("free", free_lam * s, W, free_c)]
    fifo_wait = _finite(core["wait"])
    floor = 1 - inputs.pro_poll_weight
    saturating_pro = workers / W
    reserved_cost = pro_c * inputs.worker_price_per_hour * inputs.hours_per_month
    pro_revenue = pro_lam * inputs.pro_revenue_per_job * 3600 * inputs.hours_per_month
    pro_wait = split[0]["approx_wait_s"]
    sep_pro = workers_for_utilisation(pro_lam * inputs.peak_multiplier, W, inputs.target_utilisation)
    sep_free = workers_for_utilisation(free_lam * inputs.peak_multiplier, W, inputs.target_utilisation)
    return {
        "pro_arrival_rate": pro_lam,
        "free_arrival_rate": free_lam,
        "pro_share": inputs.pro_share,
        "fifo_wait_s": fifo_wait,
        "hard_split": split,
        "pro_reserved_workers": pro_c,
        "free_workers": free_c,
        "reservation_exceeds_pool": pro_c >= workers,
        "pro_split_wait_s": pro_wait,
        "free_split_wait_s": split[1]["approx_wait_s"],
        "free_split_wait_min": split[1]["approx_wait_min"],
        "pro_split_p99_wait_approx_s": _finite(pro_wait * math.log(100)) if pro_wait is not None else None,
        "weighted_pro_weight": inputs.pro_poll_weight,
        "weighted_free_floor": floor,
        "weighted_free_floor_workers": floor * workers,
        "strict_pro_saturation_rate": saturating_pro,
        "strict_pro_utilisation": pro_lam * W / workers,
        # the pool is sized from the total λ, so pro alone saturates it only if pro traffic grows
        # (Ch6 "a sustained pro traffic spike"): how much growth, and whether the spike gets there
        "strict_pro_growth_to_starve_x": saturating_pro / pro_lam if pro_lam else None,
        "strict_free_starves_in_spike": pro_lam * s >= saturating_pro,
        "aging_max_free_wait_s": inputs.aging_threshold_s,
        "burst_jobs": inputs.burst_jobs,
        "fifo_worst_jobs_ahead": inputs.burst_jobs,
        "round_robin_max_jobs_ahead": inputs.burst_other_customers,
        "separate_pool_pro_workers": sep_pro,
        "separate_pool_free_workers": sep_free,
        "separate_pools_total_workers": sep_pro + sep_free,
        "shared_pool_peak_workers": workers_for_utilisation(lam * inputs.peak_multiplier, W,
                                                            inputs.target_utilisation),
        "pro_reservation_cost_usd_per_month": reserved_cost,
        "pro_revenue_usd_per_month": pro_revenue,
        "pro_reservation_cost_to_revenue": reserved_cost / pro_revenue if pro_revenue else None,
        "spike_multiplier": s,
        "spike_split": spike,
        "fairness_strategies": [
            {"strategy": "shared FIFO", "pro_wait_s": fifo_wait, "free_wait_s": fifo_wait,
             "free_guarantee": "same wait as everyone; pro gets no priority"},
            {"strategy": "hard split", "pro_wait_s": pro_wait, "free_wait_s": split[1]["approx_wait_s"],
             "free_guarantee": f"{free_c:,} workers of its own, however busy pro is"},
            {"strategy": "weighted polling", "pro_wait_s": None, "free_wait_s": None,
             "free_guarantee": f"≥ {floor:.0%} of polling slots (~{floor * workers:,.0f} workers)"},
            {"strategy": "strict priority", "pro_wait_s": None, "free_wait_s": None,
             "free_guarantee": f"none: starves once pro λ ≥ {saturating_pro:,.0f}/s"},
            {"strategy": "aging", "pro_wait_s": None, "free_wait_s": None,
             "free_guarantee": f"promoted after {inputs.aging_threshold_s:,.0f} s"},
            {"strategy": "per-customer round robin", "pro_wait_s": None, "free_wait_s": None,
             "free_guarantee": f"≤ {inputs.burst_other_customers} jobs ahead "
                               f"(FIFO: up to {inputs.burst_jobs})"},
            {"strategy": "separate infrastructure", "pro_wait_s": None, "free_wait_s": None,
             "free_guarantee": "total isolation; no idle capacity flows between tiers"},
        ],
    }


def _lock_timeline(inputs: Inputs) -> list[dict[str, Any]]:
    ttl, p99 = inputs.short_lock_ttl_s, inputs.task_p99_s
    rows = [{"t_s": 0.0, "actor": "Replica A",
             "event": f"acquires the lock (TTL {ttl:g} s), starts the task"}]
    if ttl >= p99:
        rows.append({"t_s": p99, "actor": "Replica A", "event": "finishes and releases the lock"})
        return rows
    rows += [
        {"t_s": ttl, "actor": "Redis", "event": "lock expires while A is still running"},
        {"t_s": ttl, "actor": "Replica B", "event": "acquires the now-free lock and runs the same task"},
        {"t_s": p99, "actor": "Replica A", "event": "finishes and deletes the lock — which is now B's"},
        {"t_s": ttl + p99, "actor": "Replica B", "event": "finishes: the task ran twice"},
    ]
    return rows


def _ch7(inputs: Inputs) -> dict[str, Any]:
    r, p99 = inputs.scheduler_replicas, inputs.task_p99_s
    ticks_day = SECONDS_PER_DAY / inputs.cron_interval_s
    raw_margin = inputs.lock_ttl_s - p99
    per_bucket = inputs.users / inputs.shard_buckets
    bucket_s = SECONDS_PER_DAY / inputs.shard_buckets
    short_overlap = max(0.0, p99 - inputs.short_lock_ttl_s)
    short_runs = min(r, math.ceil(p99 / inputs.short_lock_ttl_s - 1e-9))
    bucket_rows = [
        {"buckets": b, "bucket_s": SECONDS_PER_DAY / b, "users_per_bucket": inputs.users / b,
         "ticks_per_day": b, "rate_per_s": inputs.users / b / (SECONDS_PER_DAY / b)}
        for b in inputs.shard_bucket_options
    ]
    return {
        "scheduler_replicas": r,
        "cron_interval_s": inputs.cron_interval_s,
        "ticks_per_day": ticks_day,
        "no_lock_runs_per_tick": r,
        "no_lock_emails_per_user": r,
        "no_lock_runs_per_day": r * ticks_day,
        "no_lock_wasted_runs_per_day": (r - 1) * ticks_day,
        "replicas_skipping_with_lock": r - 1,
        "task_p99_s": p99,
        "short_lock_ttl_s": inputs.short_lock_ttl_s,
        "short_ttl_overlap_s": short_overlap,
        "short_ttl_max_concurrent_runs": short_runs,
        "lock_ttl_s": inputs.lock_ttl_s,
        "lock_ttl_over_p99_x": inputs.lock_ttl_s / p99,
        "lock_margin_s": raw_margin,
        "clock_skew_s": inputs.clock_skew_s,
        "lock_margin_after_skew_s": raw_margin - inputs.clock_skew_s,
        "leader_lease_s": inputs.leader_lease_s,
        "leader_failover_max_s": inputs.leader_lease_s,
        "users": inputs.users,
        "shard_buckets": inputs.shard_buckets,
        "bucket_s": bucket_s,
        "users_per_bucket": per_bucket,
        "bucket_jobs_per_s": per_bucket / bucket_s,
        "daily_average_jobs_per_s": inputs.users / SECONDS_PER_DAY,
        "unsharded_burst_jobs": inputs.users,
        "bucket_count_table": bucket_rows,
        "missed_tick_after_s": inputs.cron_interval_s * inputs.catchup_factor,
        "late_replica_s": inputs.late_replica_s,
        "late_replica_gets_in": inputs.short_lock_ttl_s < inputs.late_replica_s < p99,
        "late_overlap_s": max(0.0, p99 - inputs.late_replica_s) if inputs.short_lock_ttl_s < inputs.late_replica_s
        else 0.0,
        "lock_timeline": _lock_timeline(inputs),
        "lock_strategies": [
            {"strategy": "no lock", "runs_per_tick": r, "margin_s": None,
             "failure": f"{r} runs and {r} emails per tick"},
            {"strategy": f"lock, TTL {inputs.short_lock_ttl_s:g} s", "runs_per_tick": short_runs,
             "margin_s": inputs.short_lock_ttl_s - p99,
             "failure": f"lock expires {short_overlap:g} s before the p99 task ends" if short_overlap
             else "none at p99"},
            {"strategy": f"lock, TTL {inputs.lock_ttl_s:g} s", "runs_per_tick": 1 if raw_margin > 0 else 2,
             "margin_s": raw_margin - inputs.clock_skew_s,
             "failure": "clock skew or a partition eats the margin"},
            {"strategy": "lock + heartbeat extension", "runs_per_tick": 1, "margin_s": None,
             "failure": "lock tracks the real duration; holder crash frees it after one TTL"},
            {"strategy": f"leader lease {inputs.leader_lease_s:g} s", "runs_per_tick": 1, "margin_s": None,
             "failure": f"up to {inputs.leader_lease_s:g} s with no leader during failover"},
            {"strategy": "idempotent task (backstop)", "runs_per_tick": None, "margin_s": None,
             "failure": "a double run is harmless: its UPDATEs match zero rows"},
        ],
        "timeout_reference": [
            {"timeout": "visibility timeout", "chapter": 1, "worst_case_s": None, "value_s": None},
            {"timeout": "dedup window", "chapter": 5, "worst_case_s": None, "value_s": None},
            {"timeout": "lock TTL", "chapter": 7, "worst_case_s": p99, "value_s": inputs.lock_ttl_s},
        ],
    }


def _dashboard(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The nine-row on-call dashboard: one metric per chapter, with the model's healthy value."""
    c = fig
    return [
        {"chapter": 0, "metric": "upload endpoint latency", "healthy": c["ch0"]["upload_response_ms"],
         "unit": "ms", "alert_when": f"> {inputs.api_budget_ms:g} ms (slow work inline)"},
        {"chapter": 1, "metric": "redelivery rate (over a window)", "healthy": 0, "unit": "per day",
         "alert_when": f"sustained > 0 (the VT bug alone: {c['ch1']['collisions_per_day']:,.0f}/day)"},
        {"chapter": 2, "metric": "utilisation ρ and queue depth",
         "healthy": c["ch2"]["utilisation_at_target"], "unit": "ρ",
         "alert_when": "ρ trending to 1 (unscaled peak: "
                       f"{c['ch2']['peak_utilisation_on_average_pool']:.2f})"},
        {"chapter": 3, "metric": "status-path requests per completion", "healthy": 1.0, "unit": "×",
         "alert_when": f"≫ 1 ({inputs.poll_interval_s:g} s polling: "
                       f"{c['ch3']['polls_per_completion']:.0f}×)"},
        {"chapter": 4, "metric": "DLQ depth and arrival rate", "healthy": c["ch4"]["poison_pills_per_day"],
         "unit": "per day", "alert_when": "a spike in arrivals (upstream breakage)"},
        {"chapter": 5, "metric": "duplicates blocked", "healthy": 0, "unit": "per day",
         "alert_when": f"rising (key store: {c['ch5']['key_store_mb']:.0f} MB)"},
        {"chapter": 6, "metric": "wait per tier", "healthy": c["ch6"]["pro_split_wait_s"], "unit": "s (pro)",
         "alert_when": "pro above its SLA, or free starving"},
        {"chapter": 7, "metric": "scheduled runs per tick / missed ticks", "healthy": 1, "unit": "runs",
         "alert_when": f"> 1 run, or no run for {c['ch7']['missed_tick_after_s']:g} s"},
        {"chapter": 8, "metric": "end-to-end completion time", "healthy": c["ch2"]["expected_completion_s"],
         "unit": "s", "alert_when": "above what the UI promises (\"a few minutes\")"},
    ]


def _cost_rollup(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    price_h = inputs.worker_price_per_hour
    days = inputs.hours_per_month / 24
    return [
        {"item": "worker pool at target ρ", "chapter": 2, "monthly_usd": fig["ch2"]["monthly_cost_usd"],
         "quantity": fig["ch2"]["workers_at_target"], "unit": "workers"},
        {"item": "autoscaled peak margin", "chapter": 2,
         "monthly_usd": fig["ch2"]["peak_margin_monthly_cost_usd"],
         "quantity": fig["ch2"]["peak_workers"] - fig["ch2"]["workers_at_target"],
         "unit": "extra workers at peak"},
        {"item": "redelivery waste (VT bug)", "chapter": 1,
         "monthly_usd": fig["ch1"]["redelivery_waste_usd_per_month"],
         "quantity": fig["ch1"]["collisions_per_day"], "unit": "collisions/day"},
        {"item": "poison pills, capped attempts", "chapter": 4,
         "monthly_usd": fig["ch4"]["poison_worker_hours_per_day_capped"] * price_h * days,
         "quantity": fig["ch4"]["poison_attempts_per_day_capped"], "unit": "attempts/day"},
        {"item": "idempotency key store", "chapter": 5, "monthly_usd": None,
         "quantity": fig["ch5"]["key_store_mb"], "unit": "MB"},
        {"item": "WebSocket connection memory", "chapter": 3, "monthly_usd": None,
         "quantity": fig["ch3"]["websocket_memory_mb"], "unit": "MB"},
    ]


def _checklist(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-job checklist, answered for the transcode job with the model's numbers."""
    c0, c1, c2, c3, c4, c5, c6, c7 = (fig[f"ch{i}"] for i in range(8))
    return [
        {"chapter": 0, "question": "Does the work fit inside a request?",
         "answer": f"{c0['inline_transcode_s']:g} s vs a {inputs.api_budget_ms:g} ms budget → enqueue, 202",
         "ok": c0["inline_transcode_s"] * 1000 <= inputs.api_budget_ms},
        {"chapter": 1, "question": "Does the claim outlive the job's worst case?",
         "answer": f"VT {c1['visibility_timeout_s']:g} s vs p99 {c1['transcode_p99_s']:g} s; heartbeat "
                   f"{c1['heartbeat_interval_s']:g}/{c1['heartbeat_extend_s']:g} s detects a crash in "
                   f"{c1['heartbeat_crash_detection_s']:g} s",
         "ok": c1["vt_covers_p99"]},
        {"chapter": 2, "question": "Is the pool sized for the peak, not the average?",
         "answer": f"{c2['workers_at_target']:,} workers at average, {c2['peak_workers']:,} at the "
                   f"{c2['peak_multiplier']:g}× peak",
         "ok": c2["peak_utilisation_on_average_pool"] < 1},
        {"chapter": 3, "question": "How does the client learn it finished?",
         "answer": f"polling {c3['polls_per_s']:,.0f}/s ({c3['polls_per_completion']:.0f}×) vs webhook "
                   f"{c3['webhook_requests_per_s']:,.0f}/s",
         "ok": None},
        {"chapter": 4, "question": "What happens when it fails, and when does it stop?",
         "answer": f"full jitter, {inputs.max_attempts} attempts or {inputs.retry_budget_s:g} s, then DLQ "
                   f"({c4['poison_pills_per_day']:,.0f} poison pills/day)",
         "ok": None},
        {"chapter": 5, "question": "Is it safe to run twice?",
         "answer": f"{c5['dedup_window_s']:,.0f} s dedup window, {c5['key_store_mb']:,.0f} MB of keys; "
                   "deterministic output path; notified CAS flag",
         "ok": None},
        {"chapter": 6, "question": "Whose queue does it wait in?",
         "answer": f"pro {_fmt(c6['pro_split_wait_s'], '.1f', ' s')}, free "
                   f"{_fmt(c6['free_split_wait_min'], '.1f', ' min')} under the hard split",
         "ok": None},
        {"chapter": 7, "question": "If scheduled, can it run twice or be missed?",
         "answer": f"lock TTL {c7['lock_ttl_s']:g} s vs p99 {c7['task_p99_s']:g} s: "
                   f"{c7['lock_margin_after_skew_s']:g} s margin after skew; catch-up after "
                   f"{c7['missed_tick_after_s']:g} s",
         "ok": c7["lock_margin_after_skew_s"] > 0},
        {"chapter": 8, "question": "Which dashboard row pages someone?",
         "answer": "redelivery rate over a window (infrastructure instability)", "ok": None},
    ]


def _inputs_table(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Chapter 8's "five inputs" table: each input and the figure keys it feeds."""
    return [
        {"input": "traffic λ", "value": inputs.arrival_rate, "unit": "jobs/s",
         "feeds": ["ch2.in_flight_jobs", "ch2.workers_at_target", "ch2.peak_workers", "ch3.polls_per_s",
                   "ch3.websocket_memory_mb", "ch4.poison_pills_per_day", "ch5.key_store_mb",
                   "ch6.pro_arrival_rate"]},
        {"input": "job mix and durations", "value": fig["ch2"]["blended_duration_s"], "unit": "s (blended W)",
         "feeds": ["ch2.blended_duration_s", "ch2.in_flight_jobs", "ch1.collision_overlap_s",
                   "ch5.dedup_window_s", "ch2.queue_wait_s"]},
        {"input": "utilisation target ρ", "value": inputs.target_utilisation, "unit": "",
         "feeds": ["ch2.workers_at_target", "ch2.queue_wait_s", "ch2.wait_curve", "ch6.free_workers"]},
        {"input": "worker price", "value": inputs.worker_price_per_hour, "unit": "$/worker-hour",
         "feeds": ["ch2.monthly_cost_usd", "ch2.cost_per_job_usd", "ch6.pro_reservation_cost_usd_per_month",
                   "ch1.redelivery_waste_usd_per_month"]},
        {"input": "tier split", "value": inputs.pro_share, "unit": "pro fraction",
         "feeds": ["ch6.pro_split_wait_s", "ch6.free_split_wait_s", "ch6.pro_revenue_usd_per_month"]},
    ]


def _ch8(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rollup = _cost_rollup(inputs, fig)
    total = sum(r["monthly_usd"] for r in rollup if r["monthly_usd"] is not None)
    pool = fig["ch2"]["monthly_cost_usd"]
    return {
        "demo_speed": inputs.demo_speed,
        "demo_fixed_vt_real_s": inputs.fixed_visibility_timeout_s / inputs.demo_speed,
        "demo_heartbeat_detection_real_s": inputs.heartbeat_extend_s / inputs.demo_speed,
        "demo_transcode_real_s": inputs.job("transcode").mean_s / inputs.demo_speed,
        "cost_rollup": rollup,
        "cost_rollup_total_usd_per_month": total,
        "redelivery_share_of_pool": fig["ch1"]["redelivery_waste_usd_per_month"] / pool,
        "dashboard": _dashboard(inputs, fig),
        "checklist": _checklist(inputs, fig),
        "inputs_table": _inputs_table(inputs, fig),
    }


def _fill_timeout_reference(fig: dict[str, dict[str, Any]]) -> None:
    rows = fig["ch7"]["timeout_reference"]
    rows[0].update(worst_case_s=fig["ch1"]["transcode_p99_s"], value_s=fig["ch1"]["fixed_vt_s"])
    rows[1].update(worst_case_s=fig["ch5"]["worst_case_duplicate_gap_s"],
                   value_s=fig["ch5"]["dedup_window_s"])
    for row in rows:
        row["margin_s"] = row["value_s"] - row["worst_case_s"]


def _lesson_notes(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Where a chapter's figure corrects or refines the lesson's own arithmetic, both numbers and why.

    Each note: `id` (stable, the conformance suite names it), `where` (the chapter section it sits in),
    `lesson` (what the lesson says, verbatim figure), `ours` (what this model computes from the same
    inputs), `why`. Chapters render them with the `lesson_note` macro; nothing is typed in twice.
    A note whose lesson figure the current inputs no longer contradict is left out.
    """
    c1, c2, c4 = fig["ch1"], fig["ch2"], fig["ch4"]
    n = inputs.max_attempts
    notes: dict[str, list[dict[str, Any]]] = {f"ch{i}": [] for i in range(9)}
    if abs(c1["fixed_vt_over_p99_x"] - 2) > 0.1:
        notes["ch1"].append({
            "id": "fixed_vt_ratio", "where": "Two fixes",
            "lesson": "VT = 1,200 s, “roughly 2× the 900 s p99”",
            "ours": f"{c1['fixed_vt_s']:,.0f} / {c1['transcode_p99_s']:,.0f} = {c1['fixed_vt_over_p99_x']:.2f}×",
            "why": f"the lesson rounds this to 2×; 1,200 s is 2× the {c1['transcode_mean_s']:,.0f} s mean "
                   f"({c1['fixed_vt_over_mean_x']:.1f}×), not the p99. It still covers the p99, which is what matters.",
            "values": {"lesson": 2.0, "ours": c1["fixed_vt_over_p99_x"]}})
    approx, exact = c2["queue_wait_s"], c2["mmc_wait_at_target_s"]
    if approx is not None and exact is not None:
        notes["ch2"].append({
            "id": "mmc_wait", "where": "The utilisation curve",
            "lesson": f"W/(1−ρ): {approx:,.0f} s of queue wait at ρ = {c2['utilisation_at_target']:.2f}",
            "ours": f"exact M/M/c (Erlang C) wait for {c2['workers_at_target']:,} workers: "
                    + (f"{exact:.1f} s" if exact >= 0.05 else "effectively 0 s (under a millisecond)"),
            "why": "W/(1−ρ) is the one-server (M/M/1) time in system; the lesson keeps it as an “honest "
                   "approximation”. With thousands of servers pooled, a job almost never waits at ρ = "
                   f"{c2['utilisation_at_target']:.2f}: the curve's shape holds, its height does not.",
            "values": {"lesson": approx, "ours": exact}})
    between, schedule = c4["backoff_between_attempts_s"], c4["backoff_schedule_total_s"]
    if between != schedule:
        notes["ch4"].append({
            "id": "poison_backoff_total", "where": "Poison pills",
            "lesson": f"{n} attempts cost “roughly {schedule:,.0f} seconds of backoff schedule”",
            "ours": f"{n} attempts have {n - 1} waits between them: {between:,.0f} s of backoff",
            "why": f"the lesson sums all {n} delays of the schedule ({schedule:,.0f} s); the last one is never "
                   "waited, because after the last attempt the job goes to the DLQ instead of retrying.",
            "values": {"lesson": schedule, "ours": between}})
    return notes


def derive(inputs: Inputs | None = None) -> dict[str, dict[str, Any]]:
    """Every figure the course shows, computed from `inputs`, grouped by chapter
    (``figures["ch2"]["workers_at_target"]``). Values are numbers, booleans, strings, ``None``
    (unbounded) or lists of row dicts for tables; the whole result is JSON-serialisable."""
    inputs = inputs or Inputs()
    core = _core(inputs)
    fig: dict[str, dict[str, Any]] = {
        "ch0": _ch0(inputs),
        "ch1": _ch1(inputs, core),
        "ch2": _ch2(inputs, core),
        "ch3": _ch3(inputs, core),
        "ch4": _ch4(inputs, core),
        "ch5": _ch5(inputs, core),
        "ch6": _ch6(inputs, core),
        "ch7": _ch7(inputs),
    }
    _fill_timeout_reference(fig)
    fig["ch8"] = _ch8(inputs, fig)
    _add_prose_figures(inputs, fig)
    for chapter, rows in _lesson_notes(inputs, fig).items():
        fig[chapter]["lesson_notes"] = rows
    return fig


def lookup(figures: Mapping[str, Any], key: str) -> Any:
    """Resolve a dotted figure key such as ``"ch2.workers_at_target"`` (used by chapter templates
    and by Chapter 8's inputs table, whose ``feeds`` lists are dotted keys)."""
    value: Any = figures
    for part in key.split("."):
        value = value[part]
    return value


def spec_values(inputs: Inputs | None = None) -> list[dict[str, Any]]:
    """Every input spec with its default and current value: what a page needs to draw controls."""
    current = (inputs or Inputs()).flat()
    defaults = Inputs().flat()
    return [dict(spec.as_dict(), default=defaults[spec.name], value=current.get(spec.name))
            for spec in INPUT_SPECS]


def to_json(inputs: Inputs | None = None) -> dict[str, Any]:
    """Inputs, their specs and every figure as one JSON-serialisable dict — the `/api/model` body."""
    inputs = inputs or Inputs()
    return {
        "inputs": dict(inputs.flat(), job_mix=[dataclasses.asdict(jt) for jt in inputs.job_mix]),
        "specs": spec_values(inputs),
        "figures": derive(inputs),
    }


__all__ = [
    "DEFAULT_JOB_MIX", "INPUT_SPECS", "SPECS_BY_NAME", "InputError", "InputSpec", "Inputs", "JobType",
    "approx_wait", "blended_duration", "derive", "erlang_b", "erlang_c", "erlang_c_wait",
    "inputs_from_mapping", "jitter_peak_per_bucket", "jitter_peak_reduction",
    "littles_law_L", "lookup", "spec_values", "to_json", "workers_for_utilisation",
]


# ---------------------------------------------------------------------------------------------
# Figures the prose states that are one step from another figure (a difference, a unit change,
# "twice the traffic"): computed here so that chapters do no arithmetic of their own.
# ---------------------------------------------------------------------------------------------


def _add_prose_figures(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    c0 = fig["ch0"]
    c0["gateway_over_budget_x"] = c0["gateway_timeout_s"] * 1000 / c0["api_budget_ms"]
    c1 = fig["ch1"]
    hb = c1["heartbeat_timeline"]
    c1["heartbeat_crash_at_s"] = next((r["t_s"] for r in hb if r["event"] == "worker crashes"), 0.0)
    c1["heartbeat_redelivered_at_s"] = next(
        (r["t_s"] for r in hb if "heartbeat lease expires" in r["event"]), inputs.heartbeat_extend_s)

    c2 = fig["ch2"]
    W, rho = c2["blended_duration_s"], inputs.target_utilisation
    c2["small_pool_workers"] = SMALL_POOL_WORKERS
    # Same ρ and W, different pool sizes: how much pooling buys (exact M/M/c beside W/(1 − ρ)).
    pooling = []
    for c in (1, 2, SMALL_POOL_WORKERS, 8, 16, 64):
        wq = _finite(erlang_c_wait(rho * c / W, W, c))
        pooling.append({"workers": c, "approx_wait_s": c2["queue_wait_s"], "mmc_wait_s": wq,
                        "mmc_p_wait": erlang_c(c, rho * c), "mmc_time_in_system_s": None if wq is None else wq + W})
    wq = c2["mmc_wait_at_target_s"]
    pooling.append({"workers": c2["workers_at_target"], "approx_wait_s": c2["queue_wait_s"], "mmc_wait_s": wq,
                    "mmc_p_wait": c2["mmc_p_wait_at_target"], "mmc_time_in_system_s": None if wq is None else wq + W})
    c2["pooling_table"] = pooling

    _add_prose_units(inputs, fig)

    c4 = fig["ch4"]
    waves = []
    for row in c4["retry_schedule"]:
        if row["attempt"] >= inputs.max_attempts:
            break
        waves.append(row)
        if not row["dependency_down"]:
            break
    c4["herd_waves"] = waves  # the synchronised retries that really happen, capped by max_attempts
    c4["herd_waves_failing"] = sum(1 for r in waves if r["dependency_down"])
    c4["herd_recovery_wave"] = next((r for r in waves if not r["dependency_down"]), None)


def _ceil_workers(in_flight: float, rho: float) -> int:
    """Workers for `in_flight` jobs at utilisation `rho`, rounded up (a hair under, so an exact fit stays)."""
    return math.ceil(in_flight / rho - 1e-9)


def _add_prose_units(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Unit changes, differences and what-ifs the chapters' prose states: computed here, so no chapter
    does arithmetic (tests/unit/test_chapter_rules.py)."""
    c0 = fig["ch0"]
    tx = next(r for r in fig["ch2"]["job_mix"] if r["job_type"] == "transcode")
    c0["inline_transcode_min"] = c0["inline_transcode_s"] / 60
    c0["inline_transcode_ms"] = c0["inline_transcode_s"] * 1000
    c0["inline_fits_budget"] = c0["inline_transcode_s"] * 1000 <= c0["api_budget_ms"]
    c0["inline_request_slots"] = tx["rate_per_s"] * c0["inline_transcode_s"]
    c0["enqueue_request_slots"] = tx["rate_per_s"] * c0["upload_response_ms"] / 1000
    c0["enqueue_budget_fraction"] = c0["upload_response_ms"] / c0["api_budget_ms"]

    c1 = fig["ch1"]
    c1["p99_collision_overlap_s"] = c1["transcode_p99_s"] - c1["visibility_timeout_s"]

    c2 = fig["ch2"]
    W, rho = c2["blended_duration_s"], inputs.target_utilisation
    c2["transcode_mean_min"] = tx["mean_s"] / 60
    c2["idle_fraction_at_target"] = 1 - rho
    c2["pool_capacity_per_s"] = c2["workers_at_target"] / W
    c2["peak_backlog_growth_per_s"] = c2["peak_arrival_rate"] - c2["workers_at_target"] / W
    c2["peak_backlog_growth_per_hour"] = c2["peak_backlog_growth_per_s"] * 3600
    c2["peak_utilisation_on_peak_pool"] = c2["peak_in_flight_jobs"] / c2["peak_workers"]
    c2["doubled_arrival_rate"] = 2 * c2["arrival_rate"]
    c2["doubled_in_flight_jobs"] = 2 * c2["in_flight_jobs"]
    c2["doubled_workers_at_target"] = _ceil_workers(2 * c2["in_flight_jobs"], rho)
    cheaper = [r for r in c2["wait_curve"] if r["target_rho"] < rho]
    steps = None
    if len(cheaper) >= 2:
        r1, r2 = cheaper[-2], cheaper[-1]
        steps = {"r1": r1, "r2": r2,
                 "first_extra_usd": r1["monthly_cost_usd"] - c2["monthly_cost_usd"],
                 "second_saved_s": r1["approx_wait_s"] - r2["approx_wait_s"],
                 "second_extra_usd": r2["monthly_cost_usd"] - r1["monthly_cost_usd"],
                 "mmc_first_saved_s": None if c2["mmc_wait_at_target_s"] is None or r1["mmc_wait_s"] is None
                 else c2["mmc_wait_at_target_s"] - r1["mmc_wait_s"],
                 "mmc_second_saved_s": None if r1["mmc_wait_s"] is None or r2["mmc_wait_s"] is None
                 else r1["mmc_wait_s"] - r2["mmc_wait_s"]}
    c2["more_workers_steps"] = steps

    c3 = fig["ch3"]
    saved = c3["etag_bandwidth_saved_bytes_per_s"]
    c3["etag_bandwidth_saved_kb_per_s"] = saved / 1000
    c3["etag_bandwidth_saved_gb_per_day"] = saved * 86400 / 1e9
    c3["halved_poll_interval_s"] = c3["poll_interval_s"] / 2
    c3["halved_interval_polls_per_s"] = c3["polls_per_s"] * 2
    c3["halved_interval_mean_delay_s"] = c3["poll_mean_delay_to_learn_s"] / 2

    c4 = fig["ch4"]
    c4["retries_per_job"] = inputs.max_attempts - 1

    c5 = fig["ch5"]
    c5["offline_client_retry_min"] = c5["offline_client_retry_s"] / 60
    c5["dedup_window_min"] = c5["dedup_window_s"] / 60
    vt2 = c5["fixed_vt_s"] * 2
    gap2 = vt2 + c5["transcode_p99_s"]
    win2 = math.ceil(gap2 / inputs.dedup_round_to_s) * inputs.dedup_round_to_s
    c5["doubled_vt"] = {"vt_s": vt2, "gap_s": gap2, "window_s": win2, "key_count": inputs.arrival_rate * win2,
                        "key_mb": inputs.arrival_rate * win2 * c5["idempotency_key_bytes"] / 1e6,
                        "window_unchanged": win2 == c5["dedup_window_s"], "spare_s": win2 - gap2,
                        "extra_min": (win2 - c5["dedup_window_s"]) / 60}

    c6 = fig["ch6"]
    c6["pro_pool_share"] = c6["pro_reserved_workers"] / c2["workers_at_target"]
    c6["free_share"] = 1 - c6["pro_share"]
    c6["free_pool_share"] = c6["free_workers"] / c2["workers_at_target"]
    c6["separate_pools_extra_workers"] = c6["separate_pools_total_workers"] - c6["shared_pool_peak_workers"]

    c7 = fig["ch7"]
    c7["cron_interval_min"] = c7["cron_interval_s"] / 60
    for row in c7["lock_strategies"]:
        m = row["margin_s"]
        row["shortfall_s"] = -m if m is not None and m < 0 else None

    c8 = fig["ch8"]
    doubled = _ceil_workers(2 * c2["in_flight_jobs"], inputs.target_utilisation)
    c8["doubled_traffic"] = {"arrival_rate": 2 * inputs.arrival_rate, "in_flight_jobs": 2 * c2["in_flight_jobs"],
                             "workers": doubled,
                             "pool_usd_per_month": doubled * inputs.worker_price_per_hour * inputs.hours_per_month}


SMALL_POOL_WORKERS = 4  # ch2 compares every pool with a lab-sized one of this many workers
