"""A full disk as a process sees it: the Redis-protocol server refuses writes it cannot persist (`MISCONF`).

With its AOF on a full disk the server answers every write with MISCONF until a write to its own data
succeeds again; reads still work. The web answers such a change 507 (app/errors.py); the pool supervisor
waits, says so once, and carries on when space returns (workers/supervisor.py).
"""

from __future__ import annotations

import redis


def persist_refused(e: redis.ResponseError) -> bool:
    """The server refused a write because it cannot write its own data to disk (its disk is full, so its last
    AOF write or snapshot failed). Reads still work; writes resume once it can."""
    return "MISCONF" in str(e)
