"""Parking: a lab's life follows its readers.

A lab is *watched* while some page holds its WebSocket open (each web process's hub keeps a fresh
entry in `lab:{id}:watchers`, refreshed every WATCH_REFRESH_S, so a web process that crashed stops
counting within WATCH_STALE_S) or while its owner makes API calls (`meta.last_active`). A lab nobody
has watched for PARK_AFTER seconds is *parked*: it joins the set `labs:parked`, its clock pauses (marked
`parked` in the clock hash, so a resume never un-pauses a clock the learner paused), its running-lab slot
goes back to the ledger (core/slots.py) and every pool host stops its processes; its records, events,
outputs and settings stay. Opening its page again (a WebSocket, any owner call) resumes it: the slot is
taken again first, then the clock runs and the supervisor starts its workers (from the spares).

A race's lanes (core/clock.py `lanes`: the labs whose clocks `link` put on one timeline) park and resume as one:
parking any lane parks them all (every lane joins the set, gives its slot back and stops its processes, every
clock carries the mark), resuming any lane takes every lane's slot again in one reservation and resumes them all
in one transaction, and a race is idle only while no lane of it is watched. A lane running on while another is
parked would run its jobs on (or again) while the others wait, and the runs would no longer compare.

`reserve` is the one door every way of opening or resuming a lab goes through: when the client is at its
running-lab cap it first parks that client's own running labs that no page watches now (oldest first), and
when the deployment is at MAX_LABS or a host at its process ceiling, anyone's labs nobody is using (`quiet`:
no page open, no owner call for a while; least recently seen first): a class moving from one chapter to the
next never waits out PARK_AFTER. Only if every candidate is in use is the request refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from core import archive, clock, registry, slots, stream
from core.keys import LABS, PARKED, key

WATCH_REFRESH_S = 5.0  # how often a web process re-stamps the labs its sockets watch
WATCH_STALE_S = 3 * WATCH_REFRESH_S  # a watcher entry older than this belongs to a web process that is gone
NAVIGATION_S = 3.0  # how long a request at the cap waits for the previous page's socket to close
QUIET_S = WATCH_STALE_S  # a lab driven by API calls alone is in use this long after its owner's last call

IDLE_WHY = "nobody watched it for {idle} s"
MAKE_ROOM_WHY = "it made room for another of your labs (you may run {cap} at once)"
FULL_WHY = "the server was full and nobody was using it: it made room for a lab in use"
OWNER_WHY = "you parked it"
OWNER_PARKED = "owner_parked"  # in a lab's meta while the park its owner asked for holds


_PARK = """
local labs, parked, ledger = KEYS[1], KEYS[2], KEYS[3]  -- registered labs, labs:parked, slots:labs
-- ARGV: the lab, then the other lanes of its race. One step, so a resume that takes the slots again never has
-- them released by a park it raced, and no race is ever seen with some lanes parked and others not
if redis.call('SISMEMBER', labs, ARGV[1]) == 0 or redis.call('SISMEMBER', parked, ARGV[1]) == 1 then return 0 end
for _, lab in ipairs(ARGV) do
  if redis.call('SISMEMBER', labs, lab) == 1 then
    redis.call('SADD', parked, lab)
    redis.call('HDEL', ledger, lab)
  end
end
return 1
"""


def watchers(lab: str) -> str:
    return key(lab, "watchers")


def watch(r: redis.Redis, lab: str, who: str) -> None:
    """`who` (one web process) has a socket open on `lab` now. The entry expires on its own, so a socket
    left open on a deleted lab leaves nothing behind for long."""
    with r.pipeline(transaction=True) as pipe:
        pipe.zadd(watchers(lab), {who: time.time()})
        pipe.expire(watchers(lab), int(WATCH_STALE_S * 2))
        pipe.execute()


def unwatch(r: redis.Redis, lab: str, who: str) -> None:
    """`who` closed its last socket on `lab`: the lab was watched until now (a deleted lab gets no
    meta back)."""
    r.zrem(watchers(lab), who)
    if r.sismember(LABS, lab):
        r.hset(key(lab, "meta"), "last_watched", time.time())


def watched_now(r: redis.Redis, labs: list[str]) -> set[str]:
    """The labs among `labs` some live web process has an open socket on."""
    fresh = time.time() - WATCH_STALE_S
    with r.pipeline(transaction=False) as pipe:
        for lab in labs:
            pipe.zcount(watchers(lab), fresh, "+inf")
        return {lab for lab, n in zip(labs, pipe.execute(), strict=True) if n}


@dataclass(frozen=True)
class Look:
    """How a lab was last looked at (real times; 0 for never): `watched` a page has it open now; `page_closed` its
    last page closed; `called` its owner's last call; `seen` the latest of every look (now, while watched)."""

    watched: bool
    page_closed: float
    called: float
    seen: float


def looks(r: redis.Redis, labs: list[str]) -> dict[str, Look]:
    """Each lab's `Look`, in one round trip however many labs."""
    now = time.time()
    with r.pipeline(transaction=False) as pipe:
        for lab in labs:
            pipe.zrange(watchers(lab), -1, -1, withscores=True)  # the newest watcher's stamp
            pipe.hmget(key(lab, "meta"), "last_watched", "last_active", "created", "resumed")
        res = pipe.execute()
    out = {}
    for i, lab in enumerate(labs):
        top, stamps = res[2 * i], res[2 * i + 1]
        page_closed, called, *_ = [float(s or 0) for s in stamps]
        watched = bool(top) and top[0][1] > now - WATCH_STALE_S
        seen = max([float(s or 0) for s in stamps] + ([now if watched else top[0][1]] if top else []))
        out[lab] = Look(watched, page_closed, called, seen)
    return out


def last_seen(r: redis.Redis, labs: list[str]) -> dict[str, float]:
    """Per lab, the last real time a page or its owner looked at it (now, if a socket is open)."""
    return {lab: look.seen for lab, look in looks(r, labs).items()}


def least_recently_seen(r: redis.Redis, labs: list[str]) -> list[str]:
    """`labs`, the one a page or its owner looked at longest ago first (what a full budget gives up first)."""
    seen = last_seen(r, labs)
    return sorted(labs, key=seen.__getitem__)


def parked(r: redis.Redis) -> set[str]:
    return set(r.smembers(PARKED))


def park(r: redis.Redis, lab: str, why: str, by_owner: bool = False) -> bool:
    """Park `lab` and the other lanes of its race (False if it already was, is gone, or was resumed before its
    clock was paused): pause their clocks as parked, give back their slots. The pool host that runs each sees it
    in `labs:parked` and stops its processes. `by_owner`: its owner asked, so a page left open on it does not
    resume it on its own (`resume(..., still_open=True)`); opening a page, or any owner call, does."""
    lanes = clock.lanes(r, lab)
    if by_owner:
        _mark_owner_parked(r, lanes, True)  # before the park: a page's round never sees it parked without it
    did = _park(r, lab, lanes, why)
    if by_owner and not did and not r.sismember(PARKED, lab):
        _mark_owner_parked(r, lanes, False)  # a resume won: it runs on, with no mark left on it
    return did


def _mark_owner_parked(r: redis.Redis, lanes: list[str], on: bool) -> None:
    """The owner's park, marked (or cleared) on every lane of the race: a page open on any lane leaves it be."""
    with r.pipeline(transaction=False) as pipe:
        for lane in lanes:
            if on:
                pipe.hset(key(lane, "meta"), OWNER_PARKED, 1)
            else:
                pipe.hdel(key(lane, "meta"), OWNER_PARKED)
        pipe.execute()


def _park(r: redis.Redis, lab: str, lanes: list[str], why: str) -> bool:
    if not r.eval(_PARK, 3, LABS, PARKED, slots.LEDGER, *lanes):
        return False
    paused = clock.park(r, lanes, PARKED)
    if paused is None:
        return False  # a page or its owner resumed it between the two steps: it runs on, its clocks untouched
    for lane, (t, _running) in paused.items():
        stream.emit(r, lane, "lab.parked", t, why=why if lane == lab else f"with its race: {why}")
    return True


def resume(
    r: redis.Redis,
    lab: str,
    client_cap: int,
    web_ceiling: int,
    patience: float = NAVIGATION_S,
    max_labs: int = 0,
    still_open: bool = False,
) -> bool:
    """Resume a parked lab and the other lanes of its race (False if it was not parked): their slots are taken
    again first, in one reservation (slots.Refused if the lab's client is at its cap with every other lab watched
    `patience` s on), then they leave the parked set and their clocks run, in one step (clock.unpark).
    `still_open`: the call is a web process's round over the pages it keeps open, which leaves a lab its owner
    parked as it is (else "Park my oldest lab" would be undone by that lab's own page in another tab)."""
    if not r.sismember(PARKED, lab) or (still_open and r.hexists(key(lab, "meta"), OWNER_PARKED)):
        return False
    lanes = [lane for lane in clock.lanes(r, lab) if lane == lab or r.sismember(LABS, lane)]
    client = r.hget(key(lab, "meta"), "client") or "unknown"
    for lane in lanes:
        archive.restore(r, lane)  # an archived lab's history is unfolded before anything reads it
    reserve(
        r,
        [(lane, registry.processes_of(registry.settings(r, lane))) for lane in lanes],
        client,
        client_cap,
        web_ceiling,
        patience,
        max_labs,
    )
    unparked = clock.unpark(r, lanes, PARKED)  # out of the set and the clocks running again: one step
    if unparked is None:
        return False  # another request resumed it meanwhile (its reservation is this one)
    _mark_owner_parked(r, lanes, False)
    for lane, (t, runs) in unparked.items():
        archive.restore(r, lane)  # folded between the first unfolding and the unpark (a fold needs it parked)
        r.hset(key(lane, "meta"), "resumed", time.time())
        stream.emit(r, lane, "lab.resumed", t, clock="running" if runs else "still paused, as it was")
    return True


def park_idle(r: redis.Redis, park_after: float) -> list[str]:
    """The supervisor's hook: park every running lab nobody has watched for `park_after` s (0: never); a race
    only when none of its lanes was watched. The labs it parked (a race by the lane that parked it)."""
    if park_after <= 0:
        return []
    running = sorted(set(r.smembers(LABS)) - parked(r))
    if not running:
        return []
    now = time.time()
    seen = last_seen(r, running)
    idle = {lab: now - at for lab, at in seen.items() if now - at > park_after}
    return [
        lab
        for lab, gone in idle.items()
        if all(lane in idle or lane not in seen for lane in clock.lanes(r, lab))
        and park(r, lab, IDLE_WHY.format(idle=round(gone)))
    ]


def reserve(
    r: redis.Redis,
    want: list[tuple[str, int]],
    client: str,
    client_cap: int,
    web_ceiling: int,
    patience: float = NAVIGATION_S,
    max_labs: int = 0,
    live_cap: int = 0,
) -> None:
    """slots.reserve, but no reader is stopped by labs nobody is looking at: at the client's cap, park the
    client's running labs that no page watches (oldest first); at the deployment's running-lab cap or a host's
    process ceiling, park anyone's labs nobody is using (`quiet`, least recently seen first), and try again. A page
    that just replaced another may still find the old one's socket open for a moment, so before refusing it
    waits up to `patience` s for one of them to close. Raises slots.Refused."""
    deadline = time.time() + patience
    asking = {lab for lab, _n in want}
    while True:
        try:
            return slots.reserve(r, want, client, client_cap, web_ceiling, max_labs, live_cap)
        except slots.Refused as refused:
            if refused.kind == "client":
                mine = [e.lab for e in running_of(r, client) if e.lab not in asking]
                need = max(1, refused.running + len(want) - client_cap)
                lanes = {lab: clock.lanes(r, lab) for lab in mine}  # a race parks as one: quiet if no lane is watched
                watched = watched_now(r, sorted({lane for group in lanes.values() for lane in group}))
                quiet_labs = [lab for lab in mine if watched.isdisjoint(lanes[lab])]
                why = MAKE_ROOM_WHY.format(cap=client_cap)
            elif refused.kind in ("labs", "workers"):
                # one at a time for a process ceiling: the ledger does not say whose host is short
                need = max(1, refused.running + len(want) - max_labs) if refused.kind == "labs" else 1
                quiet_labs = quiet(r, [e.lab for e in slots.entries(r) if e.lab not in asking])
                why = FULL_WHY
            else:
                raise
            parked_now = sum(park(r, lab, why) for lab in quiet_labs[:need])
            if parked_now == 0 and time.time() >= deadline:
                raise
            if parked_now == 0:
                time.sleep(0.2)


def quiet(r: redis.Redis, labs: list[str]) -> list[str]:
    """The labs among `labs` nobody is using (a race: none of its lanes), least recently seen first: those a full
    server parks to let another lab run. In use: a page has it open now, or its owner called it within QUIET_S
    and not from a page since closed (a script driving it through the API alone)."""
    lanes = {lab: clock.lanes(r, lab) for lab in labs}
    seen = looks(r, sorted({lane for group in lanes.values() for lane in group} | set(labs)))
    cutoff = time.time() - QUIET_S

    def idle(lane: str) -> bool:
        look = seen[lane]
        return not look.watched and (look.page_closed >= look.called or look.called < cutoff)

    last = {lab: max(seen[lane].seen for lane in {lab, *lanes[lab]}) for lab in labs}
    return sorted((lab for lab in labs if all(idle(lane) for lane in {lab, *lanes[lab]})), key=last.__getitem__)


def running_of(r: redis.Redis, client: str) -> list[slots.Entry]:
    """The client's running labs, oldest first (what a refusal at the cap lists)."""
    return [e for e in slots.entries(r) if e.client == client]
