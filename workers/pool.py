"""A lab's pool on this host: its rq worker processes, kept to what the lab's settings ask for.

`Keeper` starts them (from a spare when one is ready), SIGKILLs one on *kill worker*, respawns a dead one
after the lab's respawn delay, boots an added one after its boot lag, drains or kills on scale-in, rewires
one whose chapter 6 fleet changed, and stops a whole pool with its horses and ffmpeg runs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from core import blobs, clock, registry, stream
from core.broker import handoff, reaper
from core.broker.state import end_attempt, merge_worker_row
from core.config import REAPER_BARRIER_S, STOP_GRACE_S, WORKER_READY_S, Config
from core.keys import key, lab_dir, queue_name
from core.procs import server_tag
from workers import reconcile
from workers.engines import fairness
from workers.engines.fleet import SchedulerFleet
from workers.process import lab_env, lab_nice, renice, start_holder, start_lab_process
from workers.spare import Proc, Spares

RQ_BIN = str(Path(sys.executable).with_name("rq"))


def worker_argv(name: str, queues: list[str]) -> list[str]:
    """`rq worker`'s arguments for one of a lab's workers (after RQ_BIN; the server comes in RQ_REDIS_URL)."""
    return [
        "worker",
        "--name",
        name,
        "--quiet",
        "--worker-class",
        "workers.rqworker.LabWorker",
        "--connection-class",
        "workers.rqworker.LabRedis",
        "--logging_level",
        "WARNING",
        "--worker-ttl",
        "60",
        *queues,
    ]


@dataclass
class Slot:
    id: str
    proc: Proc | None = None
    state: str = "idle"  # idle|busy (from the worker) · booting · dead · respawning · draining · rewiring
    respawn_at: float = 0.0  # simulated time (the lab's clock) a dead worker respawns or a booting one starts
    generation: int = 0
    fleet: str | None = None  # the tier this worker alone serves (chapter 6's full separation)
    quiet_since: float | None = None  # real time a warm-stopped worker was first seen holding no job
    held_until: float | None = None  # real time its start barrier (`start_holder`) lapses: while it waits to start,
    # or started and not yet ready (the worker lifts it: workers/process.py ready)


@dataclass
class LabPool:
    lab: str
    slots: dict[str, Slot] = field(default_factory=dict)
    fault_active: set = field(default_factory=set)
    reconciled: bool = False  # after the first pass, added workers pay the boot lag
    nice: int | None = None  # the nice level its processes run at (see lab_nice)
    pacing: list = field(default_factory=list)  # (real, simulated) samples: the clock's achieved speed
    reaper_at: float | None = None  # where this loop's barrier on the lab's clock stands
    reaper_due: float = math.inf  # real time that barrier is next looked at, before the clock gets there
    reaper_looked: float = 0.0  # real time it was last looked at (a pass or Duties.move_reaper)
    due_at: float = 0.0  # real time of the lab's next pass (0: at once; inf: only when something changes)
    passed_at: float = 0.0  # real time of its last pass
    tied_since: float | None = None  # real time a due deadline began to wait behind another barrier at its moment
    sample_at: float = math.inf  # real time of the pacing readout's next sample (Duties.sample: no pass, no read)
    deadline: float = math.inf  # real time of its next lease deadline, due retry or worker (re)start
    settings: dict = field(default_factory=dict)  # as its last pass read them (empty before its first)
    heads: dict = field(default_factory=dict)  # as last read: its clock hash, the first of leases, retries, dispatch
    # and hand-offs (Duties.look; the clock, leases and retries again when they change: wait.refresh_deadlines)
    quiet: set = field(default_factory=set)  # engines found with nothing to do at its last pass (wait.next_pass),
    # until a change to their keys says otherwise (wait.note): their tick would only read that again
    busy: set = field(default_factory=set)  # engines with work at its last pass (wait.next_pass: Engine.busy)


def stop_pool(pool: LabPool) -> None:
    """Kill the lab's workers with their horses and ffmpeg runs (reconcile.kill_tree): a horse follows its
    worker only once its job has set PR_SET_PDEATHSIG (workers/tasks.py), so a worker killed in the
    moment after the fork would leave its horse running for a lab that is gone."""
    procs = [s.proc for s in pool.slots.values() if s.proc and s.proc.poll() is None]
    reconcile.kill_tree([p.pid for p in procs])
    for proc in procs:
        proc.wait()
    pool.slots.clear()


class Keeper:
    """The worker processes of every lab this host runs: each lab's rows in `lab:*:workers`, its events."""

    def __init__(self, r: redis.Redis, config: Config, host_id: str, fleet: SchedulerFleet, spares: Spares):
        self.r = r
        self.config = config
        self.host_id = host_id
        self.fleet = fleet  # chapter 7's replicas: reniced and stopped with the lab's workers
        self.spares = spares

    def spawn(self, pool: LabPool, slot: Slot) -> None:
        """Start the worker's process. Its start barrier stands at this moment until the worker is first idle
        (workers/process.py ready), or for WORKER_READY_S real seconds if it never gets there: a job sent now
        waits no simulated time for the interpreter, the imports and RQ's registration, however busy the host.
        The barrier is placed before the process starts, so a fast one can never lift it first."""
        slot.generation += 1
        settings = registry.settings(self.r, pool.lab)
        slot.fleet = self.fleet_of(pool, slot, settings)
        name = f"{queue_name(pool.lab)}-{slot.id}-{slot.generation}-{os.getpid()}{server_tag(self.config.redis_url)}"
        ids = {"LAB_WORKER_ID": slot.id, "LAB_ID": pool.lab}
        queues = [fairness.tier_queue_name(pool.lab, slot.fleet)] if slot.fleet else []
        nice = lab_nice(self.config, settings)
        pool.nice = nice
        argv = worker_argv(name, [*queues, queue_name(pool.lab)])
        slot.respawn_at = clock.now(self.r, pool.lab)
        self.hold_start(pool, slot, WORKER_READY_S)
        slot.proc = self.spares.take(argv, ids, nice) or subprocess.Popen(
            [RQ_BIN, *argv],
            env=lab_env(self.config, **ids),
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: start_lab_process(nice),
        )
        slot.state = "idle"
        slot.quiet_since = None
        self.write_row(pool, slot, job_id=None, fleet=slot.fleet)
        stream.emit(
            self.r,
            pool.lab,
            "worker.started",
            slot.respawn_at,
            worker_id=slot.id,
            pid=slot.proc.pid,
            fleet=slot.fleet or "",
        )

    def hold_start(self, pool: LabPool, slot: Slot, margin: float = REAPER_BARRIER_S) -> None:
        """The clock may not pass `respawn_at` before this loop has started the worker: a busy host delays a
        boot or a respawn in real time, never in simulated time, so `worker.started` lands on the boot lag
        or the respawn delay exactly. The barrier lapses `margin` real seconds after the clock would
        get there; `check_process` renews it while the worker waits (a paused clock gets nowhere)."""
        ttl = clock.lapse(clock.read(self.r, pool.lab), slot.respawn_at, margin)
        clock.hold(self.r, pool.lab, start_holder(slot.id), slot.respawn_at, ttl=ttl)
        slot.held_until = time.time() + ttl

    def release_start(self, pool: LabPool, slot: Slot) -> None:
        if slot.held_until is not None:
            clock.lift(self.r, pool.lab, start_holder(slot.id))
            slot.held_until = None

    @staticmethod
    def fleet_of(pool: LabPool, slot: Slot, settings: dict) -> str | None:
        """Chapter 6's full separation gives the first `pro_workers` workers (by id) to pro alone."""
        live = sorted((s for s in pool.slots.values() if s.state != "draining"), key=lambda s: int(s.id[1:]))
        return fairness.fleet_of(settings, live.index(slot) if slot in live else len(live))

    def write_row(self, pool: LabPool, slot: Slot, **extra) -> None:
        pid = slot.proc.pid if slot.proc and slot.state not in ("dead", "respawning") else None
        fields = {"id": slot.id, "state": slot.state, "host": self.host_id, "pid": pid, **extra}
        merge_worker_row(self.r, pool.lab, slot.id, fields, owner=True)

    def row(self, pool: LabPool, slot: Slot) -> dict:
        raw = self.r.hget(key(pool.lab, "workers"), slot.id)
        return json.loads(raw) if raw else {}

    def kill(self, pool: LabPool, slot: Slot, reason: str = "killed") -> dict:
        """SIGKILL the worker and its work horse (own process group), as a crash would."""
        if slot.proc is None or slot.state in ("dead", "respawning"):
            return {"ok": False, "error": f"worker {slot.id} is {slot.state}"}
        row = self.row(pool, slot)
        horse = row.get("horse_pid")
        for pid in (horse, slot.proc.pid):
            if pid:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        slot.proc.wait()
        self.after_death(pool, slot, row, "worker.killed")
        return {"ok": True, "worker": slot.id, "pid": slot.proc.pid, "job_id": row.get("job_id")}

    def after_death(self, pool: LabPool, slot: Slot, row: dict, event: str) -> None:
        lab = pool.lab
        now = clock.now(self.r, lab)
        settings = registry.settings(self.r, lab)
        stream.emit(self.r, lab, event, now, worker_id=slot.id, pid=slot.proc.pid, job_id=row.get("job_id"))
        if row.get("job_id") and row.get("attempt"):
            # the clock never waits for the dead: its attempt's barrier, and its hand-off's if it was killed
            # between saying busy and taking that barrier
            clock.lift(self.r, lab, f"{row['job_id']}:{row['attempt']}")
            clock.lift(self.r, lab, handoff.transit_holder(row["job_id"], int(row["attempt"])))
            # Ack early: the message was deleted on claim, so no lease will bring it back.
            reaper.mark_lost(self.r, lab, row["job_id"], int(row["attempt"]), slot.id, now)
            end_attempt(
                self.r,
                lab,
                row["job_id"],
                int(row["attempt"]),
                now,
                "killed" if event == "worker.killed" else "worker died",
            )
        self.sweep_tmp(lab, f"{registry.TMP_PREFIX}{slot.id}-*")  # its killed attempt's partial outputs
        slot.state = "dead"
        slot.respawn_at = now + float(settings["respawn_delay"])  # on the lab's clock, as every delay
        self.hold_start(pool, slot)
        self.write_row(pool, slot, job_id=None, attempt=None, horse_pid=None, progress=None)

    def boot_later(self, pool: LabPool, slot: Slot, settings: dict) -> None:
        """A worker added to a running pool is useful only after its boot lag (image pull, start-up,
        health check): hold it in `booting` and start the real process when the lag is over.

        The lag is simulated seconds on the lab's clock, never real seconds over the speed: a clock held
        at a barrier (real work that cannot keep up) or paused holds the boot too, so the new worker
        always misses `boot_lag` seconds of the lab's timeline."""
        now = clock.now(self.r, pool.lab)
        slot.state = "booting"
        slot.respawn_at = now + float(settings["boot_lag"])
        self.hold_start(pool, slot)
        self.write_row(pool, slot, job_id=None)
        stream.emit(self.r, pool.lab, "worker.booting", now, worker_id=slot.id, lag=settings["boot_lag"])

    def reconcile(self, pool: LabPool, settings: dict) -> None:
        """Make the pool match `workers`; scale-in drains (or kills, if the learner chose that)."""
        live = [s for s in pool.slots.values() if s.state != "draining"]
        want = int(settings["workers"])
        nice = lab_nice(self.config, settings)
        if pool.nice is not None and nice != pool.nice:
            pool.nice = nice
            renice(
                [
                    p
                    for s in pool.slots.values()
                    if s.proc and s.proc.poll() is None
                    for p in (s.proc.pid, self.row(pool, s).get("horse_pid"))
                    if p
                ],
                nice,
            )
            self.fleet.renice(pool.lab, nice)
        while len(live) < want:
            # numbered per lab in the server, so a lab that moves never reuses a departed host's ids
            slot = Slot(f"w{self.r.hincrby(key(pool.lab, 'meta'), 'worker_seq', 1)}")
            if slot.id in pool.slots:  # the lab was deleted during this tick (its count started again): never
                break  # replace a live slot, whose process would run on untracked; the next tick stops the pool
            pool.slots[slot.id] = slot
            if pool.reconciled and settings["boot_lag"] > 0:
                self.boot_later(pool, slot, settings)
            else:
                self.spawn(pool, slot)
            live.append(slot)
        if not pool.reconciled:  # its workers' start barriers (or none: no worker) hold the clock from here
            clock.lift(self.r, pool.lab, registry.BOOT)
        pool.reconciled = True
        self.rewire(pool, settings)
        for slot in sorted(live, key=lambda s: int(s.id[1:]), reverse=True)[: max(0, len(live) - want)]:
            if slot.state == "booting":  # never started: nothing to drain
                self.release_start(pool, slot)
                slot.state = "draining"
            elif settings["scale_in"] == "kill" and slot.state not in ("dead", "respawning"):
                self.kill(pool, slot)
                slot.state = "draining"
            elif slot.proc and slot.proc.poll() is None and slot.state not in ("dead", "respawning"):
                slot.proc.terminate()  # RQ warm shutdown: finish the current job, take no more
                slot.state = "draining"
                self.write_row(pool, slot)
                stream.emit(self.r, pool.lab, "worker.draining", clock.now(self.r, pool.lab), worker_id=slot.id)
            else:
                slot.state = "draining"
        for slot in list(pool.slots.values()):
            self.check_process(pool, slot)

    def rewire(self, pool: LabPool, settings: dict) -> None:
        """A worker whose fleet changed (full separation switched on or off, or the pro share moved)
        listens to the wrong queues: stop it warm (its job finishes) and start it again on the right ones."""
        for slot in pool.slots.values():
            if (
                slot.state in ("idle", "busy")
                and slot.proc is not None
                and slot.proc.poll() is None
                and (fleet := self.fleet_of(pool, slot, settings)) != slot.fleet
            ):
                slot.proc.terminate()
                slot.state = "rewiring"
                self.write_row(pool, slot)
                stream.emit(
                    self.r,
                    pool.lab,
                    "worker.rewiring",
                    clock.now(self.r, pool.lab),
                    worker_id=slot.id,
                    fleet=f"{fleet} only" if fleet else "every tier",
                )

    def hurry_warm_stop(self, pool: LabPool, slot: Slot) -> None:
        """Kill a warm-stopped (rewiring or draining) worker that holds no job yet has not exited.

        SIGTERM makes RQ leave its loop at once when idle, or after the current job, and register its
        death; its teardown then stops its pub/sub thread, which can sit out a 60 s wait for a
        subscription the unsubscribe just removed (RQ's `sleep_time=60`), most often when the stop comes
        right after start-up, as a settings change now does the moment it lands. With no job and no
        horse there is nothing left to finish, so after STOP_GRACE_S the process is killed."""
        if slot.proc is None or slot.proc.poll() is not None:
            return
        row = self.row(pool, slot)
        if row.get("job_id") or row.get("horse_pid"):
            slot.quiet_since = None  # still finishing its job: that is what a warm stop waits for
            return
        now = time.monotonic()
        if slot.quiet_since is None:
            slot.quiet_since = now
        elif now - slot.quiet_since >= STOP_GRACE_S:
            slot.proc.kill()
            slot.proc.wait()

    def check_process(self, pool: LabPool, slot: Slot) -> None:
        if slot.state in ("rewiring", "draining"):
            self.hurry_warm_stop(pool, slot)
        if slot.state == "rewiring":
            if slot.proc is None or slot.proc.poll() is not None:
                self.spawn(pool, slot)
            return
        if slot.state == "draining":
            if slot.proc is None or slot.proc.poll() is not None:
                self.release_start(pool, slot)  # a dead or booting worker scaled in waits for nothing
                del pool.slots[slot.id]
                self.r.hdel(key(pool.lab, "workers"), slot.id)
                stream.emit(self.r, pool.lab, "worker.stopped", clock.now(self.r, pool.lab), worker_id=slot.id)
            return
        if (
            slot.state in ("booting", "dead", "respawning")
            and slot.held_until is not None
            and time.time() > slot.held_until - REAPER_BARRIER_S / 2
        ):
            self.hold_start(pool, slot)  # still waiting to start (the clock was paused or slow): kept
        if slot.state == "booting":
            if clock.now(self.r, pool.lab) >= slot.respawn_at:
                self.spawn(pool, slot)
            return
        if slot.state in ("dead", "respawning"):
            if slot.state == "dead" and clock.now(self.r, pool.lab) >= slot.respawn_at:
                slot.state = "respawning"
                self.write_row(pool, slot)
                stream.emit(self.r, pool.lab, "worker.respawning", clock.now(self.r, pool.lab), worker_id=slot.id)
            elif slot.state == "respawning":
                self.spawn(pool, slot)
            return
        if slot.proc is not None and slot.proc.poll() is not None:
            self.after_death(pool, slot, self.row(pool, slot), "worker.died")

    def recycle(self, pools: Iterable[LabPool]) -> None:
        """After a server outage: SIGKILL every live worker (and horse) so each comes back connected at once."""
        for pool in pools:
            for slot in list(pool.slots.values()):
                if slot.state in ("idle", "busy") and slot.proc is not None and slot.proc.poll() is None:
                    self.kill(pool, slot)

    def let_go(self, pool: LabPool) -> None:
        """Another host holds this lab's lease (this one was cut off longer than a lease), or the lab is
        parked (core/parking.py): stop its workers now and drop the local cache. An ack-early job one of
        them held is lost, as with any stopped worker; an ack-late one is sent again at the lab's next reaper pass
        (reaper.mark_stopped), counted as no redelivery: it did not run twice."""
        lab = pool.lab
        rows = {s.id: self.row(pool, s) for s in pool.slots.values()}
        for slot in pool.slots.values():  # a resumed lab's clock waits for none of these
            self.release_start(pool, slot)
        for row in rows.values():  # a busy worker's work horse too, as kill() does: it must not outlive its worker
            if row.get("horse_pid") and row.get("host") == self.host_id:
                try:
                    os.kill(int(row["horse_pid"]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        stop_pool(pool)
        self.fleet.stop(lab)
        now = clock.now(self.r, lab)
        for wid, row in rows.items():
            if row.get("job_id") and row.get("attempt"):
                job_id, attempt = row["job_id"], int(row["attempt"])
                if not reaper.mark_lost(self.r, lab, job_id, attempt, wid, now):
                    reaper.mark_stopped(self.r, lab, job_id, attempt, now)
                end_attempt(self.r, lab, job_id, attempt, now, "parked")  # or moved: stopped with its lab
            if row.get("host") == self.host_id:
                self.r.hdel(key(lab, "workers"), wid)
        self.drop_cache(lab)

    def drop_cache(self, lab: str) -> None:
        here = lab_dir(self.config.var_dir, lab)
        shutil.rmtree(here, ignore_errors=True)
        stale = list(self.r.scan_iter(match=f"media:valid:{here}/*", count=500))
        if stale:
            self.r.delete(*stale)

    def sweep_tmp(self, lab: str, pattern: str, older_than: float | None = None) -> None:
        """Remove partial outputs (`transcoded/<job>/.tmp-*`) a killed attempt left; with `older_than`, only
        files untouched that long (no live ffmpeg run lasts past FFMPEG_TIMEOUT). Never counted as usage."""
        blobs.remove_partials(blobs.subfolders(lab_dir(self.config.var_dir, lab) / "transcoded"), pattern, older_than)
