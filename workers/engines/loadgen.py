"""Chapter 2's load generator, the pool's face: Poisson arrivals at λ jobs/s with the lesson's job mix.

Arrivals are paced on the lab's simulated clock and go through the real producer, so every
generated job is an ordinary lab job (real RQ delivery, real ffmpeg, leases, redelivery). The
k-th gap and job type come from `Random(f"{seed}:{k}")`: a run is reproducible from its seed,
and changing λ mid-run only redraws the next gap (exponential gaps are memoryless, so that is
still a Poisson process). Each job is sized to what two cores can run: the mix's simulated
durations are the lesson's (5 s thumbnails … 600 s transcodes), the real work behind them is a
thumbnail or a 144p transcode of the smallest sample clip.

Two mixes share that W: `lesson` (the lesson's blend above) and `even` (every job the blend's mean W,
so λ, W and ρ are the same and only the spread of job times differs). Erlang C assumes exponential job
times; the even mix has none of that spread and the lesson's blend far more, so the two bracket it.
The face both processes share (state keys, readers, commands) is core/engines/loadgen.py.
"""

from __future__ import annotations

import math
import time

import redis

from core import media
from core.broker import producer
from core.config import Config
from core.engines.loadgen import (
    ARRIVAL,
    MAX_IN_FLIGHT,
    MIXES,
    arrivals_key,
    draw,
    effective_rate,
    hold_next,
    read_state,
    state_key,
)
from core.keys import key

MAX_PER_TICK = 50
SAMPLE = "carphone_pristine"
_budget: dict[str, tuple[float, float]] = {}  # lab → (jobs it may still create, real time of the last refill)


def real_budget(lab: str, per_s: float) -> float:
    """Jobs this lab may create now under the machine's real-time cap (a token bucket of one second)."""
    if per_s <= 0:
        return math.inf
    tokens, last = _budget.get(lab, (per_s, time.monotonic()))
    now = time.monotonic()
    return min(per_s, tokens + (now - last) * per_s)


def tick(r: redis.Redis, rq_conn: redis.Redis, lab: str, clock_state: dict, real_rate: float = 0.0) -> int:
    """Enqueue every arrival due by the clock's now (`clock_state`, a `clock.read`; the supervisor calls this each
    loop); returns how many. The clock is held at the next one's moment (`hold_next`), so each is enqueued at its
    own moment.

    `real_rate` caps the jobs created per *real* second whatever the clock speed (LAB_JOB_RATE): arrivals
    past it are shed and counted, as arrivals past the in-flight bound are."""
    now = clock_state["t_raw"]
    state = read_state(r, lab)
    lam = effective_rate(state)
    if not state["on"] or lam <= 0 or state["next_t"] > now:
        return 0
    k, t, made, shed = state["k"], state["next_t"], 0, 0
    budget = real_budget(lab, real_rate)
    src = str(media.sample_clip(SAMPLE))
    mix = MIXES[state["mix"]]
    states = r.hgetall(key(lab, "states"))
    in_flight = sum(int(states.get(s, 0)) for s in ("queued", "retrying", "running"))
    stopped = False
    while t <= now and made + shed < MAX_PER_TICK:
        # A lagging loop can owe a long batch; a stop that lands during it ends it here, not after.
        if made and r.hget(state_key(lab), "on") != "1":
            stopped = True
            break
        _, jt = draw(state["seed"], k, lam, mix)
        if in_flight >= MAX_IN_FLIGHT or made >= budget:
            shed += 1
        else:
            transcode = jt.name == "transcode"
            payload = producer.enqueue_job(
                r,
                rq_conn,
                lab,
                job_type="transcode" if transcode else "thumbnail",
                video_id=f"load-{jt.name}",
                source=src,
                duration_s=jt.mean_s,
                resolutions=["144p"],
                idempotency_key=None,
            )
            r.zadd(arrivals_key(lab), {payload["job_id"]: payload["created_at"]})
            in_flight += 1
            made += 1
        k += 1
        t += draw(state["seed"], k, lam)[0]
    if real_rate > 0:
        _budget[lab] = (real_budget(lab, real_rate) - made, time.monotonic())
    with r.pipeline() as pipe:
        pipe.hset(state_key(lab), mapping={"k": k, "next_t": t})
        pipe.hincrby(state_key(lab), "generated", made)
        pipe.hincrby(state_key(lab), "shed", shed)
        pipe.execute()
    if not stopped:  # (a stop lifted the barrier)
        hold_next(r, lab, t, clock_state)
    return made


class Generator:
    """The load generator in the supervisor's pass (the `Engine` protocol): quiet, neither read nor ticked,
    while it is off, until its state key changes."""

    name = "loadgen"
    wakes = ("loadgen",)
    holder = ARRIVAL

    def start(self, config: Config) -> None:
        """Nothing runs beside the pass."""

    def read(self, pipe: redis.client.Pipeline, lab: str) -> int:
        pipe.hget(state_key(lab), "on")
        return 1

    def busy(self, settings: dict, gauges: list) -> bool:
        return gauges == ["1"]

    def tick(
        self, r: redis.Redis, rq: redis.Redis, lab: str, settings: dict, state: dict, config: Config, quiet: bool
    ) -> int:
        return 0 if quiet else tick(r, rq, lab, state, config.lab_job_rate)


ENGINE = Generator()
