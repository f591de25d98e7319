"""Chapter 7's lock and leader lease: `SET NX EX` on the lab's clock, with the owner's own release.

Redis's own EX counts real milliseconds on the server; a lab's clock is simulated (paused, stepped,
run at 1000×), so a real EX would expire while the lab stands still. These scripts do what
`SET key value NX EX ttl` does — set only if absent or expired, atomically — with the deadline kept
in simulated seconds. The deadline is written on the holder's clock and every replica judges it by
its own, as an `expires_at` column in a lock row is: a replica whose clock runs ahead sees the lock
expire early, which is the lesson's clock skew eating the TTL's margin.
The face both processes share (state keys, readers, commands) is core/engines/locks.py.
"""

from __future__ import annotations

import redis

from core.engines.locks import lock_key

# now: on the caller's clock.
# Returns {won, holder, expires, fence[, previous holder, its expiry]}.
_ACQUIRE = """
local lock = KEYS[1]
local me, now_s, ttl = ARGV[1], ARGV[2], ARGV[3]
local holder = redis.call('HGET', lock, 'holder')
local expires = tonumber(redis.call('HGET', lock, 'expires') or '0')
local now = tonumber(now_s)
if holder and expires > now and holder ~= me then
  return {0, holder, tostring(expires), redis.call('HGET', lock, 'fence')}
end
local fence = redis.call('HINCRBY', lock, 'fence', 1)
local deadline = now + tonumber(ttl)
redis.call('HSET', lock, 'holder', me, 'expires', tostring(deadline), 'since', now_s)
return {1, me, tostring(deadline), tostring(fence), holder or '', tostring(expires)}
"""
# Only the holder may push its own deadline (heartbeat, lease renewal).
_EXTEND = """
local lock = KEYS[1]
local me, now, ttl = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', lock, 'holder') ~= me then return redis.call('HGET', lock, 'holder') or '' end
redis.call('HSET', lock, 'expires', tostring(tonumber(now) + tonumber(ttl)))
return 1
"""

# Compare-and-delete: release the lock only if it is still this holder's (mode 'delete' skips the check,
# the plain DEL of the lesson's snippet). Returns the holder found ('' when none).
_RELEASE = """
local lock = KEYS[1]
local me, mode = ARGV[1], ARGV[2]
local holder = redis.call('HGET', lock, 'holder') or ''
if holder == me or mode == 'delete' then
  redis.call('HDEL', lock, 'holder', 'expires', 'since')
end
return holder
"""
_scripts: dict[tuple[int, str], object] = {}


def _script(r: redis.Redis, body: str):
    k = (id(r), body)
    if k not in _scripts:
        _scripts[k] = r.register_script(body)
    return _scripts[k]


def acquire(r: redis.Redis, lab: str, name: str, holder: str, now: float, ttl: float) -> dict:
    """Take the lock if it is free or expired by `now` (the caller's clock); re-taking your own renews it."""
    res = _script(r, _ACQUIRE)(keys=[lock_key(lab, name)], args=[holder, repr(now), repr(ttl)])
    out = {"won": bool(int(res[0])), "holder": res[1], "expires": float(res[2]), "fence": int(res[3] or 0)}
    if out["won"]:  # who held it before, and when (on their clock) it ran out
        out["previous"], out["previous_expires"] = res[4] or None, float(res[5])
    return out


def extend(r: redis.Redis, lab: str, name: str, holder: str, now: float, ttl: float) -> str | None:
    """Push the deadline to now + ttl if `holder` still owns the lock; else who does ('' for nobody)."""
    res = _script(r, _EXTEND)(keys=[lock_key(lab, name)], args=[holder, repr(now), repr(ttl)])
    return None if res == 1 else (res or "")


def release(r: redis.Redis, lab: str, name: str, holder: str, mode: str = "compare") -> str:
    """Release; returns who held the lock at that moment (not `holder` → it had expired and moved on)."""
    return _script(r, _RELEASE)(keys=[lock_key(lab, name)], args=[holder, mode]) or ""
