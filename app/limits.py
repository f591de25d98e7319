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
from core.keys import key
from workers import hosts

RATES = {"jobs": ("rate_jobs", "job creations"), "kills": ("rate_kills", "worker kills and lease expiries"),
         "labs": ("rate_labs", "new labs and rooms")}
LAB_RATES = {"batch": ("lab_batch_jobs", "batch jobs"), "late": ("lab_late_deliveries", "late deliveries")}


def client() -> str:
    """Who is asking, as far as the rate limits can tell: the peer address (the proxy's client behind
    TRUSTED_PROXIES)."""
    return request.remote_addr or "unknown"


def client_labs_key(who: str) -> str:
    return f"client:{who}:labs"


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
    wait = spend(r, name, client(), limit, cfg.rate_window, time.time())
    if wait is not None:
        raise too_many("rate_limited", f"at most {limit} {what} per {cfg.rate_window} s from one client; "
                       f"try again in {math.ceil(wait)} s", wait)



def check_workers(r: redis.Redis, want: int, lab: str | None = None) -> None:
    """429 if giving `lab` (or a new lab) `want` processes (workers + scheduler replicas) would pass the
    ceiling of the pool host that runs them: `MAX_WORKERS` is each host's own (workers/hosts.py `room`),
    so every pool host added to a class adds its workers. While no host is live, this web process's own
    `MAX_WORKERS` over every lab."""
    room = hosts.room(r, lab)
    if room is None:
        cap = current_app.config["LAB"].max_workers
        free = cap - registry.workers_in_use(r, exclude=lab)
    else:
        free, cap = room
    if want > free:
        whose = "this lab's pool host" if lab else "the roomiest pool host"
        raise too_many("workers_full", f"{whose} runs at most {cap} workers (scheduler replicas count as workers) "
                       f"and {cap - free} are in use by other labs; ask for at most {max(0, free)} or try again "
                       "in a minute", 60)


def check_new_lab(r: redis.Redis) -> None:
    """Before any lab is opened (new, branch, room, follow-along): this client's concurrency limit
    (labs alive at once), then its rate limit (labs opened per window). 429 + Retry-After."""
    cfg = current_app.config["LAB"]
    who = client()
    if cfg.max_client_labs > 0:
        k = client_labs_key(who)
        mine = r.smembers(k)
        if mine:
            with r.pipeline(transaction=False) as pipe:
                for lab in mine:
                    pipe.sismember(registry.LABS, lab)
                gone = [lab for lab, alive in zip(mine, pipe.execute(), strict=True) if not alive]
            if gone:
                r.srem(k, *gone)
            if len(mine) - len(gone) >= cfg.max_client_labs:
                raise too_many("client_labs_full", f"one client may hold {cfg.max_client_labs} labs at once; "
                               "delete one (or let it expire) before opening another", 60)
    check_rate(r, "labs")


def record_lab(r: redis.Redis, lab: str) -> None:
    """Count a new lab against its client's concurrency limit (pruned as labs go), and remember the client
    on the lab: its uploads and its jobs' outputs count against that client's byte budget (core.blobs)."""
    who = client()
    k = client_labs_key(who)
    with r.pipeline(transaction=False) as pipe:
        pipe.sadd(k, lab)
        pipe.expire(k, current_app.config["LAB"].lab_idle_ttl * 2)
        pipe.hset(key(lab, "meta"), "client", who)
        pipe.execute()


def check_lab_rate(r: redis.Redis, lab: str, name: str, n: int = 1) -> None:
    """A lab's own budget for batch calls ("batch": tier jobs, "late": late deliveries) per window, shared
    by everyone holding its token: one lab's flood cannot take the machine's forks from the others."""
    cfg = current_app.config["LAB"]
    attr, what = LAB_RATES[name]
    limit = getattr(cfg, attr)
    if limit <= 0:
        return
    now = time.time()
    slot = int(now // cfg.rate_window)
    k = f"ratelimit:lab:{name}:{lab}:{slot}"
    with r.pipeline(transaction=True) as pipe:
        pipe.incrby(k, n)
        pipe.expire(k, cfg.rate_window + 1)
        used = pipe.execute()[0]
    if used > limit:
        r.decrby(k, n)  # a refused call spends nothing
        wait = (slot + 1) * cfg.rate_window - now
        raise too_many("lab_rate_limited", f"one lab may ask for at most {limit} {what} per {cfg.rate_window} s "
                       f"({used - n} used); try again in {math.ceil(wait)} s", wait)


def check_room_lookup(r: redis.Redis) -> None:
    """Room codes are capabilities: a client that has tried `rate_room_lookups` unknown codes this window
    gets 429 for *every* lookup until the window ends (answering hits but not misses would be an oracle)."""
    cfg = current_app.config["LAB"]
    if cfg.rate_room_lookups <= 0:
        return
    now = time.time()
    slot = int(now // cfg.rate_window)
    if int(r.get(f"ratelimit:roommiss:{client()}:{slot}") or 0) >= cfg.rate_room_lookups:
        wait = (slot + 1) * cfg.rate_window - now
        raise too_many("rate_limited", f"too many unknown room codes from one client (at most "
                       f"{cfg.rate_room_lookups} per {cfg.rate_window} s); try again in {math.ceil(wait)} s", wait)


def room_miss(r: redis.Redis) -> None:
    """Count one unknown room code against this client."""
    cfg = current_app.config["LAB"]
    k = f"ratelimit:roommiss:{client()}:{int(time.time() // cfg.rate_window)}"
    with r.pipeline(transaction=True) as pipe:
        pipe.incr(k)
        pipe.expire(k, cfg.rate_window + 1)
        pipe.execute()
