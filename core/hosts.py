"""The live pool hosts, as the server lists them: what the web process shows and a host reads before
it places a lab (workers/hosts.py keeps the registry and the per-lab ownership lease up to date)."""

from __future__ import annotations

import redis

from core.keys import HOSTS, host_key


def live_hosts(r: redis.Redis) -> dict[str, dict]:
    """Every registered host whose entry has not expired: id → its fields."""
    ids = sorted(r.smembers(HOSTS))
    if not ids:
        return {}
    with r.pipeline(transaction=False) as pipe:
        for h in ids:
            pipe.hgetall(host_key(h))
        rows = pipe.execute()
    return {(h.decode() if isinstance(h, bytes) else h): row for h, row in zip(ids, rows, strict=True) if row}
