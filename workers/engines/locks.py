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

# KEYS[1] lock hash; ARGV: holder, now (caller's clock), ttl.
# Returns {won, holder, expires, fence[, previous holder, its expiry]}.
_ACQUIRE = """
local holder = redis.call('HGET', KEYS[1], 'holder')
local expires = tonumber(redis.call('HGET', KEYS[1], 'expires') or '0')
local now = tonumber(ARGV[2])
if holder and expires > now and holder ~= ARGV[1] then
  return {0, holder, tostring(expires), redis.call('HGET', KEYS[1], 'fence')}
end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
local deadline = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'expires', tostring(deadline), 'since', ARGV[2])
return {1, ARGV[1], tostring(deadline), tostring(fence), holder or '', tostring(expires)}
"""
# Only the holder may push its own deadline (heartbeat, lease renewal).
_EXTEND = """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return redis.call('HGET', KEYS[1], 'holder') or '' end
redis.call('HSET', KEYS[1], 'expires', tostring(tonumber(ARGV[2]) + tonumber(ARGV[3])))
return 1
"""
# Compare-and-delete: release the lock only if it is still this holder's (ARGV[2] = 'delete' skips the check,
# the plain DEL of the lesson's snippet). Returns the holder found ('' when none).
_RELEASE = """
local holder = redis.call('HGET', KEYS[1], 'holder') or ''
if holder == ARGV[1] or ARGV[2] == 'delete' then
  redis.call('HDEL', KEYS[1], 'holder', 'expires', 'since')
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
