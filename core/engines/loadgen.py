"""Chapter 2's load generator as both processes see it: its state (read, start, stop, retune), the
seeded arrivals it draws, and what the chapter measures and models. The generating itself (arrivals
enqueued as the lab's clock reaches them) is the pool's: workers/engines/loadgen.py."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import redis

from core import clock, numbers, stream
from core.config import REAPER_BARRIER_S
from core.keys import job, key

MIX: tuple[numbers.JobType, ...] = numbers.DEFAULT_JOB_MIX
MIX_W = numbers.blended_duration(MIX)
# The same mean job time with no spread: every arrival a W-second job (real work: a thumbnail).
EVEN_MIX: tuple[numbers.JobType, ...] = (numbers.JobType("even", "Every job the blend's mean", 100.0, MIX_W, MIX_W),)
MIXES: dict[str, tuple[numbers.JobType, ...]] = {"lesson": MIX, "even": EVEN_MIX}
MAX_IN_FLIGHT = 150  # the lab's bound: arrivals past it are shed (counted), never half-created
PEAK_FACTOR = numbers.Inputs().peak_multiplier  # the lesson's 1.8× daytime step
ARRIVAL = "loadgen"  # the barrier holder at the next arrival's moment (hold_next)


def state_key(lab: str) -> str:
    return key(lab, "loadgen")


def arrivals_key(lab: str) -> str:
    return key(lab, "loadgen", "arrivals")


def draw(seed: int, k: int, lam: float, mix: tuple[numbers.JobType, ...] = MIX) -> tuple[float, numbers.JobType]:
    """The k-th inter-arrival gap (exponential with rate λ) and job type (by the mix's shares)."""
    rng = random.Random(f"{seed}:{k}")
    gap = rng.expovariate(lam)
    pick = rng.random() * sum(jt.share_pct for jt in mix)
    for jt in mix:
        pick -= jt.share_pct
        if pick < 0:
            return gap, jt
    return gap, mix[-1]


def read_state(r: redis.Redis, lab: str) -> dict[str, Any]:
    raw = r.hgetall(state_key(lab))
    return {
        "on": raw.get("on") == "1",
        "rate": float(raw.get("rate", 0)),
        "factor": float(raw.get("factor", 1)),
        "seed": int(raw.get("seed", 0)),
        "k": int(raw.get("k", 0)),
        "next_t": float(raw.get("next_t", 0)),
        "started_t": float(raw.get("started_t", 0)),
        "shed": int(raw.get("shed", 0)),
        "generated": int(raw.get("generated", 0)),
        "mix": raw.get("mix") if raw.get("mix") in MIXES else "lesson",
    }


def effective_rate(state: dict[str, Any]) -> float:
    return state["rate"] * state["factor"]


def hold_next(r: redis.Redis, lab: str, at: float, state: dict | None = None) -> None:
    """The clock may not pass the next arrival's moment `at` before the supervisor's pass has enqueued it: a
    late pass delays the arrival in real time, never in simulated time (as the reaper's barrier does for a
    lease deadline), so arrivals are not bunched at the pass that finally came. It lapses REAPER_BARRIER_S real
    seconds after the clock (`state`, a `clock.read`, else read now) would get there (the pass refreshes it while
    it lives: workers/duties.py); none while no arrival is due (`at` infinite)."""
    if not math.isfinite(at):
        clock.lift(r, lab, ARRIVAL)
        return
    clock.hold(r, lab, ARRIVAL, at, ttl=clock.lapse(state or clock.read(r, lab), at, REAPER_BARRIER_S))


def start(r: redis.Redis, lab: str, now: float, rate: float, seed: int, mix: str = "lesson") -> dict[str, Any]:
    """Start (or restart) generation at `rate` with `mix` (lesson | even); measurements restart with it."""
    gap, _ = draw(seed, 0, rate)
    r.delete(arrivals_key(lab))
    r.hset(
        state_key(lab),
        mapping={
            "on": 1,
            "rate": rate,
            "factor": 1,
            "seed": seed,
            "k": 0,
            "mix": mix,
            "next_t": now + gap,
            "started_t": now,
            "shed": 0,
            "generated": 0,
        },
    )
    hold_next(r, lab, now + gap)
    stream.emit(r, lab, "loadgen.started", now, rate=rate, seed=seed, mix=mix)
    return read_state(r, lab)


def stop(r: redis.Redis, lab: str, now: float) -> dict[str, Any]:
    r.hset(state_key(lab), "on", 0)
    clock.lift(r, lab, ARRIVAL)
    stream.emit(r, lab, "loadgen.stopped", now)
    return read_state(r, lab)


def retune(r: redis.Redis, lab: str, now: float, rate: float | None = None, peak: bool | None = None) -> dict[str, Any]:
    """Change λ or the peak step; the next gap is redrawn at the new rate from now."""
    state = read_state(r, lab)
    if rate is not None:
        state["rate"] = rate
    if peak is not None:
        state["factor"] = PEAK_FACTOR if peak else 1.0
    lam = effective_rate(state)
    gap, _ = draw(state["seed"], state["k"], lam) if lam > 0 else (math.inf, None)
    r.hset(state_key(lab), mapping={"rate": state["rate"], "factor": state["factor"], "next_t": now + gap})
    hold_next(r, lab, now + gap)
    stream.emit(r, lab, "loadgen.rate", now, rate=round(lam, 6), peak=state["factor"] != 1)
    return read_state(r, lab)


def recent_rate(r: redis.Redis, lab: str, now: float, window_s: float = 120.0) -> float:
    """Measured arrivals per simulated second over the last `window_s` (what an autoscaler sees)."""
    return r.zcount(arrivals_key(lab), now - window_s, "+inf") / window_s


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def measure(r: redis.Redis, lab: str, now: float, window_s: float = 600.0) -> dict[str, Any]:
    """Little's law on the real run: time-averaged L, arrival rate λ, time in system W, queue wait.

    Over the window [t0, now] (t0 = generator start, at most `window_s` back). `W_done` is the mean
    time in system of jobs that finished; `W_all` also counts jobs still in flight up to now, which
    makes L = λ·W_all an identity when the window starts at the generator's start — a check that no
    job is missing from the bookkeeping. Busy time counts every attempt, including redeliveries.
    """
    state = read_state(r, lab)
    t0 = max(state["started_t"], now - window_s)
    span = now - t0
    ids = r.zrangebyscore(arrivals_key(lab), now - window_s - 7200, "+inf")
    with r.pipeline() as pipe:
        for i in ids:
            pipe.hmget(job(lab, i), "created_at", "state")
            pipe.hvals(job(lab, i) + ":attempts")
        rows = pipe.execute()
    area = busy = 0.0
    n = 0
    in_sys_done, in_sys_all, waits = [], [], []
    for i in range(0, len(rows), 2):
        created, st = rows[i]
        if created is None:
            continue
        created = float(created)
        attempts = sorted((json.loads(a) for a in rows[i + 1]), key=lambda a: a["attempt"])
        end = next((a["end"] for a in attempts if a.get("outcome") == "succeeded"), None)
        if st != "done":
            end = None
        area += _overlap(created, end if end is not None else now, t0, now)
        for a in attempts:
            busy += _overlap(a["start"], a.get("end", now), t0, now)
        if created >= t0:
            n += 1
            in_sys_all.append((end if end is not None else now) - created)
            if end is not None:
                in_sys_done.append(end - created)
            if attempts:
                waits.append(attempts[0]["start"] - created)
            else:
                waits.append(now - created)
    lam = n / span if span > 0 else None
    L = area / span if span > 0 else None
    w_all = _mean(in_sys_all)
    return {
        "t0": round(t0, 3),
        "t1": round(now, 3),
        "arrivals": n,
        "completed": len(in_sys_done),
        "lambda": lam,
        "L": L,
        "W_done": _mean(in_sys_done),
        "W_all": w_all,
        "lambda_W": lam * w_all if lam is not None and w_all is not None else None,
        "queue_wait": _mean(waits),
        "busy_s": busy,
    }


def model(lam: float, workers: int, mix: str = "lesson") -> dict[str, Any]:
    """The numbers model's figures for this λ and pool (app/numbers.py is the one source). Both mixes
    have the same W, so the same figures; `mix` names the one running and lists its job types."""
    L = numbers.littles_law_L(lam, MIX_W)
    rho = L / workers if workers > 0 else math.inf
    return {
        "W": MIX_W,
        "lambda": lam,
        "workers": workers,
        "L": L,
        "rho": _finite(rho),
        "mix_name": mix,
        "approx_wait": _finite(numbers.approx_wait(MIX_W, rho)) if workers > 0 else None,
        "mmc_wait": _finite(numbers.erlang_c_wait(lam, MIX_W, workers)),
        "workers_for_target": numbers.workers_for_utilisation(lam, MIX_W, numbers.Inputs().target_utilisation)
        if lam > 0
        else 0,
        "mix": [
            {"name": jt.name, "label": jt.label, "share_pct": jt.share_pct, "mean_s": jt.mean_s, "p99_s": jt.p99_s}
            for jt in MIXES[mix]
        ],
    }


def timeout_ordering(settings: dict[str, Any]) -> dict[str, Any]:
    """The lesson's ordering: per-job execution timeout (above the slowest job's p99) < VT < lock TTL.

    The execution timeout should trip first (a stuck job freed by its own worker), the VT second
    (a worker that vanished), and nothing should wait for the lock TTL."""
    p99 = max(jt.p99_s for jt in MIX)
    ex, vt, ttl = float(settings["exec_timeout"]), float(settings["vt_seconds"]), float(settings["lock_ttl"])
    checks = [
        {
            "rule": "exec_timeout set",
            "ok": ex > 0,
            "detail": "no per-job timeout: a stuck job holds its worker until the VT hands it to another",
        },
        {
            "rule": "exec_timeout ≥ slowest job's p99",
            "ok": ex == 0 or ex >= p99,
            "detail": f"an execution timeout under {p99:g} s kills healthy slow transcodes",
        },
        {
            "rule": "exec_timeout < vt_seconds",
            "ok": ex == 0 or ex < vt,
            "detail": "the VT expires before the job's own timeout: a slow job is redelivered while it still runs",
        },
        {
            "rule": "vt_seconds < lock_ttl",
            "ok": vt < ttl,
            "detail": "the lock TTL would expire before the VT decides the worker is gone",
        },
    ]
    return {
        "exec_timeout": ex,
        "vt_seconds": vt,
        "lock_ttl": ttl,
        "p99": p99,
        "ok": all(c["ok"] for c in checks),
        "checks": checks,
    }
