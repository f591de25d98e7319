"""The supervisor's wait: how it sleeps, and when each lab is next due.

A lab is passed when something that concerns it changes (`Waker`), at its deadline (`refresh_deadlines`)
and otherwise only as often as what it runs needs time (`next_pass`); `note` turns what the Waker heard
into labs that are due.
"""

from __future__ import annotations

import json
import math
import select
import signal
import socket
import time
from collections.abc import Container, Iterable

import redis

from core import clock
from core.broker.handoff import HANDOFF_S
from core.config import (
    HOUSEKEEP_S,
    INFLIGHT_S,
    LOOP_S,
    MAINTAIN_S,
    NOTIFY_KEYSPACE_EVENTS,
    REAPER_LEAD_S,
    TIED_LOOK_S,
)
from core.keys import LABS, PARKED, key, keyspace
from workers.duties import DISPATCH_AGE_S, Seen
from workers.engines import ENGINES
from workers.pool import LabPool

DEADLINE_KEYS = ("leases", "scheduled", "clock")  # a change moves the lab's next deadline
# a change wakes a lab at rest: new settings, a job, a delivery, a fault, an engine's own keys (Engine.wakes)
WAKING_KEYS = ("settings", "states", "dispatch", "faults", *(w for e in ENGINES for w in e.wakes))
# The keyspace event of a lease pushed later (a ZINCRBY). The lab's known lease head can then only be early,
# never late, so it is not read again: an early head wakes the lab at most once too soon, and its pass reads all.
PUSHED_LATER = "zincr"
FOLLOW_WAIT_S = 5.0  # real seconds a follow waits for the server to confirm its new subscriptions


class Waker:
    """How the supervisor sleeps: until the next deadline of a lab, or until a change that concerns
    it, never on a fixed poll.

    Changes arrive as Redis keyspace notifications (`notify-keyspace-events`, switched on here) of this
    host's own labs' keys (`follow`), so the code that claims, extends or ends a lease needs no extra call: a
    ZADD to `lab:<id>:leases`, a new retry in `lab:<id>:scheduled`, a clock or settings change, a new job, a
    new, parked or resumed lab, or a command pushed to this pool host's command list wakes the loop at once. A
    child process that exits (a worker that crashed, a spare) wakes it too: SIGCHLD writes to a socket the same
    `select` watches. The timeout is computed from the deadline in real time and enforced by that `select` (a
    server-side BLPOP timeout rounds up to the server's 100 ms cron on an idle server). A server that
    refuses CONFIG SET falls back to a 20 ms poll.

    A barrier's move, the clock's most frequent change, also publishes the clock hash as it left it
    (clock.state_channel), after its keyspace notification: `published` keeps, per clock key, that hash when it
    is the last word heard of the key in this wait, so the lab's deadline is refreshed without reading it again.
    """

    def __init__(self, r: redis.Redis, commands: str):
        self.r = r
        self.ps = None
        self.following: set[str] = set()  # the labs whose keys it hears (follow)
        self.early: list[dict] = []  # messages read while a follow waited, heard at the next wait
        self.child = False  # a child process exited since the last wait
        self.published: dict[str, dict] = {}  # clock key → the hash a barrier's move left, heard last in this wait
        self.sig_r, sig_w = socket.socketpair()
        for s in (self.sig_r, sig_w):
            s.setblocking(False)
        self.sig_w = sig_w
        try:
            signal.signal(signal.SIGCHLD, lambda *a: None)  # a Python handler, so the wakeup fd is written
            signal.set_wakeup_fd(sig_w.fileno(), warn_on_full_buffer=False)
        except ValueError:
            pass  # not the main thread (a test driving the loop): child exits are seen at the next pass
        try:
            flags = r.config_get("notify-keyspace-events").get("notify-keyspace-events", "")
            want = set(flags) | set(NOTIFY_KEYSPACE_EVENTS)
            if want - set(flags):  # the embedded server starts with them: only another server is asked
                r.config_set("notify-keyspace-events", "".join(sorted(want)))
            ps = r.pubsub(ignore_subscribe_messages=True)
            ps.subscribe(*(keyspace(r, k) for k in (commands, LABS, PARKED)))
            self.ps = ps
        except redis.ResponseError:
            self.ps = None

    def wait(self, timeout: float, also: int | None = None) -> set[str]:
        """Sleep up to `timeout` s, or until `also` (the zygote's exit pipe, workers/zygote.py) is readable; the
        keys that changed meanwhile (empty: the timeout passed)."""
        if self.ps is None:
            time.sleep(min(timeout, LOOP_S))
            return set()
        conn = self.ps.connection
        if not self.early and not conn.can_read(timeout=0):
            select.select([conn._sock, self.sig_r, *([also] if also is not None else [])], [], [], max(0.0, timeout))
        try:
            while self.sig_r.recv(512):
                self.child = True
        except (BlockingIOError, InterruptedError):
            pass
        changed: set[str] = set()
        self.published = {}
        for msg in self.early:  # heard while a follow waited for its subscriptions
            self.hear(msg, changed)
        self.early.clear()
        while conn.can_read(timeout=0):
            self.hear(self.ps.get_message(timeout=0), changed)
        return changed

    def hear(self, msg: dict | None, changed: set[str]) -> None:
        """One message into `changed`: a key whose change was notified, or a clock's state channel (its hash kept
        in `published`)."""
        if not msg or msg.get("type") != "message":
            return
        channel = msg["channel"]
        if not channel.startswith("__keyspace@"):
            changed.add(channel)  # a clock's state channel (clock.state_channel)
            self.published[channel] = json.loads(msg["data"])
            return
        k = channel.split(":", 1)[1]
        if msg["data"] == PUSHED_LATER and k.endswith(":leases"):
            return  # a heartbeat pushed a lease later: no deadline came earlier (leases.extend_lease)
        changed.add(k)
        self.published.pop(k, None)  # written again since: read

    def follow(self, labs: Iterable[str]) -> None:
        """Hear exactly these labs' keys from now on: subscribe to the labs new to it, unsubscribe from those gone.

        Each host subscribes to its own labs' channels by name, never to a pattern: the server matches every
        keyspace notification against every pattern of every client and sends a match to each, so patterns over
        all labs would cost each write a match per host and each host a message per lab of the whole server.
        Called before the passes of each loop, and it returns once the server has made the new subscriptions (a
        PING behind them on the same connection has come back; what arrived meanwhile waits in `early`): a lab
        taken in this loop is heard before its first pass reads it, so no change falls between the two."""
        labs = set(labs)
        new, gone = labs - self.following, self.following - labs
        self.following = labs
        if self.ps is None:
            return
        if gone:
            self.ps.unsubscribe(*(c for lab in sorted(gone) for c in self.channels(lab)))
        if not new:
            return
        self.ps.subscribe(*(c for lab in sorted(new) for c in self.channels(lab)))
        self.ps.ping()
        deadline = time.monotonic() + FOLLOW_WAIT_S
        while (left := deadline - time.monotonic()) > 0:
            msg = self.ps.get_message(timeout=left)
            if msg and msg.get("type") == "pong":
                return
            if msg:
                self.early.append(msg)

    def channels(self, lab: str) -> list[str]:
        """A lab's channels: its deadline and waking keys' notifications, and its clock's state channel."""
        return [*(keyspace(self.r, key(lab, k)) for k in DEADLINE_KEYS + WAKING_KEYS), clock.state_channel(lab)]

    def close(self) -> None:
        if self.ps is not None:
            self.ps.close()
        self.sig_r.close()
        self.sig_w.close()


def next_pass(pool: LabPool, settings: dict, seen: Seen, holding: bool, replicas: Container[str]) -> float:
    """Real seconds until the lab's next pass: how a lab becomes due, on what the pass read (`seen`).

    A lab is passed when something that concerns it changes (Waker: its settings, a job, a delivery,
    the load generator, a fault, chapter 6 traffic, a command, a child process exiting), at its
    deadline (a lease runs out, a retry is due, a worker respawns or finishes booting, the clock has waited
    at a barrier for MAINTAIN_S: `refresh_deadlines`), and otherwise only as often as what it runs needs time:
    HOUSEKEEP_S while an engine works on time (the load generator, chapter 6 traffic, the autoscaler,
    chapter 7's replicas, a fault to end, a worker draining or rewiring, the stale-job sweeper with
    a job running, a branch waiting for its workers). While work is in flight: when a barrier's holder lapses,
    within MAINTAIN_S after a delivery has waited in `dispatch` DISPATCH_AGE_S or a hand-off is HANDOFF_S old (so
    a pass that comes anyway does them), every MAINTAIN_S while another host's workers still run here, and at
    most INFLIGHT_S apart; never (math.inf) when nothing is in flight. The pacing readout needs no pass: its
    samples are taken from the clock hash in hand (`pool.sample_at`, Duties.sample)."""
    lab = pool.lab
    state, states = seen.state, seen.states
    running = int(states[2] or 0)
    # engines with nothing to do skip their tick until their keys change (note): one with keys that wake it
    # (Engine.wakes) while it is not busy, e.g. the load generator while it is off, chapter 6 traffic while none
    # arrives, waits or runs (a full tick at rate 0 has dropped its last generation time, so traffic that starts
    # again starts from its own moment). A quiet engine's gauges are not read (Duties.look): it stays quiet here.
    busy = pool.busy = {e.name for e in ENGINES if e.busy(settings, seen.gauges.get(e.name, []))}
    pool.quiet = {e.name for e in ENGINES if e.wakes and e.name not in busy}
    slots = {s.state for s in pool.slots.values()}
    in_flight = any(int(n or 0) for n in states) or pool.heads["dispatch"] or seen.alive or pool.reaper_at is not None
    real = time.time()
    pool.sample_at = real + MAINTAIN_S if in_flight or state["slowed"] else math.inf
    if (
        busy
        or lab in replicas
        or pool.fault_active
        or holding
        or slots & {"draining", "rewiring"}
        or (running and settings.get("guard") == "claim" and settings.get("stale_after"))
    ):
        return HOUSEKEEP_S
    if not in_flight:
        return math.inf
    if seen.foreign:
        return MAINTAIN_S
    due = [float(u) + 0.01 for u in seen.alive.values()]  # a holder lapses: its barrier is swept (Duties.lift_dead)
    due += [t + DISPATCH_AGE_S + MAINTAIN_S for _m, t in pool.heads["dispatch"]]
    due += [t + HANDOFF_S + MAINTAIN_S for _m, t in pool.heads["handoffs"]]
    return max(0.0, min(min(due, default=math.inf) - real, INFLIGHT_S))


def engine_moments(r: redis.Redis, pool: LabPool) -> None:
    """Where the lab's working engines hold its clock for their next work (`Engine.holder`), read after the pass
    ticked them: the lab is due when its clock gets there (`refresh_deadlines`). Without it each of the load
    generator's arrivals waited a housekeeping cadence, and the clock with it, at the arrival's barrier."""
    holders = [e.holder for e in ENGINES if e.holder and e.name in pool.busy]
    pool.heads["engines"] = clock.held_at(r, pool.lab, holders)


def refresh_deadlines(r: redis.Redis, pools: list[LabPool], changed: dict[str, set[str]] | None = None) -> None:
    """Each lab's next deadline in real time: its earliest lease deadline, due retry or engine moment, any worker
    due to respawn or finish booting; one round trip for all of them, reading only the keys that
    `changed` names for a lab (all of them without it).

    Those moments are simulated, so each is turned into real time through its lab's clock. One the
    clock cannot reach yet (paused, or held at a barrier before it) has no real time: the resume or
    the barrier's lift changes the clock, whose notification brings the lab back here."""
    if not pools:
        return
    reads = []
    with r.pipeline(transaction=False) as pipe:
        for pool in pools:
            for k in DEADLINE_KEYS:
                if changed is None or k in changed.get(pool.lab, ()) or k not in pool.heads:
                    reads.append((pool, k))
                    if k == "clock":
                        pipe.hgetall(key(pool.lab, k))
                    else:
                        pipe.zrange(key(pool.lab, k), 0, 0, withscores=True)
        for (pool, k), value in zip(reads, pipe.execute(), strict=True):
            pool.heads[k] = value
    for pool in pools:
        state, leases, scheduled = (pool.heads[k] for k in ("clock", "leases", "scheduled"))
        t = clock._now(state)
        barrier = state.get("barrier")
        speed = max(float(state.get("speed", 20)), 1e-9)
        held = math.inf if barrier in (None, "") else float(barrier)
        moments = [s for _m, s in leases + scheduled] + pool.heads.get("engines", [])
        moments += [
            -math.inf if s.state == "respawning" else s.respawn_at
            for s in pool.slots.values()
            if s.state in ("dead", "booting", "respawning")
        ]
        paused = state.get("paused") == "1"

        def real_of(at: float, state: dict = state, speed: float = speed) -> float:
            return float(state.get("base_real", time.time())) + (at - float(state.get("base_sim", 0))) / speed

        # a moment due now that waits behind another holder at the barrier the clock stands at: looked at again soon
        tied = pool.tied_since is not None and not paused and held <= t + 1e-6
        soon = pool.passed_at + min(TIED_LOOK_S, max(0.001, (pool.passed_at - (pool.tied_since or 0)) / 4))
        out = [
            (soon if tied and at >= held - 1e-6 else 0.0) if at <= t else real_of(at)
            for at in moments
            if at <= t or (not paused and at <= held)
        ]
        if held < math.inf and not paused:
            # a clock that waits at a barrier is looked at every MAINTAIN_S (a holder that died is swept): from
            # MAINTAIN_S after it got there; a hand-off's wait of a few milliseconds never comes to that
            out.append(max(real_of(held), pool.passed_at) + MAINTAIN_S)
        # the clock's next stop is this loop's own barrier, whose deadline heartbeats have most likely pushed later
        # (or whose job ended): it is moved on REAPER_LEAD_S before the clock gets there (Duties.move_reaper), so
        # the clock does not stand still for that; once it has been looked at, the deadline's own moment is the
        # lab's deadline (above) if it still stands
        early = (
            math.inf
            if pool.reaper_at is None or pool.reaper_at > held + 1e-6 or paused
            else real_of(pool.reaper_at) - REAPER_LEAD_S
        )
        pool.reaper_due = early if early > pool.reaper_looked else math.inf
        pool.deadline = min(out, default=math.inf)


def note(r: redis.Redis, pools: dict[str, LabPool], changed: set[str], waker: Waker) -> None:
    """Make the labs that a change concerns due: a deadline key refreshes the lab's deadline; a waking
    key brings a lab at rest (not passed on a cadence) back for a pass; new settings are reconciled now."""
    stale: dict[str, LabPool] = {}
    keys: dict[str, set[str]] = {}
    for k in changed:
        parts = k.split(":", 2)
        pool = pools.get(parts[1]) if len(parts) == 3 and parts[0] == "lab" else None
        if pool is None:
            continue
        if parts[2] in DEADLINE_KEYS:
            stale[pool.lab] = pool
            keys.setdefault(pool.lab, set()).add(parts[2])
        woken = {e.name for e in ENGINES if parts[2] in e.wakes}
        pool.quiet -= woken
        if parts[2] == "settings" or pool.due_at == math.inf:
            pool.due_at = 0.0
        elif woken or parts[2] == "faults":
            pool.due_at = min(pool.due_at, time.time() + HOUSEKEEP_S)  # an engine or a fault's cadence starts
        elif parts[2] == "dispatch":  # a delivery its sender may not live to send: looked at once it is due
            pool.due_at = min(pool.due_at, time.time() + DISPATCH_AGE_S + MAINTAIN_S)
    for lab, ks in keys.items():  # a clock hash a barrier's move published needs no read
        if "clock" in ks and (state := waker.published.get(key(lab, "clock"))) is not None:
            stale[lab].heads["clock"] = state
            ks.discard("clock")
    if waker.child:  # a child exited: the lab whose worker it was looks at it now
        waker.child = False
        for pool in pools.values():
            if any(
                s.proc is not None and s.state in ("idle", "busy") and s.proc.poll() is not None
                for s in pool.slots.values()
            ):
                pool.due_at = 0.0
    refresh_deadlines(r, list(stale.values()), keys)
