"""Pool hosts sharing one server: a registry of live hosts and a per-lab ownership lease.

This is chapter 7's leader lease, used for our own placement. Each pool process (one per machine)
registers as a *host*: a hash `pool:host:{id}` with a TTL of one lease period, renewed by its
heartbeat every third of it, listing its worker ceiling, the workers its labs ask for and its CPU
load. Each lab is owned by exactly one host through `lab:{id}:owner` — the owner's id with the same
TTL, renewed by the owner only (compare-and-expire). A host that goes silent (SIGKILL, power cut,
partition) stops renewing: within one lease period its entry and its leases are gone, the next tick of
any live host places each orphaned lab again, and the new owner starts its workers. The dead host's
in-flight jobs come back the way a crashed worker's do: their broker leases expire and the new owner's
reaper redelivers them.

Placement is one Lua step, so a burst of new labs spreads: the host the lab's processes were reserved
on (core/slots.py) when it is live, else the least-loaded live host (workers asked for over its
ceiling, plus a share of its CPU load; then fewest labs) that still has room for the lab's workers gets
the lease, and its count goes up at once. A host that is stopping (`leaving`) is
never chosen; it releases its leases itself so its labs move without waiting for them to expire.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Container, Mapping

import redis

from core import clock, registry, slots, stream
from core.broker import reaper
from core.hosts import live_hosts
from core.keys import HOST_SEQ, HOSTS, host_commands, host_key, host_running, key, owner

CPU_WEIGHT = 0.5  # how much a fully loaded CPU counts against a host, beside a full worker ceiling

_PLACE = """
local owner_lease, hosts, ledger = KEYS[1], KEYS[2], KEYS[3]  -- ledger: the slot ledger (core/slots.py)
-- processes: how many the lab asks for; lease_ms: the owner lease's length; lab: the lab's id
local processes, lease_ms, host_prefix, cpu_weight, lab = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local cur = redis.call('GET', owner_lease)
if cur then return cur end
local demand = tonumber(processes)
local best, best_score, best_labs = nil, nil, nil
local held = redis.call('HGET', ledger, lab)
local named = held and string.match(held, '^(%S+)')
if named and redis.call('HGET', host_prefix .. named, 'leaving') == '0' then
  best = named  -- the host its processes were reserved on when they were asked for
end
for _, h in ipairs(best and {} or redis.call('SMEMBERS', hosts)) do
  local f = redis.call('HMGET', host_prefix .. h, 'workers', 'max_workers', 'cpu', 'labs', 'leaving')
  if not f[2] then
    redis.call('SREM', hosts, h)
  elseif f[5] ~= '1' then
    local w, cap = tonumber(f[1] or '0'), tonumber(f[2])
    local labs = tonumber(f[4] or '0')
    if w + demand <= cap then
      local score = w / math.max(cap, 1) + tonumber(cpu_weight) * math.min(tonumber(f[3] or '0'), 2)
      if best == nil or score < best_score or (score == best_score and (labs < best_labs
          or (labs == best_labs and h < best))) then
        best, best_score, best_labs = h, score, labs
      end
    end
  end
end
if best == nil then return false end
redis.call('SET', owner_lease, best, 'PX', lease_ms)
redis.call('HINCRBY', host_prefix .. best, 'workers', demand)
redis.call('HINCRBY', host_prefix .. best, 'labs', 1)
return best
"""

_RENEW = """
-- KEYS: the labs' owner leases
local host_id, lease_ms = ARGV[1], ARGV[2]
-- Extends the leases this host holds and answers every lab's holder (false: unowned), as an MGET would:
-- one read of them all, in chunks within Lua's unpack limit.
local holders = {}
for s = 1, #KEYS, 500 do
  for _, h in ipairs(redis.call('MGET', unpack(KEYS, s, math.min(s + 499, #KEYS)))) do
    holders[#holders + 1] = h
  end
end
for i, h in ipairs(holders) do
  if h == host_id then redis.call('PEXPIRE', KEYS[i], lease_ms) end
end
return holders
"""

_RELEASE = """
local owner_lease = KEYS[1]
local host_id = ARGV[1]
if redis.call('GET', owner_lease) == host_id then return redis.call('DEL', owner_lease) end
return 0
"""

_CLAIM_BACK = """
local owner_lease = KEYS[1]
local host_id, lease_ms = ARGV[1], ARGV[2]
local cur = redis.call('GET', owner_lease)
if cur == host_id then redis.call('PEXPIRE', owner_lease, lease_ms) return 1 end
if cur then return 0 end
redis.call('SET', owner_lease, host_id, 'PX', lease_ms)
return 1
"""


class HostAgent:
    """This pool process as a host: its registry entry, its leases, its command list."""

    def __init__(self, r: redis.Redis, host_id: str, lease_s: float, max_workers: int):
        self.r = r
        self.id = host_id or f"p{r.incr(HOST_SEQ)}"
        self.lease_ms = max(100, int(lease_s * 1000))
        self.beat_every = lease_s / 3
        self.max_workers = max_workers
        self.commands = host_commands(self.id)
        self.last_beat = 0.0
        self.leaving = False
        self.started = time.time()
        self.waiting: set[str] = set()  # labs no host had room for (narrated once)
        self.reported: tuple[int, float] | None = None  # (processes, heartbeat) last written for /metrics
        self.adopt_soon = False  # a command came for a lab not placed yet: tick before reading commands again

    # --- registry -----------------------------------------------------------------------------
    def heartbeat(self, workers: int, labs: int) -> None:
        """Renew this host's entry: its ceiling and what its labs ask for now (placement reads these)."""
        try:
            cpu = os.getloadavg()[0] / (os.cpu_count() or 1)
        except OSError:
            cpu = 0.0
        with self.r.pipeline(transaction=True) as pipe:
            pipe.hset(
                host_key(self.id),
                mapping={
                    "id": self.id,
                    "pid": os.getpid(),
                    "hostname": socket.gethostname(),
                    "max_workers": self.max_workers,
                    "workers": workers,
                    "labs": labs,
                    "cpu": round(cpu, 3),
                    "started": self.started,
                    "beat": time.time(),
                    "leaving": int(self.leaving),
                },
            )
            pipe.pexpire(host_key(self.id), self.lease_ms)
            pipe.sadd(HOSTS, self.id)
            pipe.execute()

    def deregister(self) -> None:
        with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(host_key(self.id), self.commands)
            pipe.srem(HOSTS, self.id)
            pipe.execute()

    # --- leases -------------------------------------------------------------------------------
    def owners(self, labs: list[str]) -> dict[str, str | None]:
        """Each lab's owning host (None: unowned, waiting to be placed), in one round trip."""
        if not labs:
            return {}
        return dict(zip(labs, self.r.mget([owner(lab) for lab in labs]), strict=True))

    def place(self, lab: str, demand: int) -> str | None:
        """Give an unowned lab to the least-loaded live host with room (maybe another host); its id."""
        res = self.r.eval(
            _PLACE,
            3,
            owner(lab),
            HOSTS,
            slots.LEDGER,
            max(0, int(demand)),
            self.lease_ms,
            "pool:host:",
            CPU_WEIGHT,
            lab,
        )
        return res.decode() if isinstance(res, bytes) else res

    def renew(self, labs: list[str]) -> dict[str, str | None]:
        """Extend this host's lease on each lab it holds, and read each lab's owning host as `owners` does, in
        one step (a heartbeat reads the owners anyway: one read instead of two per lab)."""
        if not labs:
            return {}
        held = self.r.eval(_RENEW, len(labs), *[owner(lab) for lab in labs], self.id, self.lease_ms)
        return {lab: (h.decode() if isinstance(h, bytes) else h) or None for lab, h in zip(labs, held, strict=True)}

    def claim_back(self, lab: str) -> bool:
        """After a server outage long enough to lose a lease nobody else took: hold it again."""
        return bool(self.r.eval(_CLAIM_BACK, 1, owner(lab), self.id, self.lease_ms))

    def release(self, lab: str) -> bool:
        """Give a lab up now (graceful stop): only if this host still holds it (compare-and-delete)."""
        return bool(self.r.eval(_RELEASE, 1, owner(lab), self.id))

    def due(self) -> bool:
        return time.time() - self.last_beat >= self.beat_every

    # --- the labs this host runs (the supervisor's side) -----------------------------------------
    def ownership(self, live: set[str], running: Container[str], known: Mapping[str, dict] | None = None) -> set[str]:
        """The labs this host runs: those whose lease it holds, after placing the unowned ones (`running`: the
        labs it ran until now; `known`: their settings as their last pass read them, so the heartbeat's demand
        reads no others: a settings change brings its lab's pass at once)."""
        due = self.due()  # renew first: placement below reads this host's fresh entry
        owners = self.renew(sorted(live)) if due else self.owners(sorted(live))
        mine = {lab for lab, holder in owners.items() if holder == self.id}
        if due:
            known = known or {}
            demand = sum(int((known.get(lab) or registry.settings(self.r, lab)).get("workers", 0)) for lab in mine)
            self.heartbeat(demand, len(mine))
            self.last_beat = time.time()
        for lab, holder in owners.items():
            if holder is not None or self.leaving:
                continue
            if lab in running and self.claim_back(lab):
                mine.add(lab)  # its lease lapsed while the server was away and nobody took it: keep running it
                continue
            demand = int(registry.settings(self.r, lab).get("workers", 0))
            placed = self.place(lab, demand)
            if placed == self.id:
                mine.add(lab)
            elif placed is None and lab not in self.waiting:
                self.waiting.add(lab)
                stream.emit(self.r, lab, "pool.waiting", clock.now(self.r, lab), workers=demand)
        return mine

    def adopt(self, lab: str, here: Container[str]) -> None:
        """A lab this host now owns: new, moved from a silent host, or handed over by a stopping one (`here`:
        its workers on this host already)."""
        self.waiting.discard(lab)
        prev, handed = self.r.hmget(key(lab, "meta"), "host", "handover_from")
        self.r.hset(key(lab, "meta"), "host", self.id)
        self.r.hdel(key(lab, "meta"), "handover_from")
        now = clock.now(self.r, lab)
        if prev and prev != self.id:
            stream.emit(
                self.r,
                lab,
                "pool.handover" if handed == prev else "pool.host_silent",
                now,
                host=self.id,
                from_host=prev,
            )
        elif not prev:
            stream.emit(self.r, lab, "pool.placed", now, host=self.id)
        self.sweep_departed(lab, here)

    def sweep_departed(self, lab: str, here: Container[str], rows: dict[str, str] | None = None) -> int:
        """Worker rows left by a host that is gone (or by this host's previous life): those workers died
        with it. An ack-early job one of them held is lost, as with any crashed worker; an ack-late one
        comes back when its lease expires. Rows of a live host still draining after a handover stay.
        `rows`: the lab's worker rows as the caller just read them (a supervisor pass reads them with the
        rest). The live hosts and the clock are read only when a row is not one of `here`. Returns the rows of
        other live hosts that stay."""
        rows = self.r.hgetall(key(lab, "workers")) if rows is None else rows
        others = {wid: json.loads(raw) for wid, raw in rows.items() if wid not in here}
        if not others:
            return 0
        foreign = {wid for wid, row in others.items() if row.get("host") not in (None, "", self.id)}
        live = live_hosts(self.r) if foreign else {}
        gone = {wid: row for wid, row in others.items() if not (wid in foreign and row["host"] in live)}
        now = clock.now(self.r, lab) if gone else 0.0
        for wid, row in gone.items():
            h = row.get("host")
            if row.get("job_id") and row.get("attempt"):
                reaper.mark_lost(self.r, lab, row["job_id"], int(row["attempt"]), wid, now)
            self.r.hdel(key(lab, "workers"), wid)
            stream.emit(self.r, lab, "worker.lost", now, worker_id=wid, from_host=h or "?")
        return len(others) - len(gone)

    def take_command(self, raw: str, placed: Container[str]) -> dict | None:
        """A kill or replica command (app/pool.py routes it to the lab's owner) if this host is to carry it out;
        None when it expired, went on to the lab's owner, waits here until the lab is placed (`adopt_soon`), or
        a copy sent to the lab's previous owner was already carried out."""
        cmd = json.loads(raw)
        if float(cmd.get("expires") or "inf") < time.time():
            return None  # its asker gave up long ago
        if cmd.get("lab") not in placed and cmd.get("lab") and registry.exists(self.r, cmd["lab"]):
            holder = self.r.get(owner(cmd["lab"]))
            if holder and holder != self.id:
                self.r.rpush(host_commands(holder), raw)  # the lab moved on: forward it
                return None
            if not self.leaving:
                self.r.rpush(self.commands, raw)  # being placed or adopted here: after the next tick
                self.adopt_soon = True
                return None
        if cmd.get("id") and not self.r.set(f"pool:cmd:{cmd['id']}", self.id, nx=True, ex=60):
            return None  # a copy sent to the lab's previous owner was already carried out
        return cmd

    def report_running(self, n: int) -> None:
        """The processes this host really runs (`n`: live workers and scheduler replicas, not what settings ask
        for), for /metrics: written when the count changes and renewed with the host's heartbeat."""
        if (n, self.last_beat) != self.reported:
            self.reported = (n, self.last_beat)
            self.r.set(host_running(self.id), n, px=self.lease_ms)
