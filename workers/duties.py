"""A lab's clock-driven duties, once per pass: the broker's (lease expiry → redelivery, due retries,
dispatch, lost hand-offs, stale jobs), the chapter engines' (workers/engines: ENGINES),
faults that end, the reaper's barrier on the lab's clock, and the clock's pacing readout.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import redis

from core import clock, registry, stream
from core.broker import handoff, reaper
from core.config import MAINTAIN_S, PACING_WINDOW_S, REAPER_BARRIER_S, Config
from core.engines import loadgen
from core.keys import key, queue_name
from workers.engines import ENGINES
from workers.hosts import HostAgent
from workers.pool import LabPool

DISPATCH_AGE_S = 2.0  # real seconds a delivery may sit in `dispatch` before the pass sends it (its sender died)


@dataclass
class Seen:
    """What one pass reads, in one pipelined round trip at its start (`Duties.look`): each key once, read
    before anything is written, so the pass's duties and its next moment (wait.next_pass) share one view."""

    settings: dict
    clock: dict  # the clock hash, and `state` its reading at the moment it was read
    state: dict
    hold: str | None  # a branch waiting for its workers (meta hold_until_ready)
    alive: dict  # barrier holder → real time it lapses unless refreshed
    barriers: list  # the two lowest barriers: (holder, simulated time)
    workers: dict  # the lab's worker rows
    faults: dict
    states: list  # queued, retrying, running
    gauges: dict = field(default_factory=dict)  # engine name → what its `read` read (only while it is not quiet)
    here: set = field(default_factory=set)  # the lab's slots on this host when it was read
    foreign: bool = False  # worker rows of another live host (still draining after a handover) were found


class Duties:
    """What the supervisor does for each lab it runs, beside keeping its processes."""

    def __init__(self, r: redis.Redis, rq: redis.Redis, config: Config, host: HostAgent):
        self.r = r
        self.rq = rq  # RQ's own connection (bytes), for enqueueing
        self.config = config
        self.host = host

    def look(self, pool: LabPool) -> Seen:
        """Everything a pass reads, in one round trip (the engines' gauges only while they may have work)."""
        lab = pool.lab
        with self.r.pipeline(transaction=False) as pipe:
            pipe.get(key(lab, "settings"))
            pipe.hgetall(key(lab, "clock"))
            pipe.hget(key(lab, "meta"), "hold_until_ready")
            pipe.hgetall(key(lab, "barrier_alive"))
            pipe.zrange(key(lab, "barriers"), 0, 1, withscores=True)
            for k in HEADS:
                pipe.zrange(key(lab, k), 0, 0, withscores=True)
            pipe.hgetall(key(lab, "workers"))
            pipe.hgetall(key(lab, "faults"))
            pipe.hmget(key(lab, "states"), "queued", "retrying", "running")
            reads = [(e.name, e.read(pipe, lab)) for e in ENGINES if e.name not in pool.quiet]
            raw, clock_hash, hold, alive, barriers, *rest = pipe.execute()
        real = time.time()
        heads, rest = rest[: len(HEADS)], rest[len(HEADS) :]
        pool.heads.update(zip(HEADS, heads, strict=True))
        pool.heads["clock"] = clock_hash  # also what the lab's deadline is computed from (wait.refresh_deadlines)
        workers, faults, states, *gauges = rest
        seen = Seen(
            registry.parse_settings(raw),
            clock_hash,
            clock.reading(clock_hash, real),
            hold,
            alive,
            barriers,
            workers,
            faults,
            states,
            here=set(pool.slots),
        )
        for name, n in reads:
            seen.gauges[name], gauges = gauges[:n], gauges[n:]
        return seen

    def tick(self, pool: LabPool, settings: dict, seen: Seen) -> None:
        """The lab's broker duties due now, on what `look` read (more is read only where something is due)."""
        lab = pool.lab
        if self.lift_dead(pool, seen):  # a killed worker's barriers: the clock never waits for the dead
            with self.r.pipeline(transaction=False) as pipe:  # the sweep moved the clock: read it again
                pipe.hgetall(key(lab, "clock"))
                pipe.zrange(key(lab, "barriers"), 0, 1, withscores=True)
                seen.clock, seen.barriers = pipe.execute()
            seen.state = clock.reading(seen.clock, time.time())
            pool.heads["clock"] = seen.clock
        state = seen.state
        now = state["t_raw"]
        self.watch_pacing(pool, state)
        # Work due at the same simulated moment as a deadline happens first: while another barrier holds
        # the clock at (or before) now, only deadlines strictly before it are acted on. (A job that ends
        # at 600 s is done before a lease that runs out at 600 s comes back.)
        other = next((at for holder, at in seen.barriers if holder != "reaper"), math.inf)
        upto = now if other > now else other - 1e-6
        # a deadline due now behind another holder's barrier at its moment waits for that holder, whose lift need not
        # move the clock (nor notify): the lab is looked at again soon (wait.refresh_deadlines), not over and over
        behind = any(upto < at <= now for _m, at in pool.heads["leases"] + pool.heads["scheduled"])
        pool.tied_since = (pool.tied_since or time.time()) if behind else None
        moved = 0
        if any(at <= upto for _m, at in pool.heads["leases"]):
            moved += reaper.redeliver_expired(self.r, lab, now, settings, state["speed"], upto, seen.clock)
        if any(at <= upto for _m, at in pool.heads["scheduled"]):
            moved += reaper.start_due_retries(self.r, lab, now, upto)
        if moved:  # the heads moved on: the reaper's barrier goes at the new ones
            with self.r.pipeline(transaction=False) as pipe:
                for k in ("leases", "scheduled"):
                    pipe.zrange(key(lab, k), 0, 0, withscores=True)
                pool.heads["leases"], pool.heads["scheduled"] = pipe.execute()
        reaper.sweep_stale(self.r, lab, now, settings)
        self.reaper_barrier(pool, seen.state, seen.alive)
        for engine in ENGINES:
            moved += engine.tick(self.r, self.rq, lab, settings, state, self.config, engine.name in pool.quiet)
        if moved or any(t <= time.time() - DISPATCH_AGE_S for _m, t in pool.heads["dispatch"]):
            reaper.dispatch(self.r, self.rq, lab, older_than=None if moved else time.time() - DISPATCH_AGE_S)
            # all sent, or only those old enough: then the first one left is read (its own moment is due later)
            pool.heads["dispatch"] = self.r.zrange(key(lab, "dispatch"), 0, 0, withscores=True) if not moved else []
        if any(t <= time.time() - handoff.HANDOFF_S for _m, t in pool.heads["handoffs"]):
            reaper.resend_lost_handoffs(self.r, self.rq, lab, now)
            pool.heads["handoffs"] = self.r.zrange(key(lab, "handoffs"), 0, 0, withscores=True)
        seen.foreign = self.host.sweep_departed(lab, seen.here | set(pool.slots), seen.workers) > 0
        for name in ("storage_outage", "slow"):
            until = float(seen.faults.get(f"{name}_until", -1))
            if until > now:
                pool.fault_active.add(name)
            elif name in pool.fault_active:
                pool.fault_active.discard(name)
                stream.emit(self.r, lab, "fault.ended", now, fault=name)

    def lift_dead(self, pool: LabPool, seen: Seen) -> int:
        """Barriers whose holders stopped refreshing them, lifted (on the expiries `look` read; the sweep runs
        only when one has passed). This loop's own barriers (the reaper's, and the load generator's while it
        is on) are refreshed first, never swept: they lapse only while the loop stalls, and this pass is the
        loop running."""
        real = time.time()
        if "reaper" not in seen.alive:
            pool.reaper_at = None  # not held (the lab's keys were restored or swept meanwhile): held anew below
        elif pool.reaper_at is not None and float(seen.alive["reaper"]) < real:
            ttl = clock.lapse(seen.state, pool.reaper_at, REAPER_BARRIER_S)
            clock.refresh(self.r, pool.lab, "reaper", ttl=ttl)
            seen.alive["reaper"] = real + ttl
        if seen.gauges.get("loadgen") == ["1"] and float(seen.alive.get(loadgen.ARRIVAL, math.inf)) < real:
            clock.refresh(self.r, pool.lab, loadgen.ARRIVAL, ttl=REAPER_BARRIER_S)  # the generator's: held by this
            seen.alive[loadgen.ARRIVAL] = real + REAPER_BARRIER_S  # loop, kept while it runs, as the reaper's is
        if not any(float(u) < real for u in seen.alive.values()):
            return 0
        seen.alive = {h: u for h, u in seen.alive.items() if float(u) >= real}  # what the sweep leaves
        return clock.lift_dead(self.r, pool.lab)

    def reaper_barrier(self, pool: LabPool, state: dict, alive: dict) -> None:
        """The clock may not pass the next lease deadline or retry due time before this loop has acted on
        it: a busy host delays the redelivery in real time, never in simulated time. It is moved only when
        that moment moves, and lapses REAPER_BARRIER_S real seconds after the clock would reach it, so a
        running loop keeps it without a write per pass (`lift_dead` refreshes it when the clock was slower).
        `state`: the clock's reading; `alive`: the barriers' expiries as known, kept up to date here."""
        lab = pool.lab
        nxt = [s for k in ("leases", "scheduled") for _m, s in pool.heads[k]]
        at = min(nxt) if nxt else None
        if at == pool.reaper_at:
            return
        if at is None:
            clock.lift(self.r, lab, "reaper")
            alive.pop("reaper", None)
        else:
            ttl = clock.lapse(state, at, REAPER_BARRIER_S)
            clock.hold(self.r, lab, "reaper", at, ttl=ttl)
            alive["reaper"] = time.time() + ttl
        pool.reaper_at = at

    def move_reaper(self, pool: LabPool) -> None:
        """The clock nears this loop's barrier (wait.refresh_deadlines: `reaper_due`): heartbeats have most likely
        pushed that lease deadline later, or its job ended. Only the first lease is read (every change to the
        retries is heard: wait.note), and the barrier moved to where the heads stand now; a deadline that really
        comes is acted on by the pass at its moment."""
        pool.reaper_looked = time.time()
        pool.heads["leases"] = self.r.zrange(key(pool.lab, "leases"), 0, 0, withscores=True)
        self.reaper_barrier(pool, clock.reading(pool.heads["clock"], time.time()), {})

    def sample(self, pool: LabPool) -> None:
        """The pacing readout between passes, on the clock hash in hand: it is read again whenever it changes
        (wait.note), so its reading now is a fresh read's, and costs the server nothing."""
        self.watch_pacing(pool, clock.reading(pool.heads["clock"], time.time()))
        pool.sample_at = time.time() + MAINTAIN_S

    def watch_pacing(self, pool: LabPool, state: dict) -> None:
        """The honest clock's readout: the speed the lab really achieves over the last few real seconds.

        Barriers (clock.hold) make the clock wait for real work; when that drags the achieved speed under
        90 % of the asked speed, the lab says so (`clock.slowed`, and `slowed`/`effective` in the clock
        snapshot) until it is back within 3 %.
        """
        real = time.time()
        samples = pool.pacing
        if state["paused"] or (samples and samples[-1][2] != state["speed"]):
            samples.clear()
        if state["paused"]:
            return
        samples.append((real, state["t"], state["speed"]))
        while samples and real - samples[0][0] > PACING_WINDOW_S:
            samples.pop(0)
        if real - samples[0][0] < PACING_WINDOW_S * 0.6:
            return
        asked = state["speed"]
        achieved = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
        k = key(pool.lab, "clock")
        if not state["slowed"] and achieved < clock.SLOWED_BELOW * asked:
            busy = os.getloadavg()[0] > (os.cpu_count() or 1)
            reason = "the machine is busy" if busy else "real work (ffmpeg, storage calls) cannot keep up at this speed"
            running = round(achieved, 1 if achieved < 10 else 0)
            self.r.hset(k, mapping={"slowed": 1, "effective": running, "slowed_reason": reason})
            stream.emit(
                self.r, pool.lab, "clock.slowed", state["t"], asked=round(asked, 1), running=running, reason=reason
            )
        elif state["slowed"] and achieved >= 0.97 * asked:
            self.r.hset(k, mapping={"slowed": 0, "effective": asked, "slowed_reason": ""})
            stream.emit(self.r, pool.lab, "clock.caught_up", state["t"], asked=round(asked, 1))
        elif state["slowed"] and abs(achieved - state["effective"]) > 0.05 * asked:
            self.r.hset(k, "effective", round(achieved, 1 if achieved < 10 else 0))

    def release_branch(self, lab: str, settings: dict, seen: Seen) -> bool:
        """A branch (app/branch_seed.py) starts paused; its clock runs once its workers are taking jobs.
        True while it still waits for them."""
        if not seen.hold:
            return False
        if self.r.scard(f"rq:workers:{queue_name(lab)}") < int(settings["workers"]):
            return True
        self.r.hdel(key(lab, "meta"), "hold_until_ready")
        stream.emit(self.r, lab, "clock.resumed", clock.resume(self.r, lab))
        return False


HEADS = ("leases", "scheduled", "dispatch", "handoffs")  # the sorted sets whose first member a pass reads
