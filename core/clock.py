"""The lab's compressed clock: simulated seconds advance at `speed` per real second.

Stored in Redis (a base point plus a rate) so the web, the supervisor and every worker process
read the same simulated time without talking to each other. Pausing freezes leases, retries and
job progress alike, because they are all measured on this clock.
"""

from __future__ import annotations

import time

import redis

from core.keys import key


def _now(state: dict, real: float | None = None) -> float:
    base_sim = float(state.get("base_sim", 0))
    if state.get("paused") == "1":
        return base_sim
    real = time.time() if real is None else real
    return base_sim + (real - float(state.get("base_real", real))) * float(state.get("speed", 20))


def read(r: redis.Redis, lab: str) -> dict:
    """Clock state plus the current simulated time `t`."""
    state = r.hgetall(key(lab, "clock"))
    return {"t": round(_now(state), 3), "speed": float(state.get("speed", 20)),
            "paused": state.get("paused") == "1"}


def now(r: redis.Redis, lab: str) -> float:
    return _now(r.hgetall(key(lab, "clock")))


def start(r: redis.Redis, lab: str, speed: float, t0: float = 0.0) -> None:
    """Start at t0 (0, or the parent's moment for a branch, so two runs share one time axis)."""
    r.hset(key(lab, "clock"), mapping={"base_sim": t0, "base_real": time.time(), "speed": speed,
                                       "paused": 0})


def _rebase(r: redis.Redis, lab: str, **changes) -> float:
    """Move the base point to now, then apply changes; atomic with WATCH so writers never race."""
    k = key(lab, "clock")
    with r.pipeline() as pipe:
        while True:
            try:
                pipe.watch(k)
                state = pipe.hgetall(k)
                real = time.time()
                t = _now(state, real) + float(changes.pop("advance", 0))
                pipe.multi()
                pipe.hset(k, mapping={"base_sim": t, "base_real": real, **changes})
                pipe.execute()
                return t
            except redis.WatchError:
                continue


def pause(r: redis.Redis, lab: str) -> float:
    return _rebase(r, lab, paused=1)


def resume(r: redis.Redis, lab: str) -> float:
    return _rebase(r, lab, paused=0)


def step(r: redis.Redis, lab: str, seconds: float) -> float:
    """Advance a paused clock by `seconds` of simulated time (single-step)."""
    return _rebase(r, lab, advance=seconds, paused=1)


def set_speed(r: redis.Redis, lab: str, speed: float) -> float:
    return _rebase(r, lab, speed=speed)
