"""The lab's compressed clock: simulated seconds advance at `speed` per real second.

Stored in Redis (a base point plus a rate) so the web, the supervisor and every worker process
read the same simulated time without talking to each other. Pausing freezes leases, retries and
job progress alike, because they are all measured on this clock.

The clock is honest about real work: a worker whose real work (ffmpeg, a storage call) is due at a
simulated moment puts a *barrier* there, and simulated time cannot pass a barrier until its holder
lifts it. On a fast, idle machine the barrier is lifted before the clock reaches it and nothing
changes; when the real work cannot keep up (ffmpeg at a high speed, a host busy with other labs) the
clock waits for it, so a 600 s job still takes 600 simulated seconds and every lease deadline keeps
its place relative to it. The supervisor measures the speed that results and says so (`slowed`).
A holder refreshes its barrier's real-time expiry while it lives; the supervisor lifts the barriers
of holders that died (a killed worker), so the clock never waits for a process that is gone.
"""

from __future__ import annotations

import json
import time

import redis
from redis.commands.core import Script

from core.keys import key

BARRIER_TTL = 5.0  # real seconds a barrier outlives its holder's last refresh (a probe may take a few)
SLOWED_BELOW = 0.9  # a clock achieving less than this share of its asked speed says it slowed


def _now(state: dict, real: float | None = None) -> float:
    base_sim = float(state.get("base_sim", 0))
    if state.get("paused") == "1":
        return base_sim
    real = time.time() if real is None else real
    t = base_sim + (real - float(state.get("base_real", real))) * float(state.get("speed", 20))
    barrier = state.get("barrier")
    return min(t, float(barrier)) if barrier not in (None, "") else t


def reached_at(state: dict, t: float) -> float | None:
    """The real time (time.time()) at which this clock reached simulated moment `t` since its last
    rebase (a barrier at `t` holds it there, so that is when it arrived); None if it had already
    passed `t` before the rebase, or is paused short of it."""
    base_sim = float(state.get("base_sim", 0))
    if t < base_sim or (state.get("paused") == "1" and t > base_sim):
        return None
    return float(state.get("base_real", 0)) + (t - base_sim) / max(float(state.get("speed", 20)), 1e-9)


def read(r: redis.Redis, lab: str) -> dict:
    """Clock state plus the current simulated time `t`; `asked` is the learner's speed and
    `effective` what the lab is really achieving (lower when real work holds the clock back)."""
    return reading(r.hgetall(key(lab, "clock")), time.time())


def read_many(r: redis.Redis, labs: list[str]) -> list[dict]:
    """`read` of several labs at one real instant (one round trip), so a race's lanes are compared at the
    same moment rather than a round trip apart."""
    with r.pipeline(transaction=False) as pipe:
        for lab in labs:
            pipe.hgetall(key(lab, "clock"))
        states = pipe.execute()
    real = time.time()
    return [reading(state, real) for state in states]


def reading(state: dict, real: float) -> dict:
    """`read` of a clock hash already in hand (as stored), at real time `real`: one that has not changed since
    it was read gives the same reading as a fresh read."""
    speed = float(state.get("speed", 20))
    t = _now(state, real)
    barrier = state.get("barrier")
    return {
        "t": round(t, 3),
        "t_raw": t,
        "speed": speed,
        "paused": state.get("paused") == "1",
        "asked": speed,
        "effective": float(state.get("effective", speed)),
        "slowed": state.get("slowed") == "1",
        "slowed_reason": state.get("slowed_reason", ""),
        "waiting_on_real_work": barrier not in (None, "") and t >= float(barrier),
    }


def lapse(state: dict, at: float, margin: float) -> float:
    """Real seconds a barrier at `at` lives without a refresh: until `margin` real seconds after this clock (a
    `read`) would reach it at its speed. A paused clock reaches nothing: `margin`, renewed by the holder."""
    if state["paused"]:
        return margin
    return max(0.0, at - state["t_raw"]) / max(state["speed"], 1e-9) + margin


def now(r: redis.Redis, lab: str) -> float:
    return _now(r.hgetall(key(lab, "clock")))


def start(r: redis.Redis, lab: str, speed: float, t0: float = 0.0, holder: str = "", ttl: float = BARRIER_TTL) -> None:
    """Start at t0 (0, or the parent's moment for a branch, so two runs share one time axis). `holder`: a barrier
    stands at t0 from the first instant (as `hold` with `ttl` would place it, but never behind a clock that has
    already moved on, however long the call took)."""
    real = time.time()
    state: dict[str, float] = {"base_sim": t0, "base_real": real, "speed": speed, "paused": 0}
    with r.pipeline(transaction=True) as pipe:
        pipe.hset(key(lab, "clock"), mapping={**state, "barrier": t0} if holder else state)
        if holder:
            pipe.zadd(_barriers(lab), {holder: t0})
            pipe.hset(_alive(lab), holder, real + ttl)
        pipe.execute()


def _watched(r: redis.Redis, keys: list[str], step):
    """`step(pipe)` as one optimistic transaction: it reads (commands run at once while the keys are watched),
    then queues its writes after `pipe.multi()`, or returns without any; run again from the start whenever a
    watched key changed before its writes went. What `step` returns."""
    with r.pipeline() as pipe:
        while True:
            try:
                pipe.watch(*keys)
                out = step(pipe)
                if pipe.explicit_transaction:
                    pipe.execute()
                return out
            except redis.WatchError:
                continue


def lanes(r: redis.Redis, lab: str) -> list[str]:
    """`lab` first, then the other lanes of its race (`link`): the labs that pause, park and resume as one. A lab
    in no race is its own only lane."""
    peers = r.hget(key(lab, "clock"), "peers")
    return [lab, *(json.loads(peers) if peers else [])]


def _together(states: dict[str, dict], real: float) -> float:
    """The moment a race's lanes (their clock hashes, `{}` for one deleted) are all set to when one write moves them:
    the furthest lane's at real time `real`, so a write never takes a clock back and lanes that two earlier
    writes (or the rounding of one) left a hair apart are one timeline again."""
    return max([_now(state, real) for state in states.values() if state] or [0.0])


def _each_lane(r: redis.Redis, lab: str, **changes) -> float:
    """Move the base point of the lab's clock and of every other lane of its race to now, then apply changes, in
    one transaction at one real instant (one timeline: pausing, stepping or re-speeding one lane does the same to
    all, and no lane is paused or started a moment after another); returns the new time."""
    ks = {lane: key(lane, "clock") for lane in lanes(r, lab)}
    rest = {n: v for n, v in changes.items() if n != "advance"}

    def step(pipe) -> float:
        states = {lane: pipe.hgetall(k) for lane, k in ks.items()}
        real = time.time()
        t = _together(states, real) + float(changes.get("advance", 0))
        pipe.multi()
        for lane, k in ks.items():
            if lane == lab or states[lane]:  # a lane already deleted keeps no clock (nothing outlives its lab)
                pipe.hset(k, mapping={"base_sim": t, "base_real": real, **rest})
        return t

    return _watched(r, list(ks.values()), step)


def pause(r: redis.Redis, lab: str) -> float:
    return _each_lane(r, lab, paused=1)


def park(r: redis.Redis, labs: list[str], parked_set: str) -> dict[str, tuple[float, bool]] | None:
    """The clock's part of parking a lab and the other lanes of its race (`labs`, as `lanes` gives them), only
    while the first is still in `parked_set` (a resume that took them out meanwhile wins: None, no clock touched).
    Each running clock pauses marked `parked` "1"; one already paused (the learner's, or a race's held at t = 0)
    is marked "held", so the resume leaves it paused. Per lane still alive: the moment, and whether the park
    paused it. Checked and written for every lane in one transaction."""
    ks = [key(lab, "clock") for lab in labs]

    def step(pipe) -> dict[str, tuple[float, bool]] | None:
        if not pipe.sismember(parked_set, labs[0]):
            return None
        states = {lab: pipe.hgetall(k) for lab, k in zip(labs, ks, strict=True)}
        real = time.time()
        t = _together(states, real)
        pipe.multi()
        out = {}
        for lab, k in zip(labs, ks, strict=True):
            state = states[lab]
            if not state:
                continue  # a lane already deleted keeps no clock
            running = state.get("paused") != "1"
            paused = {"base_sim": t, "base_real": real, "paused": 1, "parked": "1"}
            pipe.hset(k, mapping=paused if running else {"parked": "held"})
            out[lab] = (t, running)
        return out

    return _watched(r, [*ks, parked_set], step)


def unpark(r: redis.Redis, labs: list[str], parked_set: str) -> dict[str, tuple[float, bool]] | None:
    """The clock's part of resuming a parked lab and the other lanes of its race (`labs`, as `lanes` gives them),
    and the resume itself: while the first is still in `parked_set` every lane leaves the set, its `parked` mark
    goes, and a clock the park paused runs again, all in one transaction; one the learner had paused stays
    paused. Per lane still alive: the moment, and whether it runs; None if it was not parked (another resume
    won). In one step with the membership, a park racing it either finds the lanes still parked (and parks
    nothing) or finds them running with no mark, and pauses them afresh: never a clock paused by a park whose
    mark a resume already took, and never a race half parked."""
    ks = [key(lab, "clock") for lab in labs]

    def step(pipe) -> dict[str, tuple[float, bool]] | None:
        if not pipe.sismember(parked_set, labs[0]):
            return None
        states = {lab: pipe.hgetall(k) for lab, k in zip(labs, ks, strict=True)}
        real = time.time()
        t = _together(states, real)
        pipe.multi()
        pipe.srem(parked_set, *labs)
        out = {}
        for lab, k in zip(labs, ks, strict=True):
            state = states[lab]
            if not state:
                continue
            pipe.hdel(k, "parked")
            if state.get("parked") == "1":
                pipe.hset(k, mapping={"base_sim": t, "base_real": real, "paused": 0})
            # (no mark: the resume came before the park's clock step, and the clock is as it was)
            out[lab] = (t, state.get("parked") == "1" or state.get("paused") != "1")
        return out

    return _watched(r, [*ks, parked_set], step)


def resume(r: redis.Redis, lab: str) -> float:
    return _each_lane(r, lab, paused=0)


def step(r: redis.Redis, lab: str, seconds: float) -> float:
    """Advance a paused clock by `seconds` of simulated time (single-step)."""
    return _each_lane(r, lab, advance=seconds, paused=1)


def set_speed(r: redis.Redis, lab: str, speed: float) -> float:
    return _each_lane(r, lab, speed=speed)


def link(r: redis.Redis, labs: list[str]) -> None:
    """Put a race's lanes on one timeline: a barrier in any lane holds every lane's clock (the slowest
    sets the pace, so their readouts always compare the same simulated instant), and a pause, step or
    speed change of one lane is made in all."""
    for lab in labs:
        others = [o for o in labs if o != lab]
        r.hset(
            key(lab, "clock"),
            mapping={
                "peers": json.dumps(others),
                "peer_keys": json.dumps([[key(o, "clock"), _barriers(o)] for o in others]),
            },
        )


# --- barriers: the clock waits for real work ------------------------------------------------


def state_channel(lab: str) -> str:
    """The pub/sub channel on which a barrier's move publishes the clock hash as it left it (JSON): the hash's
    own name. Other writers of the clock only notify (keyspace notifications): a reader re-reads after those."""
    return key(lab, "clock")


def _barriers(lab: str) -> str:
    return key(lab, "barriers")  # zset holder → simulated time the clock may not pass


def _alive(lab: str) -> str:
    return key(lab, "barrier_alive")  # hash holder → real time the barrier lapses unless refreshed


# The barrier change as a Lua function, so a script that must move a barrier in the same round trip as its
# own work (a heartbeat: core/broker/leases.py) calls it too:
#   barrier(ck, bk, ak, op, holder, at, real_s, alive_until, refresh, also)
# ck the clock hash, bk the barriers zset (holder → sim time), ak the alive hash (holder → real expiry);
# op 'hold' | 'lift' | 'sweep'; at the barrier's sim time (hold); real_s the real now (a string: the clock's
# new base_real, stored as is); alive_until the holder's real expiry and refresh '1' to stamp it (hold). With
# '0' the stamp of the holder's last refresh stays: a holder that moves its barrier several times a second
# need not restamp it each time. A new holder is always stamped. `also` (or ''): another holder whose barrier is
# lifted in the same step (an attempt's start takes its own barrier as its hand-off's goes; its end hands the
# clock to the next delivery's), so the clock is rebased once, not twice.
# A move of the lowest barrier is the clock's most frequent change (a busy lab's every heartbeat can make one), so
# the script also publishes the clock hash as it leaves it on the channel named as the hash (`state_channel`): a
# paced attempt watching the clock (workers/tasks.py Watch) takes it from there instead of reading it again.
# Applies the change and, only if that moves the lowest barrier, moves the base point to now (clamped at the
# current barrier, so a lifted barrier resumes simulated time from exactly where it waited) and points the
# clock at the lowest barrier left. A change that leaves the lowest barrier where it was (another holder is
# lower, or a holder moves above it) leaves the clock hash untouched: its time is the same function of real
# time either way, and nobody watching the clock (the supervisor's keyspace notifications) is woken for it.
# 'sweep' lifts every barrier whose holder stopped refreshing it — in one step, so a barrier being added
# at that moment is never mistaken for a dead one.
# A race's lanes (`peer_keys`, written once by `link`) share one timeline: every lane's clock is rebased
# with this one and waits at the lowest barrier of any lane. Their keys are read from the clock hash, not
# passed in KEYS: the server is a single node, and the lanes are fixed when the race opens.
BARRIER_FN = """
local function clock_state(k)
  local c = redis.call('HGETALL', k)
  local st = {}
  for i = 1, #c, 2 do st[c[i]] = c[i + 1] end
  return st
end
local function clock_now(st, real)
  local t = tonumber(st['base_sim'] or '0')
  if st['paused'] ~= '1' then
    t = t + (real - tonumber(st['base_real'] or real)) * tonumber(st['speed'] or '20')
    if st['barrier'] and st['barrier'] ~= '' and tonumber(st['barrier']) < t then t = tonumber(st['barrier']) end
  end
  return t
end
local function barrier(ck, bk, ak, op, holder, at, real_s, alive_until, refresh, also)
  local real = tonumber(real_s)
  local own = clock_state(ck)
  if next(own) == nil then return 0 end  -- a deleted lab: no barrier brings its keys back
  local lanes = {{ck, bk, own}}
  if own['peer_keys'] then
    for _, p in ipairs(cjson.decode(own['peer_keys'])) do
      local st = clock_state(p[1])
      if next(st) ~= nil then table.insert(lanes, {p[1], p[2], st}) end
    end
  end
  local ahead = -math.huge
  for _, l in ipairs(lanes) do
    l[4] = clock_now(l[3], real)
    if l[4] > ahead then ahead = l[4] end
  end
  local own_now = lanes[1][4]  -- this lab's clock at real_s: the change moves its barrier, not its present
  if op == 'sweep' then
    local dead = 0
    for _, h in ipairs(redis.call('ZRANGE', bk, 0, -1)) do
      local u = redis.call('HGET', ak, h)
      if not u or tonumber(u) < real then
        redis.call('ZREM', bk, h)
        redis.call('HDEL', ak, h)
        dead = dead + 1
      end
    end
    if dead == 0 then return 0 end
  elseif op == 'hold' then
    if tonumber(at) < ahead then at = string.format('%.17g', ahead) end  -- a barrier never takes a clock back
    if redis.call('ZADD', bk, at, holder) == 1 or refresh == '1' then redis.call('HSET', ak, holder, alive_until) end
  elseif op == 'lift' then
    redis.call('ZREM', bk, holder)
    redis.call('HDEL', ak, holder)
  end
  if also and string.sub(also, 1, 1) == '?' then  -- '?holder': that barrier, or else the first of its kind
    also = string.sub(also, 2)
    if redis.call('ZREM', bk, also) == 1 then
      redis.call('HDEL', ak, also)
    else
      local kind = string.match(also, '^[^:]*:') or also
      for _, h in ipairs(redis.call('ZRANGE', bk, 0, -1)) do
        if string.sub(h, 1, #kind) == kind then
          redis.call('ZREM', bk, h)
          redis.call('HDEL', ak, h)
          break
        end
      end
    end
  elseif also and also ~= '' then
    redis.call('ZREM', bk, also)
    redis.call('HDEL', ak, also)
  end
  local low = nil
  for _, l in ipairs(lanes) do
    local b = redis.call('ZRANGE', l[2], 0, 0, 'WITHSCORES')
    if #b > 0 and (low == nil or tonumber(b[2]) < low) then low = tonumber(b[2]) end
  end
  for _, l in ipairs(lanes) do
    local was = tonumber(l[3]['barrier'] or '')
    if was ~= low then
      local st = l[3]
      st['base_sim'], st['base_real'] = string.format('%.17g', l[4]), real_s
      if low then
        st['barrier'] = string.format('%.17g', low)
        redis.call('HSET', l[1], 'base_sim', st['base_sim'], 'base_real', real_s, 'barrier', st['barrier'])
      else
        st['barrier'] = nil
        redis.call('HSET', l[1], 'base_sim', st['base_sim'], 'base_real', real_s)
        redis.call('HDEL', l[1], 'barrier')
      end
      redis.call('PUBLISH', l[1], cjson.encode(st))  -- the hash as it now is (state_channel)
    end
  end
  return 1, own_now
end
"""
# The arguments as `barrier` above takes them (`also`: '?holder' lifts that one if it holds, else the lowest of its
# kind, the holders named with the same prefix up to the first ':').
_BARRIER_LUA = (
    BARRIER_FN
    + """
local clock_key, barriers, barrier_alive = KEYS[1], KEYS[2], KEYS[3]
local op, holder, at, real_now, alive_until, refresh = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local also = ARGV[7]
return barrier(clock_key, barriers, barrier_alive, op, holder, at, real_now, alive_until, refresh, also)
"""
)
_scripts: dict[int, Script] = {}


def barrier_keys(lab: str) -> list[str]:
    """The KEYS of a barrier change: the lab's clock hash, its barriers and their stamps (as `barrier` takes them,
    for a script that decides the change itself)."""
    return [key(lab, "clock"), _barriers(lab), _alive(lab)]


def barrier_call(
    lab: str, op: str, holder: str, at: float = 0.0, ttl: float = BARRIER_TTL, refresh: bool = True, also_lift: str = ""
) -> tuple[list[str], list[str]]:
    """The KEYS and ARGV of one barrier change (as `_BARRIER_LUA` takes them, and as a script embedding
    BARRIER_FN passes them on); `also_lift`: another holder's barrier lifted in the same step (or `either`'s
    choice of one)."""
    real = time.time()
    return (
        barrier_keys(lab),
        [op, holder, repr(at), repr(real), repr(real + ttl), "1" if refresh else "0", also_lift],
    )


def apply(r: redis.Redis, call: tuple[list[str], list[str]]) -> int:
    """Make one barrier change (`barrier_call`); 0 if it changed nothing a sweep could, or the lab is gone."""
    if id(r) not in _scripts:
        _scripts[id(r)] = r.register_script(_BARRIER_LUA)
    keys, args = call
    return int(_scripts[id(r)](keys=keys, args=args))


def hold(
    r: redis.Redis,
    lab: str,
    holder: str,
    at: float,
    ttl: float = BARRIER_TTL,
    refresh: bool = True,
    also_lift: str = "",
) -> None:
    """Simulated time may not pass `at` until `holder` lifts (or moves) this barrier, or stops
    refreshing it for `ttl` real seconds (`refresh=False`: a holder that moves its barrier often keeps the
    stamp of its last refresh, which it renews itself at least every `ttl` / 2). `also_lift`: another
    holder's barrier goes in the same step (one rebase of the clock, one round trip)."""
    apply(r, barrier_call(lab, "hold", holder, at, ttl, refresh, also_lift))


def refresh(r: redis.Redis, lab: str, holder: str, ttl: float = BARRIER_TTL) -> bool:
    """The holder is alive: keep its barrier (called every REFRESH_S while it paces). False if the barrier was
    gone (its stamp was new: a sweep lifted it while its holder stalled), so the holder places it again."""
    return r.hset(_alive(lab), holder, time.time() + ttl) == 0


def either(holder: str) -> str:
    """As `also_lift`: this holder's barrier, or if it holds none the lowest of its kind (the holders whose names
    share its prefix up to the first ':'), found in the same step rather than by reading the barriers first."""
    return f"?{holder}"


def lift(r: redis.Redis, lab: str, holder: str) -> None:
    apply(r, barrier_call(lab, "lift", holder))


def holders(r: redis.Redis, lab: str) -> list[str]:
    """Who holds a barrier on this lab's clock now."""
    return r.zrange(_barriers(lab), 0, -1)


def held_at(r: redis.Redis, lab: str, holders: list[str]) -> list[float]:
    """The moments these holders' barriers stand at now (a holder holding none is left out)."""
    return [float(at) for at in r.zmscore(_barriers(lab), holders) if at is not None] if holders else []


def lowest_barrier(r: redis.Redis, lab: str, besides: str) -> float:
    """The lowest barrier held by anyone but `besides` (math.inf if none)."""
    for holder, at in r.zrange(_barriers(lab), 0, 1, withscores=True):
        if holder != besides:
            return at
    return float("inf")


def lift_dead(r: redis.Redis, lab: str) -> int:
    """Lift barriers whose holders stopped refreshing them (the supervisor calls this each tick).

    The script runs only when a holder's real-time expiry has passed (one read of the expiries, instead of
    the sweep's reads of the clock and of every holder): a live lab's barriers are almost always fresh."""
    if not any(float(u) < time.time() for u in r.hvals(_alive(lab))):
        return 0
    return apply(r, barrier_call(lab, "sweep", ""))
