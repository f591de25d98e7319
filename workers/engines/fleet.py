"""Chapter 7's scheduler fleet: the lab's scheduler replicas as real processes, owned by the supervisor.

Like the worker pool: one process per replica, SIGKILL on *kill replica* (a crash: no finally block
runs, so a held lock or lease stays until it expires), a replacement after the respawn delay,
scale-in by SIGTERM. A downtime fault takes every replica down at once, which is what the lesson's
missed-tick catch-up is for. Replicas get PR_SET_PDEATHSIG: a dead supervisor leaves no orphans.

A challenge's plan (core/challenges/run.py `plan_of`) takes replicas down and back one by one on the lab's
clock, and the fleet holds that clock at each of the plan's moments (the barrier PLAN) until every replica up
then has caught up with it: started and stepped, and fired every tick its clock has reached. So which replicas
fire which ticks is the plan's, not the machine's load or the lab's speed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import redis

from core import clock, stream
from core.config import Config
from core.engines.scheduler import PLAN, clock_offset, cron_key, lease_watch, tick_of
from core.procs import die_with_parent

PLAN_PATIENCE_S = 15.0  # real seconds the clock waits at a plan's moment for the replicas before it goes on


@dataclass
class ReplicaSlot:
    id: str
    proc: subprocess.Popen | None = None
    state: str = "running"  # running · dead (respawns after the delay) · down (fleet downtime)
    respawn_at: float = 0.0  # the lab's simulated time a dead replica is started again


@dataclass
class LabFleet:
    lab: str
    slots: dict[str, ReplicaSlot] = field(default_factory=dict)
    down: bool = False
    plan_at: float | None = None  # where the fleet holds the clock for a challenge's plan (PLAN), if it does
    waited_since: float | None = None  # real time (monotonic) the clock began to wait at plan_at for the replicas


class SchedulerFleet:
    def __init__(self, r: redis.Redis, redis_url: str, nice_of=None):
        self.r, self.redis_url = r, redis_url
        self.nice_of = nice_of or (lambda settings: 0)  # settings → nice level (workers.process.lab_nice)
        self.fleets: dict[str, LabFleet] = {}

    def spawn(self, fleet: LabFleet, slot: ReplicaSlot, settings: dict) -> None:
        env = dict(os.environ, REDIS_URL=self.redis_url)
        nice = self.nice_of(settings)
        self.r.hdel(cron_key(fleet.lab, "seen"), slot.id)  # "starting" until the new process takes its first step

        def start() -> None:
            die_with_parent()
            try:
                os.setpriority(os.PRIO_PROCESS, 0, nice)  # a lab's replicas share its CPU weight
            except OSError:
                pass

        slot.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.engines.scheduler", fleet.lab, slot.id],
            env=env,
            stdin=subprocess.DEVNULL,
            preexec_fn=start,
        )
        slot.state = "running"
        self.write_row(fleet, slot)
        stream.emit(
            self.r,
            fleet.lab,
            "replica.started",
            clock.now(self.r, fleet.lab),
            replica=slot.id,
            pid=slot.proc.pid,
            offset=round(clock_offset(settings, slot.id), 3),
        )

    def write_row(self, fleet: LabFleet, slot: ReplicaSlot) -> None:
        alive = slot.state == "running" and slot.proc is not None
        self.r.hset(
            cron_key(fleet.lab, "replicas"),
            slot.id,
            json.dumps({"id": slot.id, "state": slot.state, "pid": slot.proc.pid if alive else None}),
        )

    def kill(self, lab: str, replica: str, settings: dict, state: str = "dead") -> dict:
        """SIGKILL the replica as a crash would; its run (if any) stops mid-way and is no longer running."""
        fleet = self.fleets.get(lab)
        slot = fleet.slots.get(replica) if fleet else None
        if slot is None:
            return {"ok": False, "error": f"no replica {replica!r}"}
        if slot.proc is None or slot.state != "running":
            return {"ok": False, "error": f"replica {replica} is {slot.state}"}
        pid = slot.proc.pid
        slot.proc.send_signal(signal.SIGKILL)
        slot.proc.wait()
        clock.lift(self.r, lab, lease_watch(replica))  # the clock waits for no dead follower
        with self.r.pipeline() as pipe:
            pipe.hdel(cron_key(lab, "running"), replica)
            pipe.hset(cron_key(lab, "killed"), replica, clock.now(self.r, lab))  # failovers are timed from it
            pipe.execute()
        slot.state = state
        slot.respawn_at = clock.now(self.r, lab) + float(settings["respawn_delay"])  # on the lab clock
        self.write_row(fleet, slot)
        stream.emit(self.r, lab, "replica.killed", clock.now(self.r, lab), replica=replica, pid=pid)
        return {"ok": True, "replica": replica, "pid": pid}

    def reconcile(self, lab: str, settings: dict) -> None:
        """Make the lab's replicas match `scheduler_replicas`, honour downtime, respawn the dead."""
        want = int(settings.get("scheduler_replicas", 0))
        fleet = self.fleets.get(lab)
        if fleet is None:
            if want == 0:
                return
            fleet = self.fleets[lab] = LabFleet(lab)
        now = clock.now(self.r, lab)
        fault = self.r.hgetall(cron_key(lab, "fault"))
        down_until = float(fault.get("down_until") or -1)
        plan = json.loads(fault["plan"]) if fault.get("plan") else None
        windows = plan["down"] if plan else {}
        for rid in [f"r{k}" for k in range(1, want + 1) if f"r{k}" not in fleet.slots]:
            fleet.slots[rid] = ReplicaSlot(rid, state="dead")
        if fleet.down and now >= down_until:
            fleet.down = False
            stream.emit(self.r, lab, "scheduler.up", now)
        fleet.down = now < down_until
        for rid in sorted(fleet.slots, key=lambda s: int(s[1:])):
            slot = fleet.slots[rid]
            if int(rid[1:]) > want:  # scale-in: a graceful stop, then forget it
                self.stop_slot(slot)
                del fleet.slots[rid]
                self.r.hdel(cron_key(lab, "replicas"), rid)
                continue
            if now < down_until or (rid in windows and windows[rid][0] <= now < windows[rid][1]):
                if slot.state == "running":
                    self.kill(lab, rid, settings, state="down")
                elif slot.state != "down":
                    slot.state = "down"
                    self.write_row(fleet, slot)
                continue
            if slot.state == "down":
                slot.state, slot.respawn_at = "dead", 0.0
            if slot.state == "running" and slot.proc is not None and slot.proc.poll() is not None:
                self.r.hdel(cron_key(lab, "running"), rid)
                slot.state, slot.respawn_at = "dead", now
                stream.emit(self.r, lab, "replica.died", now, replica=rid)
            if slot.state == "dead" and now >= slot.respawn_at:
                self.spawn(fleet, slot, settings)
        if plan:
            self.follow(fleet, plan, settings, now)

    def follow(self, fleet: LabFleet, plan: dict, settings: dict, now: float) -> None:
        """Hold the lab's clock at the plan's next moment; at a moment, until every running replica has caught up
        (stepped since it started, fired every tick its clock has reached); past the last, let it go."""
        seen = self.r.hgetall(cron_key(fleet.lab, "seen"))
        behind = any(
            slot.state == "running" and int(seen.get(rid, "-1") or -1) < tick_of(settings, rid, now)
            for rid, slot in fleet.slots.items()
        )
        if behind and fleet.plan_at == now:  # the clock waits here: for a replica that hangs, not for ever
            fleet.waited_since = fleet.waited_since or time.monotonic()
            behind = time.monotonic() - fleet.waited_since < PLAN_PATIENCE_S
        else:
            fleet.waited_since = None
        ahead = [m for m in plan["moments"] if m > now or (behind and m >= now)]
        at = ahead[0] if ahead else None
        if at is None:  # done: the plan goes (the run keeps its copy for the verdict)
            clock.lift(self.r, fleet.lab, PLAN)
            self.r.hdel(cron_key(fleet.lab, "fault"), "plan")
            fleet.plan_at = None
        elif at != fleet.plan_at:
            clock.hold(self.r, fleet.lab, PLAN, at)
            fleet.plan_at = at
        elif not clock.refresh(self.r, fleet.lab, PLAN):
            clock.hold(self.r, fleet.lab, PLAN, at)  # swept while this process stalled: place it again

    def renice(self, lab: str, nice: int) -> None:
        fleet = self.fleets.get(lab)
        for slot in fleet.slots.values() if fleet else ():
            if slot.proc is not None and slot.proc.poll() is None:
                try:
                    os.setpriority(os.PRIO_PROCESS, slot.proc.pid, nice)
                except OSError:
                    pass

    @staticmethod
    def stop_slot(slot: ReplicaSlot) -> None:
        if slot.proc is not None and slot.proc.poll() is None:
            slot.proc.terminate()
            try:
                slot.proc.wait(2)
            except subprocess.TimeoutExpired:
                slot.proc.kill()
                slot.proc.wait()

    def running(self) -> int:
        """Replica processes alive now, across every lab."""
        return sum(1 for f in self.fleets.values() for s in f.slots.values() if s.proc and s.proc.poll() is None)

    def stop(self, lab: str) -> None:
        """The lab is gone: kill its replicas now (teardown sweeps their keys)."""
        fleet = self.fleets.pop(lab, None)
        for slot in fleet.slots.values() if fleet else ():
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.kill()
                slot.proc.wait()

    def stop_all(self) -> None:
        for lab in list(self.fleets):
            self.stop(lab)


class Replicas:
    """Chapter 7's replicas in the supervisor's pass (the `Engine` protocol): they run as processes of
    their own (the fleet above keeps them); the lab is passed on the housekeeping cadence while it asks for
    some."""

    name = "scheduler"
    wakes = ()
    holder = None

    def start(self, config: Config) -> None:
        """Nothing runs beside the pass."""

    def read(self, pipe: redis.client.Pipeline, lab: str) -> int:
        return 0

    def busy(self, settings: dict, gauges: list) -> bool:
        return int(settings.get("scheduler_replicas", 0)) > 0

    def tick(
        self, r: redis.Redis, rq: redis.Redis, lab: str, settings: dict, state: dict, config: Config, quiet: bool
    ) -> int:
        return 0


ENGINE = Replicas()
