"""Chapter 7's lock as both processes see it: its key and a reading of who holds it until when. Taking,
extending and releasing it (the replicas' scripts) is workers/engines/locks.py."""

from __future__ import annotations

import redis

from core.keys import key


def lock_key(lab: str, name: str) -> str:
    return key(lab, "cron", "lock", name)


def read(r: redis.Redis, lab: str, name: str) -> dict:
    raw = r.hgetall(lock_key(lab, name))
    return {
        "holder": raw.get("holder") or None,
        "expires": float(raw["expires"]) if raw.get("expires") else None,
        "since": float(raw["since"]) if raw.get("since") else None,
        "fence": int(raw.get("fence", 0)),
    }
