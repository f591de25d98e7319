"""The pool supervisor: real `rq worker` processes per lab, and the broker's clock-driven duties.

It owns process lifecycles (spawn, SIGKILL on *kill worker*, respawn after a delay, drain on
scale-in) and runs the reaper loop (lease expiry → redelivery, due retries, dispatch). Workers
get PR_SET_PDEATHSIG so a supervisor that dies takes its workers with it: no orphans.

This module is the loop that ties the parts together, each in a module of its own:
- wait.py     how the loop sleeps (Waker) and when each lab is next due (deadlines, next_pass)
- pool.py     a lab's worker processes (Keeper: start, kill, respawn, boot, resize, rewire, stop)
- duties.py   a lab's clock-driven duties each pass (reaper, engines, faults, barrier, pacing readout)
- spare.py    pre-started workers handed to labs (Spares), forked by zygote.py
- hosts.py    this process as one pool host: placement, ownership leases, commands routed to the owner
- process.py  a lab process's priority and lifetime; reconcile.py  the periodic sweep of what is left
Chapter 7's scheduler replicas are engines/fleet.py; parking is core/parking.py; teardown
core/registry.py. Its timings are at the end of core/config.py.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
import time

import redis

from core import archive, blobs, clock, parking, registry, sandbox, stream
from core.broker import reaper
from core.config import Config
from core.disk import persist_refused
from core.keys import LABS, PARKED, key, owner
from workers import hosts, reconcile, wait
from workers.duties import Duties
from workers.engines import ENGINES
from workers.engines.fleet import SchedulerFleet
from workers.pool import Keeper, LabPool, stop_pool
from workers.process import lab_nice
from workers.spare import Spares


class Supervisor:
    def __init__(self, config: Config):
        self.config = config
        self.r = redis.Redis.from_url(config.redis_url, decode_responses=True)
        self.rq = redis.Redis.from_url(config.redis_url)
        self.pools: dict[str, LabPool] = {}
        self.fleet = SchedulerFleet(self.r, config.redis_url, lambda s: lab_nice(config, s))  # ch7 replicas
        self.running = True
        self.orphans_swept = 0.0  # real time of the last sweep of orphaned sandboxes (expire_idle)
        # this process as one pool host among many sharing the server (workers/hosts.py)
        self.host = hosts.HostAgent(self.r, config.pool_host_id, config.pool_lease_s, config.max_workers)
        self.spares = Spares(self.r, config)
        self.keeper = Keeper(self.r, config, self.host.id, self.fleet, self.spares)
        self.duties = Duties(self.r, self.rq, config, self.host)
        self.mine: set[str] = set()  # labs this host holds the lease on, as of the last tick
        self.reconciler = reconcile.Reconciler(self.r, config, self.host.id)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *a: setattr(self, "running", False))
        signal.signal(signal.SIGINT, lambda *a: setattr(self, "running", False))
        for engine in ENGINES:
            engine.start(self.config)  # what runs beside this loop (webhook delivery's thread)
        waker: wait.Waker | None = None
        last_expiry = next_host = 0.0
        outage = commands = False
        refused_since = 0.0  # when the server began refusing writes for want of disk (MISCONF), 0: it writes
        while self.running:
            try:
                if refused_since:
                    self.r.set(DISK_PROBE, time.time(), ex=60)  # one small write: does the server write again?
                    say(f"the server writes again after {time.time() - refused_since:.0f} s; the pool carries on")
                    refused_since = 0.0
                    if waker is not None:
                        waker.close()
                    waker = None  # what changed meanwhile went unheard: look at everything
                if waker is None:  # (re)connected: whatever changed meanwhile went unheard, so look at everything
                    waker = wait.Waker(self.r, self.host.commands)
                    commands, next_host = True, 0.0
                    for pool in self.pools.values():
                        pool.due_at = 0.0
                if outage:  # the server is back: rq workers sit out their own reconnect backoff (up to
                    outage = False  # 60 s), so restart them now; a lease brings back any attempt they held
                    self.keeper.recycle(self.pools.values())
                while commands and not self.host.adopt_soon and (raw := self.r.lpop(self.host.commands)) is not None:
                    self.command(raw)
                commands = False
                self.spares.keep(lambda: self.running)
                if time.time() >= next_host or self.host.adopt_soon:
                    self.tick()
                    next_host = self.host.last_beat + self.host.beat_every
                    commands, self.host.adopt_soon = commands or self.host.adopt_soon, False
                waker.follow(self.pools)  # before any pass: a lab new to this host is heard before it is read
                for pool in list(self.pools.values()):
                    if pool.lab in self.pools and min(pool.due_at, pool.deadline) <= time.time():
                        self.lab_pass(pool)
                    elif pool.lab in self.pools and pool.reaper_due <= time.time():
                        self.duties.move_reaper(pool)
                        wait.refresh_deadlines(self.r, [pool], {pool.lab: set()})
                    elif pool.lab in self.pools and pool.sample_at <= time.time():
                        self.duties.sample(pool)
                if time.time() - last_expiry > 5:
                    self.expire_idle()
                    last_expiry = time.time()
                wake = min(
                    [
                        next_host,
                        last_expiry + 5,
                        *(min(p.due_at, p.deadline, p.reaper_due, p.sample_at) for p in self.pools.values()),
                        self.spares.due_at(),
                    ]
                )
                changed = waker.wait(wake - time.time() + 0.0002, self.spares.exits())
                if self.spares.exited():  # a forked spare or worker exited: as SIGCHLD for a child of this process
                    waker.child = True
                commands = self.host.commands in changed
                if LABS in changed or PARKED in changed:
                    next_host = 0.0  # a new, deleted, parked or resumed lab: place or stop it now
                wait.note(self.r, self.pools, changed, waker)
            except redis.exceptions.OutOfMemoryError:
                time.sleep(0.5)  # the server is at its maxmemory: what could not be written is retried next tick
            except redis.ResponseError as e:
                if not persist_refused(e):
                    raise
                if not refused_since:  # its disk is full: every write is refused until space returns
                    refused_since = time.time()
                    say(
                        "the server refuses writes: it cannot write its data to disk (MISCONF, disk full). The pool "
                        "waits and carries on when space returns; nothing stored is lost, workers keep their jobs"
                    )
                time.sleep(DISK_WAIT_S)
            except redis.ConnectionError:
                outage = True
                time.sleep(0.5)  # the server restarts (the launcher brings it back); keep going
                if waker is not None:
                    waker.close()
                waker = None
        self.shutdown()

    def command(self, raw: str) -> None:
        """A kill or replica command for a lab this host owns (app/pool.py routes it to the owner)."""
        cmd = self.host.take_command(raw, self.pools)
        if cmd is None:
            return
        pool = self.pools.get(cmd.get("lab"))
        if pool:
            pool.due_at = 0.0  # a killed worker's respawn, a replica's: looked at in this loop
        result: dict = {"ok": False, "error": "unknown lab"}
        if pool and cmd.get("cmd") == "kill":
            slot = pool.slots.get(cmd.get("worker"))
            result = self.keeper.kill(pool, slot) if slot else {"ok": False, "error": "unknown worker"}
        elif pool and cmd.get("cmd") == "kill_replica":
            result = self.fleet.kill(pool.lab, cmd.get("replica"), registry.settings(self.r, pool.lab))
        if cmd.get("reply"):
            self.r.rpush(cmd["reply"], json.dumps(result))
            self.r.expire(cmd["reply"], 30)

    def tick(self) -> None:
        """The host's part, once a heartbeat or when the set of labs changes: ownership, labs gone or moved."""
        live = self.r.smembers(LABS)
        parked = parking.parked(self.r)  # parked labs run no process on any host and hold no lease
        self.mine = mine = self.host.ownership(
            live - parked, self.pools, {lab: pool.settings for lab, pool in self.pools.items()}
        )
        for lab in list(self.pools):
            if lab not in live:  # deleted through the API: stop its workers, then sweep what they left
                stop_pool(self.pools.pop(lab))
                self.fleet.stop(lab)
                registry.teardown(self.r, lab, self.config.var_dir)
            elif lab not in mine:  # parked, or another host holds its lease now: this one must not run it
                self.keeper.let_go(self.pools.pop(lab))
        for lab in mine:
            if lab not in self.pools:
                pool = self.pools[lab] = LabPool(lab)  # its first pass is due at once
                self.host.adopt(lab, pool.slots)
        self.host.report_running(
            sum(1 for pool in self.pools.values() for s in pool.slots.values() if s.proc and s.proc.poll() is None)
            + self.fleet.running()
        )

    def lab_pass(self, pool: LabPool) -> None:
        """Everything one lab needs now: its processes, its replicas, its broker duties; then when it is
        due again (see `wait.next_pass`)."""
        lab = pool.lab
        pool.passed_at = pool.reaper_looked = time.time()
        seen = self.duties.look(pool)  # what the pass reads, in one round trip
        settings = pool.settings = seen.settings
        self.keeper.reconcile(pool, settings)
        self.fleet.reconcile(lab, settings)
        holding = self.duties.release_branch(lab, settings, seen)
        self.duties.tick(pool, settings, seen)
        pool.due_at = time.time() + wait.next_pass(pool, settings, seen, holding, self.fleet.fleets)
        wait.engine_moments(self.r, pool)
        # the clock, lease and retry heads were just read by the pass; a write since then notifies (Waker)
        wait.refresh_deadlines(self.r, [pool], {lab: set()})

    def expire_idle(self) -> None:
        parking.park_idle(self.r, self.config.park_after)  # unwatched labs: tick() then stops their processes
        oldest_first = functools.partial(parking.least_recently_seen, self.r)  # what a full budget gives up first
        archive.keep_within(self.r, self.config.parked_memory, oldest_first)
        blobs.make_room(self.r, self.config.max_blob_bytes, oldest_first)
        for lab in self.pools:
            self.keeper.sweep_tmp(lab, f"{registry.TMP_PREFIX}*", older_than=self.config.ffmpeg_timeout + 10)
        if time.time() - self.orphans_swept > ORPHAN_SWEEP_S:
            self.orphans_swept = time.time()
            sandbox.sweep_orphans()
        labs = list(self.r.smembers(LABS))
        with self.r.pipeline(transaction=False) as pipe:  # one round trip for every lab, however many are parked
            for lab in labs:
                pipe.exists(owner(lab))
                pipe.hget(key(lab, "meta"), "last_active")
            seen = pipe.execute()
        for lab, owned, last in zip(labs, seen[::2], seen[1::2], strict=True):
            if lab not in self.mine and owned:
                continue  # another host's lab: its owner expires it
            if last is None or time.time() - float(last) > self.config.lab_idle_ttl:
                if lab in self.pools:
                    stop_pool(self.pools.pop(lab))
                self.fleet.stop(lab)
                registry.expire(self.r, lab, self.config.var_dir)
        if self.reconciler.due():
            self.reconciler.run()

    def shutdown(self) -> None:
        """A graceful stop hands every lab over: this host stops taking labs, releases each lease (a live
        host adopts the lab at its next tick and starts workers), and warm-stops its own workers, which
        finish their current job. One still busy after the grace is killed; its job's lease brings it back."""
        self.spares.stop()
        self.fleet.stop_all()
        try:
            self.host.leaving = True
            self.host.heartbeat(0, len(self.pools))
            for lab in self.pools:
                self.r.hset(key(lab, "meta"), "handover_from", self.host.id)
                self.host.release(lab)
        except redis.RedisError:
            pass  # the server is gone too: the leases lapse on their own
        procs = [(p, s) for p in self.pools.values() for s in p.slots.values() if s.proc and s.proc.poll() is None]
        for _pool, slot in procs:
            slot.proc.terminate()
        deadline = time.time() + 5
        for _pool, slot in procs:
            try:
                slot.proc.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                slot.proc.kill()
                slot.proc.wait()
        try:
            for pool in self.pools.values():
                for slot in pool.slots.values():
                    row = self.keeper.row(pool, slot)
                    if row.get("host") == self.host.id:
                        if row.get("job_id") and row.get("attempt"):  # killed mid-job: as any crash
                            reaper.mark_lost(
                                self.r,
                                pool.lab,
                                row["job_id"],
                                int(row["attempt"]),
                                slot.id,
                                clock.now(self.r, pool.lab),
                            )
                        self.r.hdel(key(pool.lab, "workers"), slot.id)
                        stream.emit(self.r, pool.lab, "worker.stopped", clock.now(self.r, pool.lab), worker_id=slot.id)
                self.keeper.drop_cache(pool.lab)
            self.host.deregister()
        except redis.RedisError:
            pass
        self.spares.close()


DISK_PROBE = "pool:disk_probe"  # the write that tells a waiting supervisor its server writes again
ORPHAN_SWEEP_S = 60.0  # real seconds between two sweeps of sandboxes whose starter died (core/sandbox.py orphans)
DISK_WAIT_S = 1.0  # real seconds between two tries while the server's disk is full


def say(line: str) -> None:
    """One line on the supervisor's log (stderr, which the launcher keeps)."""
    try:
        print(f"supervisor: {line}", file=sys.stderr, flush=True)
    except OSError:
        pass  # the log is on the full disk too


def main() -> None:
    Supervisor(Config.from_env()).run()


if __name__ == "__main__":
    main()
