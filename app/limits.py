"""Capacity and per-client rate limits: what keeps one eager or hostile client from taking the machine.

A lab costs real processes (rq workers, ffmpeg), so the machine has a ceiling on workers across all
labs, and each client (by IP address) a budget of job creations and of disruptions (worker kills and
expired leases) per fixed window, counted in Redis so every web process shares one count. Every
refusal is a 429 that says how long to wait (`Retry-After`), never a silent drop. The numbers
themselves live once, in `core.config`.
"""

from __future__ import annotations

import math
import time

import redis
from flask import current_app, request

from app.errors import ApiError
from core import registry

RATES = {"jobs": ("rate_jobs", "job creations"), "kills": ("rate_kills", "worker kills and lease expiries")}


def too_many(error: str, detail: str, retry_after: float) -> ApiError:
    wait = max(1, math.ceil(retry_after))
    return ApiError(429, error, detail, {"Retry-After": str(wait)})


def labs_full(max_labs: int) -> ApiError:
    """The one answer every way of opening a lab (new, branch, room) gives when the machine is full."""
    return too_many("labs_full", f"this machine is full: all {max_labs} labs are in use; try again in a minute", 60)


def spend(r: redis.Redis, name: str, client: str, limit: int, window: int, now: float) -> float | None:
    """Count one use in this client's current window; seconds until the window ends if over `limit`."""
    if limit <= 0:
        return None
    slot = int(now // window)
    k = f"ratelimit:{name}:{client}:{slot}"
    with r.pipeline(transaction=True) as pipe:
        pipe.incr(k)
        pipe.expire(k, window + 1)
        used = pipe.execute()[0]
    return (slot + 1) * window - now if used > limit else None


def check_rate(r: redis.Redis, name: str) -> None:
    """429 once this client has spent its budget for `name` ("jobs" or "kills") in the window."""
    cfg = current_app.config["LAB"]
    attr, what = RATES[name]
    limit = getattr(cfg, attr)
    wait = spend(r, name, request.remote_addr or "unknown", limit, cfg.rate_window, time.time())
    if wait is not None:
        raise too_many("rate_limited", f"at most {limit} {what} per {cfg.rate_window} s from one client; "
                       f"try again in {math.ceil(wait)} s", wait)



def check_workers(r: redis.Redis, want: int, lab: str | None = None) -> None:
    """429 if giving `lab` (or a new lab) `want` workers would pass the machine's ceiling."""
    cap = current_app.config["LAB"].max_workers
    used = registry.workers_in_use(r, exclude=lab)
    if used + want > cap:
        raise too_many("workers_full", f"this machine runs at most {cap} workers and {used} are in use "
                       f"by other labs; ask for at most {max(0, cap - used)} or try again in a minute", 60)
