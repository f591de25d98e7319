"""Chapter 7's cron entry as both processes see it: the task's name, its keys, and how far each replica's
clock runs ahead. The replica process itself is workers/engines/scheduler.py."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from core.keys import key

TASK = "send-digest"
PLAN = "replicas:plan"  # the barrier at a challenge plan's next moment (core/challenges/run.py, the fleet follows it)


def cron_key(lab: str, *parts: str) -> str:
    return key(lab, "cron", *parts)


def clock_offset(settings: Mapping[str, Any], replica: str) -> float:
    """How far this replica's clock runs ahead of replica 1's (replica k of N: skew·(k−1)/(N−1))."""
    n = int(settings["scheduler_replicas"])
    k = int(replica.lstrip("r") or 1)
    return float(settings["clock_skew"]) * (k - 1) / (n - 1) if n > 1 else 0.0


def fire_delay(settings: Mapping[str, Any], replica: str) -> float:
    """How long after each tick this replica's scheduler fires (replica k of N: late·(k−1)/(N−1)), on its
    own clock: replicas do not all fire on the tick, and a late one may find a short lock already expired."""
    n = int(settings["scheduler_replicas"])
    k = int(replica.lstrip("r") or 1)
    return float(settings.get("cron_late", 0.0)) * (k - 1) / (n - 1) if n > 1 else 0.0


def tick_of(settings: Mapping[str, Any], replica: str, lab_now: float) -> int:
    """The tick this replica's scheduler is on when the lab's clock reads `lab_now` (its own clock, its delay)."""
    now = lab_now + clock_offset(settings, replica)
    return math.floor((now - fire_delay(settings, replica)) / float(settings["cron_interval"]))


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
