"""A lab's clock-driven duties, once per pass: the broker's (lease expiry → redelivery, due retries,
dispatch, lost hand-offs, stale jobs), the chapter engines' (load generator, autoscaler, chapter 6 traffic),
faults that end, the reaper's barrier on the lab's clock, and the clock's pacing readout.
"""

from __future__ import annotations

import os
import time

import redis

from core import clock, stream
from core.config import PACING_WINDOW_S, REAPER_BARRIER_S, Config
from core.keys import key, queue_name
from workers.broker import reaper
from workers.engines import autoscale, fairness, loadgen
from workers.hosts import HostAgent
from workers.pool import LabPool


class Duties:
    """What the supervisor does for each lab it runs, beside keeping its processes."""

    def __init__(self, r: redis.Redis, rq: redis.Redis, config: Config, host: HostAgent):
        self.r = r
        self.rq = rq  # RQ's own connection (bytes), for enqueueing
        self.config = config
        self.host = host

    def tick(self, pool: LabPool, settings: dict) -> dict:
        """The lab's broker duties due now; returns the clock as read at their start."""
        lab = pool.lab
        clock.lift_dead(self.r, lab)  # a killed worker's barriers: the clock never waits for the dead
        pool.heads["clock"] = self.r.hgetall(key(lab, "clock"))  # also what the lab's deadline is computed from
        state = clock.reading(pool.heads["clock"], time.time())
        now = state["t_raw"]
        self.watch_pacing(pool, state)
        # Work due at the same simulated moment as a deadline happens first: while another barrier holds
        # the clock at (or before) now, only deadlines strictly before it are acted on. (A job that ends
        # at 600 s is done before a lease that runs out at 600 s comes back.)
        other = clock.lowest_barrier(self.r, lab, besides="reaper")
        upto = now if other > now else other - 1e-6
        moved = reaper.redeliver_expired(self.r, lab, now, settings, state["speed"], upto)
        moved += reaper.start_due_retries(self.r, lab, now, upto)
        reaper.sweep_stale(self.r, lab, now, settings)
        self.reaper_barrier(pool)
        if "loadgen" not in pool.quiet:
            moved += loadgen.tick(self.r, self.rq, lab, now, self.config.lab_job_rate)
        autoscale.tick(self.r, lab, now, settings, self.config.max_workers)
        reaper.dispatch(self.r, self.rq, lab, older_than=None if moved else time.time() - 2)
        if not state["paused"] and (float(settings["arrival_rate"]) > 0 or "fair" not in pool.quiet):
            fairness.tick(self.r, self.rq, lab, settings, now)
        if time.time() - pool.handoffs_swept > 1:
            pool.handoffs_swept = time.time()
            reaper.resend_lost_handoffs(self.r, self.rq, lab, now)
            self.host.sweep_departed(lab, pool.slots)
        faults = self.r.hgetall(key(lab, "faults"))
        for name in ("storage_outage", "slow"):
            until = float(faults.get(f"{name}_until", -1))
            if until > now:
                pool.fault_active.add(name)
            elif name in pool.fault_active:
                pool.fault_active.discard(name)
                stream.emit(self.r, lab, "fault.ended", now, fault=name)
        return state

    def reaper_barrier(self, pool: LabPool) -> None:
        """The clock may not pass the next lease deadline or retry due time before this loop has acted on
        it: a busy host delays the redelivery in real time, never in simulated time."""
        lab = pool.lab
        for k in ("leases", "scheduled"):  # also the heads the lab's deadline is computed from (wait.refresh_deadlines)
            pool.heads[k] = self.r.zrange(key(lab, k), 0, 0, withscores=True)
        nxt = [s for k in ("leases", "scheduled") for _m, s in pool.heads[k]]
        at = min(nxt) if nxt else None
        if at != pool.reaper_at:
            if at is None:
                clock.lift(self.r, lab, "reaper")
            else:
                clock.hold(self.r, lab, "reaper", at, ttl=REAPER_BARRIER_S)
            pool.reaper_at = at
        elif at is not None:
            clock.refresh(self.r, lab, "reaper", ttl=REAPER_BARRIER_S)

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
            reason = ("the machine is busy" if busy else
                      "real work (ffmpeg, storage calls) cannot keep up at this speed")
            running = round(achieved, 1 if achieved < 10 else 0)
            self.r.hset(k, mapping={"slowed": 1, "effective": running, "slowed_reason": reason})
            stream.emit(self.r, pool.lab, "clock.slowed", state["t"], asked=round(asked, 1), running=running,
                        reason=reason)
        elif state["slowed"] and achieved >= 0.97 * asked:
            self.r.hset(k, mapping={"slowed": 0, "effective": asked, "slowed_reason": ""})
            stream.emit(self.r, pool.lab, "clock.caught_up", state["t"], asked=round(asked, 1))
        elif state["slowed"] and abs(achieved - state["effective"]) > 0.05 * asked:
            self.r.hset(k, "effective", round(achieved, 1 if achieved < 10 else 0))

    def release_branch(self, lab: str, settings: dict) -> bool:
        """A branch (app/branch.py) starts paused; its clock runs once its workers are taking jobs.
        True while it still waits for them."""
        if not self.r.hget(key(lab, "meta"), "hold_until_ready"):
            return False
        if self.r.scard(f"rq:workers:{queue_name(lab)}") < int(settings["workers"]):
            return True
        self.r.hdel(key(lab, "meta"), "hold_until_ready")
        stream.emit(self.r, lab, "clock.resumed", clock.resume(self.r, lab))
        return False
