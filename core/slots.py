"""The slot ledger: running labs and their processes, reserved in one atomic step before anything starts.

Every running lab holds one entry in the hash `slots:labs` (lab → "host processes client since"): the
pool host whose ceiling its processes count against (`web` while no pool host is live: the web's own
`MAX_WORKERS`), how many processes it asked for (rq workers and chapter 7's scheduler replicas), the
client it counts against, and when it was taken. `reserve` checks the client's running-lab cap and each
host's ceiling and writes the entries in one Lua script, so ten or a hundred concurrent requests cannot
pass a check together; a resize (PATCH workers, the autoscaler) is the same call for a lab that already
holds an entry. The same step holds the deployment's running-lab cap (MAX_LABS: labs with processes,
not parked ones) and each client's cap on the labs it keeps alive, parked ones included
(MAX_CLIENT_LIVE_LABS), from the hash `labs:client` (lab → "client since": every live lab, written here
when a lab is first reserved, removed by teardown); a race's lanes count one by one in each. A parked lab
gives its slot back (`release`), a deleted or expired one its slot and its place (`forget`). Entries of
labs that are no longer registered are dropped by the script itself after a short grace (a lab is reserved
just before it is registered), so a crash between the two never leaks a slot for long.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from core.keys import HOSTS, LABS

LEDGER = "slots:labs"
OWNERS = "labs:client"  # every live lab (parked ones too) → "client since"
GRACE_S = 60.0  # a reservation may wait this long for its lab to be registered before it is dropped

_RESERVE = """
-- ledger: slots:labs, lab -> "host processes client since"; registered: labs;
-- hosts: pool:hosts, pool host ids (each a hash host_prefix..id with max_workers, leaving; gone when silent);
-- owners: labs:client, every live lab (parked too) -> "client since"
local ledger, registered, hosts, owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- now_s (s); who: the client; cap_s: its running-lab cap (0: none); web_ceiling: the ceiling while no pool host is
-- live; grace (s); max_labs: running labs on the deployment (0: none); live_cap: labs one client keeps alive,
-- parked ones too (0: none); then ARGV[9..]: lab, processes, lab, processes, ...  (all or none are reserved)
local now_s, who, cap_s, web_ceiling, host_prefix, grace = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
-- returns {'ok'} | {'live', kept} | {'client', running} | {'labs', running} | {'workers', ceiling, in use}
local now, cap, max_labs, live_cap = tonumber(now_s), tonumber(cap_s), tonumber(ARGV[7]), tonumber(ARGV[8])
local want, order = {}, {}
for i = 9, #ARGV, 2 do want[ARGV[i]] = tonumber(ARGV[i + 1]); order[#order + 1] = ARGV[i] end
local ceil, any = {}, false
for _, h in ipairs(redis.call('SMEMBERS', hosts)) do
  local f = redis.call('HMGET', host_prefix .. h, 'max_workers', 'leaving')
  if f[1] and f[2] ~= '1' then ceil[h] = tonumber(f[1]); any = true end
end
if not any then ceil['web'] = tonumber(web_ceiling) end
local used, labs, mine, held, running = {}, {}, 0, {}, 0
local flat = redis.call('HGETALL', ledger)
for i = 1, #flat, 2 do
  local lab = flat[i]
  local b, p, c, t = string.match(flat[i + 1], '^(%S+) (%S+) (%S+) (%S+)$')
  if redis.call('SISMEMBER', registered, lab) == 0 and now - tonumber(t) > tonumber(grace) then
    redis.call('HDEL', ledger, lab)
  elseif want[lab] then
    held[lab] = {b, c, t}
    running = running + 1
  else
    used[b] = (used[b] or 0) + tonumber(p)
    labs[b] = (labs[b] or 0) + 1
    running = running + 1
    if c == who then mine = mine + 1 end
  end
end
local kept, known = 0, {}
local alive = redis.call('HGETALL', owners)
for i = 1, #alive, 2 do
  local lab = alive[i]
  local c, t = string.match(alive[i + 1], '^(%S+) (%S+)$')
  if redis.call('SISMEMBER', registered, lab) == 0 and now - tonumber(t) > tonumber(grace) then
    redis.call('HDEL', owners, lab)
  else
    if want[lab] then known[lab] = true end
    if c == who then kept = kept + 1 end
  end
end
local born = {}
for _, lab in ipairs(order) do if not known[lab] and not held[lab] then born[#born + 1] = lab end end
if #born > 0 and live_cap > 0 and kept + #born > live_cap then return {'live', kept} end
local fresh = 0
for _, lab in ipairs(order) do if not held[lab] then fresh = fresh + 1 end end
if fresh > 0 and cap > 0 and mine + #order > cap then return {'client', mine} end
if fresh > 0 and max_labs > 0 and running + fresh > max_labs then return {'labs', running} end
local rows = {}
for _, lab in ipairs(order) do
  local h = held[lab]
  local b = h and ceil[h[1]] and h[1] or nil
  if not b then
    local best = nil  -- the most room, then the fewest labs, then the name
    for name, c in pairs(ceil) do
      local free, n = c - (used[name] or 0), labs[name] or 0
      if best == nil or free > best[2] or (free == best[2] and (n < best[3] or (n == best[3] and name < best[1])))
      then best = {name, free, n} end
    end
    b = best[1]
  end
  if (used[b] or 0) + want[lab] > ceil[b] then return {'workers', ceil[b], used[b] or 0} end
  used[b] = (used[b] or 0) + want[lab]
  labs[b] = (labs[b] or 0) + 1
  rows[#rows + 1] = lab
  rows[#rows + 1] = b .. ' ' .. want[lab] .. ' ' .. (h and h[2] or who) .. ' ' .. (h and h[3] or now_s)
end
redis.call('HSET', ledger, unpack(rows))
for _, lab in ipairs(born) do redis.call('HSET', owners, lab, who .. ' ' .. now_s) end
return {'ok'}
"""


@dataclass
class Refused(Exception):
    """A reservation the ledger refused: `kind` "client" (the client's running-lab cap, `running` of its
    labs run), "live" (the client's cap on labs kept alive, parked included: `running` of them it keeps),
    "labs" (the deployment's running-lab cap, `running` labs run) or "workers" (a host's process ceiling
    `ceiling`, `in_use` taken by other labs)."""

    kind: str
    running: int = 0
    ceiling: int = 0
    in_use: int = 0


@dataclass
class Entry:
    lab: str
    host: str
    processes: int
    client: str
    since: float


def reserve(
    r: redis.Redis,
    want: list[tuple[str, int]],
    client: str,
    client_cap: int,
    web_ceiling: int,
    max_labs: int = 0,
    live_cap: int = 0,
) -> None:
    """Reserve a running-lab slot and its processes for each (lab, processes), all or none; a lab that
    already holds a slot is resized in place (its client and host kept). `client_cap`: labs the client may
    run; `web_ceiling`: processes while no pool host is live; `max_labs`: labs running on the deployment;
    `live_cap`: labs the client may keep alive, parked ones too (0: no cap). Raises Refused."""
    args: list = [repr(time.time()), client, client_cap, web_ceiling, "pool:host:", GRACE_S, max_labs, live_cap]
    for lab, processes in want:
        args += [lab, max(0, int(processes))]
    res = r.eval(_RESERVE, 4, LEDGER, LABS, HOSTS, OWNERS, *args)
    kind = res[0].decode() if isinstance(res[0], bytes) else res[0]
    if kind in ("client", "live", "labs"):
        raise Refused(kind, running=int(res[1]))
    if kind == "workers":
        raise Refused("workers", ceiling=int(res[1]), in_use=int(res[2]))


def release(r: redis.Redis, *labs: str) -> None:
    """Give back the slots of labs that stopped running (parked, deleted, expired, never registered)."""
    if labs:
        r.hdel(LEDGER, *labs)


def forget(r: redis.Redis, *labs: str) -> None:
    """Labs that are gone (deleted, expired): no slot, and no longer kept alive by their client."""
    if labs:
        with r.pipeline(transaction=True) as pipe:
            pipe.hdel(LEDGER, *labs)
            pipe.hdel(OWNERS, *labs)
            pipe.execute()


def entries(r: redis.Redis) -> list[Entry]:
    """Every reservation, oldest first."""
    out = []
    for lab, raw in r.hgetall(LEDGER).items():
        host, processes, client, since = raw.split(" ")
        out.append(Entry(lab, host, int(processes), client, float(since)))
    return sorted(out, key=lambda e: e.since)


def kept_by(r: redis.Redis, client: str) -> list[tuple[str, float]]:
    """The labs `client` keeps alive, parked ones too, as (lab, since), oldest first (what a refusal at
    MAX_CLIENT_LIVE_LABS lists)."""
    mine = []
    for lab, raw in r.hgetall(OWNERS).items():
        who, since = raw.rsplit(" ", 1)
        if who == client:
            mine.append((lab, float(since)))
    return sorted(mine, key=lambda x: x[1])
