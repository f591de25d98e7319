"""Chapter 7's cron entry as both processes see it: the task's name, its keys, and how far each replica's
clock runs ahead. The replica process itself is workers/engines/scheduler.py."""

from __future__ import annotations

from core.keys import key

TASK = "send-digest"


def cron_key(lab: str, *parts: str) -> str:
    return key(lab, "cron", *parts)


def clock_offset(settings: dict, replica: str) -> float:
    """How far this replica's clock runs ahead of replica 1's (replica k of N: skew·(k−1)/(N−1))."""
    n = int(settings["scheduler_replicas"])
    k = int(replica.lstrip("r") or 1)
    return float(settings["clock_skew"]) * (k - 1) / (n - 1) if n > 1 else 0.0


def digest(tick: int, user: int) -> str:
    """One digest's name in the emails and sent hashes: the one `tick` owes `user` ("tick:user")."""
    return f"{tick}:{user}"


def digest_tick(name: str) -> int:
    """The tick a digest (`digest`'s name) was owed by."""
    return int(name.split(":", 1)[0])


def lease_watch(replica: str) -> str:
    """The clock barrier a follower holds at the leader lease's expiry (workers/engines/scheduler.py), so
    simulated time cannot pass that moment before it has tried to take the lease; the fleet lifts a killed
    replica's at once."""
    return f"lease-watch:{replica}"
