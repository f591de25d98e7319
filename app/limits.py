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
from core import parking, registry, slots
from core.keys import key

RATES = {
    "jobs": ("rate_jobs", "job creations"),
    "kills": ("rate_kills", "worker kills and lease expiries"),
    "labs": ("rate_labs", "new labs and rooms"),
    "seats": ("rate_room_seats", "room seats"),
    "challenges": ("rate_challenge_runs", "challenge runs"),
}
LAB_RATES = {"batch": ("lab_batch_jobs", "batch jobs"), "late": ("lab_late_deliveries", "late deliveries")}


def client() -> str:
    """Who is asking, as far as the rate limits can tell: the peer address (the proxy's client behind
    TRUSTED_PROXIES)."""
    return request.remote_addr or "unknown"


def too_many(error: str, detail: str, retry_after: float) -> ApiError:
    wait = max(1, math.ceil(retry_after))
    return ApiError(429, error, detail, {"Retry-After": str(wait)})


def labs_full(max_labs: int) -> ApiError:
    """The one answer every way of opening or resuming a lab gives when the machine runs all it may."""
    return too_many(
        "labs_full", f"this machine is full: all {max_labs} labs it may run are in use; try again in a minute", 60
    )


def spend(r: redis.Redis, name: str, client: str, limit: int, window: int, now: float, n: int = 1) -> float | None:
    """Count `n` uses in this client's current window; seconds until the window ends if over `limit`."""
    if limit <= 0:
        return None
    slot = int(now // window)
    k = f"ratelimit:{name}:{client}:{slot}"
    with r.pipeline(transaction=True) as pipe:
        pipe.incrby(k, n)
        pipe.expire(k, window + 1)
        used = pipe.execute()[0]
    return (slot + 1) * window - now if used > limit else None


def check_rate(r: redis.Redis, name: str, n: int = 1) -> None:
    """429 once this client has spent its budget for `name` (a key of RATES) in the window (`n` uses now)."""
    cfg = current_app.config["LAB"]
    attr, what = RATES[name]
    limit = getattr(cfg, attr)
    wait = spend(r, name, client(), limit, cfg.rate_window, time.time(), n)
    if wait is not None:
        raise too_many(
            "rate_limited",
            f"at most {limit} {what} per {cfg.rate_window} s from one client; try again in {math.ceil(wait)} s",
            wait,
        )


def refund(r: redis.Redis, name: str) -> None:
    """Give back one use of `name` that `check_rate` counted in this client's window: a call refused after it for
    another reason (no room for its processes) spends nothing of the client's budget."""
    cfg = current_app.config["LAB"]
    spend(r, name, client(), getattr(cfg, RATES[name][0]), cfg.rate_window, time.time(), -1)


def refused(r: redis.Redis, e: slots.Refused, who: str, whose: str = "the roomiest pool host") -> ApiError:
    """The 429 a refused reservation answers: the client's cap on running labs (with them listed, so the
    widget can offer to park or close the oldest) or on labs kept (listed too: the widget offers to close the
    oldest), the deployment's cap, or a host's process ceiling."""
    cfg = current_app.config["LAB"]
    if e.kind == "labs":
        return labs_full(cfg.max_labs)
    if e.kind == "live":
        err = too_many(
            "client_labs_kept",
            f"one client may keep {cfg.max_client_live_labs} labs at once, parked "
            f"ones included, and you keep {e.running}: close one (or wait for one to expire), then "
            "open this lab",
            60,
        )
        err.extra = {"kept": [{"lab_id": lab, "since": since} for lab, since in slots.kept_by(r, who)]}
        return err
    if e.kind == "client":
        cap = cfg.max_client_labs
        running = [{"lab_id": x.lab, "since": x.since, "processes": x.processes} for x in parking.running_of(r, who)]
        err = too_many(
            "client_labs_full",
            f"one client may run {cap} labs at once and a page is open on each of "
            "yours: park or close one, then open this lab",
            60,
        )
        err.extra = {"running": running}
        return err
    return too_many(
        "workers_full",
        f"{whose} runs at most {e.ceiling} workers (scheduler replicas count as "
        f"workers) and {e.in_use} are in use by other labs; ask for at most {max(0, e.ceiling - e.in_use)} "
        "or try again in a minute",
        60,
    )


def reserve(
    r: redis.Redis, want: list[tuple[str, int]], who: str | None = None, whose: str = "the roomiest pool host"
) -> None:
    """Take the running-lab slots and processes of `want` (lab, processes) for `who` (this client), in one
    atomic step (core/slots.py), parking the client's own unwatched labs first if it is at its cap."""
    cfg = current_app.config["LAB"]
    who = who or client()
    try:
        parking.reserve(
            r, want, who, cfg.max_client_labs, cfg.max_workers, max_labs=cfg.max_labs, live_cap=cfg.max_client_live_labs
        )
    except slots.Refused as e:
        raise refused(r, e, who, whose) from None


def open_labs(r: redis.Redis, processes: list[int]) -> list[str]:
    """Before any lab is opened (new, race, branch, room, follow-along): reserve a running-lab slot and its
    processes for each new lab, then spend one of the client's lab openings (rate) per lab: a race's lanes
    count one by one here as in every cap. The ids the new labs must be created with; `opened` once they
    exist, `slots.forget` if creating them failed."""
    ids = [registry.new_id() for _ in processes]
    reserve(r, list(zip(ids, processes, strict=True)))
    try:
        check_rate(r, "labs", len(ids))
    except ApiError:
        slots.forget(r, *ids)
        raise
    return ids


def opened(r: redis.Redis, labs: list[str]) -> None:
    """Remember which client the new labs count against (a resume takes their slot again for it)."""
    with r.pipeline(transaction=False) as pipe:
        for lab in labs:
            pipe.hset(key(lab, "meta"), "client", client())
        pipe.execute()


def resize(r: redis.Redis, lab: str, processes: int) -> None:
    """A running lab asks for a different number of processes (PATCH workers / scheduler_replicas): the
    same atomic step as opening it, so concurrent PATCHes cannot pass the host's ceiling together."""
    reserve(r, [(lab, processes)], r.hget(key(lab, "meta"), "client") or client(), "this lab's pool host")


def wake(r: redis.Redis, lab: str) -> None:
    """A page or the owner looked at `lab`: resume it if it is parked. The slot is taken for the client
    that opened it; 429 client_labs_full if that client's other running labs are all watched."""
    cfg = current_app.config["LAB"]
    try:
        parking.resume(r, lab, cfg.max_client_labs, cfg.max_workers, max_labs=cfg.max_labs)
    except slots.Refused as e:
        raise refused(r, e, r.hget(key(lab, "meta"), "client") or client()) from None


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
        raise too_many(
            "lab_rate_limited",
            f"one lab may ask for at most {limit} {what} per {cfg.rate_window} s "
            f"({used - n} used); try again in {math.ceil(wait)} s",
            wait,
        )


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
        raise too_many(
            "rate_limited",
            f"too many unknown room codes from one client (at most "
            f"{cfg.rate_room_lookups} per {cfg.rate_window} s); try again in {math.ceil(wait)} s",
            wait,
        )


def room_miss(r: redis.Redis) -> None:
    """Count one unknown room code against this client."""
    cfg = current_app.config["LAB"]
    k = f"ratelimit:roommiss:{client()}:{int(time.time() // cfg.rate_window)}"
    with r.pipeline(transaction=True) as pipe:
        pipe.incr(k)
        pipe.expire(k, cfg.rate_window + 1)
        pipe.execute()
