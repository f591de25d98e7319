"""The pool supervisor: real `rq worker` processes per lab, and the broker's clock-driven duties.

It owns process lifecycles (spawn, SIGKILL on *kill worker*, respawn after a delay, drain on
scale-in) and runs the reaper loop (lease expiry → redelivery, due retries, dispatch). Workers
get PR_SET_PDEATHSIG so a supervisor that dies takes its workers with it: no orphans.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from core import clock, parking, registry, stream
from core.config import Config
from core.keys import (
    LABS,
    PARKED,
    host_commands,
    host_running,
    key,
    lab_dir,
    owner,
    queue_name,
    spare_assignment,
)
from workers import hosts, reconcile
from workers.broker import reaper
from workers.engines import autoscale, fairness, loadgen, webhooks
from workers.engines.fleet import SchedulerFleet
from workers.process import die_with_parent

LOOP_S = 0.02  # fallback scan interval when the server refuses keyspace notifications (see Waker)
REAPER_BARRIER_S = 2.0  # real seconds the clock waits for a stalled reaper loop before going on
PACING_WINDOW_S = 3.0  # real seconds over which the clock's achieved speed is measured
HOUSEKEEP_S = 0.1  # a lab whose engines run on time (load generator, fairness, autoscale, drains, faults)
MAINTAIN_S = 1.0  # a lab with work in flight: hand-off sweep, dead barriers, pacing readout, stragglers
SPARE_REFILL_S = 2.0  # real seconds after a spare worker was taken before the host starts replacements
STOP_GRACE_S = 2.0  # real seconds a warm-stopped worker holding no job may take to exit before it is killed
DEADLINE_KEYS = ("leases", "scheduled", "clock")  # a change moves the lab's next deadline
# a change wakes a lab at rest: new settings, a job, a delivery, the load generator, a fault, chapter 6 traffic
WAKING_KEYS = ("settings", "states", "dispatch", "loadgen", "faults", "fair:pending:*")
RQ_BIN = str(Path(sys.executable).with_name("rq"))


@dataclass
class Slot:
    id: str
    proc: subprocess.Popen | None = None
    state: str = "idle"  # idle|busy (from the worker) · booting · dead · respawning · draining · rewiring
    respawn_at: float = 0.0  # simulated time (the lab's clock) a dead worker respawns or a booting one starts
    generation: int = 0
    fleet: str | None = None  # the tier this worker alone serves (chapter 6's full separation)
    quiet_since: float | None = None  # real time a warm-stopped worker was first seen holding no job


@dataclass
class LabPool:
    lab: str
    slots: dict[str, Slot] = field(default_factory=dict)
    fault_active: set = field(default_factory=set)
    handoffs_swept: float = 0.0  # real time of the last hand-off sweep (once a second is plenty)
    reconciled: bool = False  # after the first pass, added workers pay the boot lag
    nice: int | None = None  # the nice level its processes run at (see lab_nice)
    pacing: list = field(default_factory=list)  # (real, simulated) samples: the clock's achieved speed
    reaper_at: float | None = None  # where this loop's barrier on the lab's clock stands
    due_at: float = 0.0  # real time of the lab's next pass (0: at once; inf: only when something changes)
    deadline: float = math.inf  # real time of its next lease deadline, due retry or worker (re)start
    heads: dict = field(default_factory=dict)  # as last read: its clock hash, its first lease and first retry


def lab_nice(config: Config, settings: dict) -> int:
    """The nice level of a lab's processes: a base above the web tier, supervisor and server (LAB_NICE),
    plus log1.25 of the lab's process count. CFS weighs nice n at ≈ 1024/1.25^n, so a lab's eight busy
    workers together weigh about what one lab's single worker does: CPU is shared between labs, not
    between processes, and a lab that floods at its limits cannot take the box from a quiet one."""
    n = max(1, registry.processes_of(settings))
    return max(0, min(19, config.lab_nice + round(math.log(n) / math.log(1.25))))


def start_lab_process(nice: int) -> None:
    """preexec_fn of every lab process: die with the supervisor, run at the lab's nice level."""
    die_with_parent()
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        pass


def renice(pids: list[int], nice: int) -> None:
    """Move live processes to a new nice level (the lab grew or shrank); raising priority back needs
    CAP_SYS_NICE, so without it a lab that shrinks keeps its lower priority until its workers restart."""
    for pid in pids:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        except OSError:
            pass


class Waker:
    """How the supervisor sleeps: until the next deadline of a lab, or until a change that concerns
    it, never on a fixed poll.

    Changes arrive as Redis keyspace notifications (`notify-keyspace-events`, switched on here), so
    the code that claims, extends or ends a lease needs no extra call: a ZADD to `lab:*:leases`, a
    new retry in `lab:*:scheduled`, a clock or settings change, a new job, a new, parked or resumed lab, or a command
    pushed to this pool host's command list wakes the loop at once. A child process that exits (a
    worker that crashed, a spare) wakes it too: SIGCHLD writes to a socket the same `select` watches.
    The timeout is computed from the deadline in real time and enforced by that `select` (a
    server-side BLPOP timeout rounds up to the server's 100 ms cron on an idle server). A server that
    refuses CONFIG SET falls back to a 20 ms poll.
    """

    def __init__(self, r: redis.Redis, commands: str):
        self.r = r
        self.ps = None
        self.child = False  # a child process exited since the last wait
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
            want = set(flags) | set("Kzls$h")
            r.config_set("notify-keyspace-events", "".join(sorted(want)))
            ps = r.pubsub(ignore_subscribe_messages=True)
            db = r.connection_pool.connection_kwargs.get("db", 0)
            ps.psubscribe(f"__keyspace@{db}__:{commands}", f"__keyspace@{db}__:{LABS}", f"__keyspace@{db}__:{PARKED}",
                          *(f"__keyspace@{db}__:lab:*:{k}" for k in DEADLINE_KEYS + WAKING_KEYS))
            self.ps = ps
        except redis.ResponseError:
            self.ps = None

    def wait(self, timeout: float) -> set[str]:
        """Sleep up to `timeout` s; the keys that changed meanwhile (empty: the timeout passed)."""
        if self.ps is None:
            time.sleep(min(timeout, LOOP_S))
            return set()
        conn = self.ps.connection
        if not conn.can_read(timeout=0):
            select.select([conn._sock, self.sig_r], [], [], max(0.0, timeout))
        try:
            while self.sig_r.recv(512):
                self.child = True
        except (BlockingIOError, InterruptedError):
            pass
        changed: set[str] = set()
        while conn.can_read(timeout=0):
            msg = self.ps.get_message(timeout=0)
            if msg and msg.get("type") == "pmessage":
                changed.add(msg["channel"].split(":", 1)[1])
        return changed

    def close(self) -> None:
        if self.ps is not None:
            self.ps.close()
        self.sig_r.close()
        self.sig_w.close()


class Supervisor:
    def __init__(self, config: Config):
        self.config = config
        self.r = redis.Redis.from_url(config.redis_url, decode_responses=True)
        self.rq = redis.Redis.from_url(config.redis_url)
        self.pools: dict[str, LabPool] = {}
        self.fleet = SchedulerFleet(self.r, config.redis_url, lambda s: lab_nice(config, s))  # ch7 replicas
        self.running = True
        # this process as one pool host among many sharing the server (workers/hosts.py)
        self.host = hosts.HostAgent(self.r, config.pool_host_id, config.pool_lease_s, config.max_workers)
        self.spares: list[tuple[subprocess.Popen, str]] = []  # pre-started worker processes, each with its token
        self.refill_at = 0.0
        self.can_renice = os.geteuid() == 0  # may lower a process's nice value (a spare's, once assigned)
        self.mine: set[str] = set()  # labs this host holds the lease on, as of the last tick
        self.waiting: set[str] = set()  # labs no host had room for (narrated once)
        self.reconciler = reconcile.Reconciler(self.r, config, self.host.id)
        self.reported: tuple[int, float] | None = None  # (processes, heartbeat) last written for /metrics
        self.adopt_soon = False  # a command came for a lab not placed yet: tick before reading commands again

    # --- processes ------------------------------------------------------------------------
    def spawn(self, pool: LabPool, slot: Slot) -> None:
        slot.generation += 1
        slot.fleet = self.fleet_of(pool, slot, registry.settings(self.r, pool.lab))
        name = f"{queue_name(pool.lab)}-{slot.id}-{slot.generation}-{os.getpid()}"
        env = dict(os.environ, LAB_WORKER_ID=slot.id, REDIS_URL=self.config.redis_url,
                   VAR_DIR=str(self.config.var_dir))
        queues = [fairness.tier_queue_name(pool.lab, slot.fleet)] if slot.fleet else []
        nice = lab_nice(self.config, registry.settings(self.r, pool.lab))
        pool.nice = nice
        argv = ["worker", "--url", self.config.redis_url, "--name", name, "--quiet",
                "--worker-class", "workers.rqworker.LabWorker",
                "--logging_level", "WARNING", "--worker-ttl", "60", *queues, queue_name(pool.lab)]
        slot.proc = self.take_spare(argv, {"LAB_WORKER_ID": slot.id}, nice) or subprocess.Popen(
            [RQ_BIN, *argv], env=env, stdin=subprocess.DEVNULL, preexec_fn=lambda: start_lab_process(nice))
        slot.state = "idle"
        slot.quiet_since = None
        self.write_row(pool, slot, job_id=None, fleet=slot.fleet)
        stream.emit(self.r, pool.lab, "worker.started", clock.now(self.r, pool.lab), worker_id=slot.id,
                    pid=slot.proc.pid, fleet=slot.fleet or "")

    def take_spare(self, argv: list[str], env: dict[str, str], nice: int) -> subprocess.Popen | None:
        """A pre-started worker process (workers/spare.py) made into this worker: it runs `rq worker argv`
        in-process at once. None if no spare is ready (then the caller starts one the slow way)."""
        while self.spares:
            proc, token = self.spares.pop(0)
            self.refill_at = time.time() + SPARE_REFILL_S
            if proc.poll() is not None:
                continue
            try:
                with self.r.pipeline(transaction=True) as pipe:
                    pipe.rpush(spare_assignment(token), json.dumps({"argv": argv, "env": env, "nice": nice}))
                    pipe.expire(spare_assignment(token), 60)  # not left behind if the spare died meanwhile
                    pipe.execute()
            except redis.RedisError:
                proc.kill()  # it would wait for an assignment that never comes
                proc.wait()
                raise
            return proc
        return None

    def keep_spares(self) -> None:
        """Top the host's pre-started workers back up to SPARE_WORKERS, SPARE_REFILL_S after the last was
        taken: a burst of new labs (a class opening a chapter) is not slowed by the loading of their
        replacements. A spare loads at nice 19 where this host may give it back a lab's priority on
        assignment (root or CAP_SYS_NICE), else at the lowest lab level."""
        self.spares = [(p, token) for p, token in self.spares if p.poll() is None]
        if time.time() < self.refill_at:
            return
        env = dict(os.environ, REDIS_URL=self.config.redis_url, VAR_DIR=str(self.config.var_dir))
        nice = 19 if self.can_renice else max(0, min(19, self.config.lab_nice))
        while self.running and len(self.spares) < self.config.spare_workers:
            token = secrets.token_hex(8)  # its own list to wait on (a pid may be reused)
            self.spares.append((subprocess.Popen(
                [sys.executable, "-m", "workers.spare", "--url", self.config.redis_url, "--token", token], env=env,
                stdin=subprocess.DEVNULL, preexec_fn=lambda: start_lab_process(nice)), token))

    @staticmethod
    def fleet_of(pool: LabPool, slot: Slot, settings: dict) -> str | None:
        """Chapter 6's full separation gives the first `pro_workers` workers (by id) to pro alone."""
        live = sorted((s for s in pool.slots.values() if s.state != "draining"), key=lambda s: int(s.id[1:]))
        return fairness.fleet_of(settings, live.index(slot) if slot in live else len(live))

    def write_row(self, pool: LabPool, slot: Slot, **extra) -> None:
        raw = self.r.hget(key(pool.lab, "workers"), slot.id)
        row = json.loads(raw) if raw else {"id": slot.id}
        row.update({"id": slot.id, "state": slot.state, "host": self.host.id,
                    "pid": slot.proc.pid if slot.proc and slot.state not in ("dead", "respawning") else None},
                   **extra)
        self.r.hset(key(pool.lab, "workers"), slot.id, json.dumps(row))

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
        stream.emit(self.r, lab, event, now, worker_id=slot.id, pid=slot.proc.pid,
                    job_id=row.get("job_id"))
        if row.get("job_id") and row.get("attempt"):
            clock.lift(self.r, lab, f"{row['job_id']}:{row['attempt']}")  # the clock never waits for the dead
            # Ack early: the message was deleted on claim, so no lease will bring it back.
            reaper.mark_lost(self.r, lab, row["job_id"], int(row["attempt"]), slot.id, now)
        self.sweep_tmp(lab, f"{registry.TMP_PREFIX}{slot.id}-*")  # its killed attempt's partial outputs
        slot.state = "dead"
        slot.respawn_at = now + float(settings["respawn_delay"])  # on the lab's clock, as every delay
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
        self.write_row(pool, slot, job_id=None)
        stream.emit(self.r, pool.lab, "worker.booting", now, worker_id=slot.id, lag=settings["boot_lag"])

    # --- reconcile --------------------------------------------------------------------------
    def reconcile(self, pool: LabPool, settings: dict) -> None:
        """Make the pool match `workers`; scale-in drains (or kills, if the learner chose that)."""
        live = [s for s in pool.slots.values() if s.state != "draining"]
        want = int(settings["workers"])
        nice = lab_nice(self.config, settings)
        if pool.nice is not None and nice != pool.nice:
            pool.nice = nice
            renice([p for s in pool.slots.values() if s.proc and s.proc.poll() is None
                    for p in (s.proc.pid, self.row(pool, s).get("horse_pid")) if p], nice)
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
        pool.reconciled = True
        self.rewire(pool, settings)
        for slot in sorted(live, key=lambda s: int(s.id[1:]), reverse=True)[: max(0, len(live) - want)]:
            if slot.state == "booting":  # never started: nothing to drain
                slot.state = "draining"
            elif settings["scale_in"] == "kill" and slot.state not in ("dead", "respawning"):
                self.kill(pool, slot)
                slot.state = "draining"
            elif slot.proc and slot.proc.poll() is None and slot.state not in ("dead", "respawning"):
                slot.proc.terminate()  # RQ warm shutdown: finish the current job, take no more
                slot.state = "draining"
                self.write_row(pool, slot)
                stream.emit(self.r, pool.lab, "worker.draining", clock.now(self.r, pool.lab),
                            worker_id=slot.id)
            else:
                slot.state = "draining"
        for slot in list(pool.slots.values()):
            self.check_process(pool, slot)

    def rewire(self, pool: LabPool, settings: dict) -> None:
        """A worker whose fleet changed (full separation switched on or off, or the pro share moved)
        listens to the wrong queues: stop it warm (its job finishes) and start it again on the right ones."""
        for slot in pool.slots.values():
            if slot.state in ("idle", "busy") and slot.proc is not None and slot.proc.poll() is None \
                    and (fleet := self.fleet_of(pool, slot, settings)) != slot.fleet:
                slot.proc.terminate()
                slot.state = "rewiring"
                self.write_row(pool, slot)
                stream.emit(self.r, pool.lab, "worker.rewiring", clock.now(self.r, pool.lab), worker_id=slot.id,
                            fleet=f"{fleet} only" if fleet else "every tier")

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
                del pool.slots[slot.id]
                self.r.hdel(key(pool.lab, "workers"), slot.id)
                stream.emit(self.r, pool.lab, "worker.stopped", clock.now(self.r, pool.lab),
                            worker_id=slot.id)
            return
        if slot.state == "booting":
            if clock.now(self.r, pool.lab) >= slot.respawn_at:
                self.spawn(pool, slot)
            return
        if slot.state in ("dead", "respawning"):
            if slot.state == "dead" and clock.now(self.r, pool.lab) >= slot.respawn_at:
                slot.state = "respawning"
                self.write_row(pool, slot)
                stream.emit(self.r, pool.lab, "worker.respawning", clock.now(self.r, pool.lab),
                            worker_id=slot.id)
            elif slot.state == "respawning":
                self.spawn(pool, slot)
            return
        if slot.proc is not None and slot.proc.poll() is not None:
            self.after_death(pool, slot, self.row(pool, slot), "worker.died")

    # --- broker duties ----------------------------------------------------------------------
    def broker_tick(self, pool: LabPool, settings: dict) -> dict:
        """The lab's broker duties due now; returns the clock as read at their start."""
        lab = pool.lab
        clock.lift_dead(self.r, lab)  # a killed worker's barriers: the clock never waits for the dead
        state = clock.read(self.r, lab)
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
        moved += loadgen.tick(self.r, self.rq, lab, now, self.config.lab_job_rate)
        autoscale.tick(self.r, lab, now, settings, self.config.max_workers)
        reaper.dispatch(self.r, self.rq, lab, older_than=None if moved else time.time() - 2)
        if not state["paused"]:
            fairness.tick(self.r, self.rq, lab, settings, now)
        if time.time() - pool.handoffs_swept > 1:
            pool.handoffs_swept = time.time()
            reaper.resend_lost_handoffs(self.r, self.rq, lab, now)
            self.sweep_departed(pool)
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
        nxt = [s for k in ("leases", "scheduled")
               for _m, s in self.r.zrange(key(lab, k), 0, 0, withscores=True)]
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

    def command(self, raw: str) -> None:
        """A kill or replica command for a lab this host owns (app/pool.py routes it to the owner)."""
        cmd = json.loads(raw)
        if float(cmd.get("expires") or "inf") < time.time():
            return  # its asker gave up long ago
        pool = self.pools.get(cmd.get("lab"))
        if pool is None and cmd.get("lab") and registry.exists(self.r, cmd["lab"]):
            holder = self.r.get(owner(cmd["lab"]))
            if holder and holder != self.host.id:
                self.r.rpush(host_commands(holder), raw)  # the lab moved on: forward it
                return
            if not self.host.leaving:
                self.r.rpush(self.host.commands, raw)  # being placed or adopted here: after the next tick
                self.adopt_soon = True
                return
        if cmd.get("id") and not self.r.set(f"pool:cmd:{cmd['id']}", self.host.id, nx=True, ex=60):
            return  # a copy sent to the lab's previous owner was already carried out
        if pool:
            pool.due_at = 0.0  # a killed worker's respawn, a replica's: looked at in this loop
        result: dict = {"ok": False, "error": "unknown lab"}
        if pool and cmd.get("cmd") == "kill":
            slot = pool.slots.get(cmd.get("worker"))
            result = self.kill(pool, slot) if slot else {"ok": False, "error": "unknown worker"}
        elif pool and cmd.get("cmd") == "kill_replica":
            result = self.fleet.kill(pool.lab, cmd.get("replica"), registry.settings(self.r, pool.lab))
        if cmd.get("reply"):
            self.r.rpush(cmd["reply"], json.dumps(result))
            self.r.expire(cmd["reply"], 30)

    def recycle_workers(self) -> None:
        """After a server outage: SIGKILL every live worker (and horse) so each comes back connected at once."""
        for pool in self.pools.values():
            for slot in list(pool.slots.values()):
                if slot.state in ("idle", "busy") and slot.proc is not None and slot.proc.poll() is None:
                    self.kill(pool, slot)

    def stop_pool(self, pool: LabPool) -> None:
        """Kill the lab's workers with their horses and ffmpeg runs (reconcile.kill_tree): a horse follows its
        worker only once its job has set PR_SET_PDEATHSIG (workers/tasks.py), so a worker killed in the
        moment after the fork would leave its horse running for a lab that is gone."""
        procs = [s.proc for s in pool.slots.values() if s.proc and s.proc.poll() is None]
        reconcile.kill_tree([p.pid for p in procs])
        for proc in procs:
            proc.wait()
        pool.slots.clear()

    def report_running(self) -> None:
        """The processes this host really runs (live workers and scheduler replicas, not what settings ask
        for), for /metrics: written when the count changes and renewed with the host's heartbeat."""
        n = sum(1 for pool in self.pools.values() for s in pool.slots.values() if s.proc and s.proc.poll() is None)
        n += self.fleet.running()
        if (n, self.host.last_beat) != self.reported:
            self.reported = (n, self.host.last_beat)
            self.r.set(host_running(self.host.id), n, px=self.host.lease_ms)

    def sweep_tmp(self, lab: str, pattern: str, older_than: float | None = None) -> int:
        """Remove partial outputs (`transcoded/<job>/.tmp-*`) a killed attempt left; with `older_than`, only
        files untouched that long (no live ffmpeg run lasts past FFMPEG_TIMEOUT). Never counted as usage."""
        removed = 0
        for tmp in (lab_dir(self.config.var_dir, lab) / "transcoded").glob(f"*/{pattern}"):
            try:
                if older_than is None or time.time() - tmp.stat().st_mtime > older_than:
                    tmp.unlink()
                    removed += 1
            except OSError:
                pass
        return removed

    def expire_idle(self) -> None:
        parking.park_idle(self.r, self.config.park_after)  # unwatched labs: tick() then stops their processes
        for lab in self.pools:
            self.sweep_tmp(lab, f"{registry.TMP_PREFIX}*", older_than=self.config.ffmpeg_timeout + 10)
        for lab in list(self.r.smembers(LABS)):
            if lab not in self.mine and self.r.exists(owner(lab)):
                continue  # another host's lab: its owner expires it
            last = self.r.hget(key(lab, "meta"), "last_active")
            if last is None or time.time() - float(last) > self.config.lab_idle_ttl:
                if lab in self.pools:
                    self.stop_pool(self.pools.pop(lab))
                self.fleet.stop(lab)
                registry.teardown(self.r, lab, self.config.var_dir)
        if self.reconciler.due():
            self.reconciler.run()

    def tick(self) -> None:
        """The host's part, once a heartbeat or when the set of labs changes: ownership, labs gone or moved."""
        live = self.r.smembers(LABS)
        parked = parking.parked(self.r)  # parked labs run no process on any host and hold no lease
        self.mine = mine = self.ownership(live - parked)
        for lab in list(self.pools):
            if lab not in live:  # deleted through the API: stop its workers, then sweep what they left
                self.stop_pool(self.pools.pop(lab))
                self.fleet.stop(lab)
                registry.teardown(self.r, lab, self.config.var_dir)
            elif lab not in mine:  # parked, or another host holds its lease now: this one must not run it
                self.let_go(lab)
        for lab in mine:
            if lab not in self.pools:
                self.adopt(lab)  # its first pass is due at once
        self.report_running()

    def lab_pass(self, pool: LabPool) -> None:
        """Everything one lab needs now: its processes, its replicas, its broker duties; then when it is
        due again (see `next_pass`)."""
        lab = pool.lab
        settings = registry.settings(self.r, lab)
        self.reconcile(pool, settings)
        self.fleet.reconcile(lab, settings)
        holding = self.release_branch(lab, settings)
        state = self.broker_tick(pool, settings)
        pool.due_at = time.time() + self.next_pass(pool, settings, state, holding)
        self.refresh_deadlines([pool])

    def next_pass(self, pool: LabPool, settings: dict, state: dict, holding: bool) -> float:
        """Real seconds until the lab's next pass: how a lab becomes due.

        A lab is passed when something that concerns it changes (Waker: its settings, a job, a delivery,
        the load generator, a fault, chapter 6 traffic, a command, a child process exiting), at its
        deadline (a lease runs out, a retry is due, a worker respawns or finishes booting: `deadline`),
        and otherwise only as often as what it runs needs time:
        HOUSEKEEP_S while an engine works on time (the load generator, chapter 6 traffic, the autoscaler,
        chapter 7's replicas, a fault to end, a worker draining or rewiring, the stale-job sweeper with
        a job running, a branch waiting for its workers); MAINTAIN_S while work is in flight (jobs queued,
        retrying or running, deliveries pending, barriers on the clock, a slowed clock to read out), or
        sooner when a barrier's holder would lapse; never (math.inf) when nothing is in flight."""
        lab = pool.lab
        with self.r.pipeline(transaction=False) as pipe:
            pipe.hmget(key(lab, "states"), "queued", "retrying", "running")
            pipe.zcard(key(lab, "dispatch"))
            pipe.hvals(key(lab, "barrier_alive"))
            pipe.hget(key(lab, "loadgen"), "on")
            pipe.hlen(fairness.inflight_key(lab))
            for tier in fairness.TIERS:
                pipe.zcard(fairness.pending_key(lab, tier))
            states, dispatching, alive, loadgen_on, *fair = pipe.execute()
        running = int(states[2] or 0)
        slots = {s.state for s in pool.slots.values()}
        if (loadgen_on == "1" or any(fair) or float(settings.get("arrival_rate", 0)) > 0
                or settings.get("autoscale") or int(settings.get("scheduler_replicas", 0)) > 0
                or lab in self.fleet.fleets or pool.fault_active or holding or slots & {"draining", "rewiring"}
                or (running and settings.get("guard") == "claim" and settings.get("stale_after"))):
            return HOUSEKEEP_S
        if any(int(n or 0) for n in states) or dispatching or alive or pool.reaper_at is not None \
                or state["slowed"]:
            lapse = min((float(u) for u in alive), default=math.inf) - time.time()
            return max(0.0, min(MAINTAIN_S, lapse + 0.01))
        return math.inf

    def refresh_deadlines(self, pools: list[LabPool], changed: dict[str, set[str]] | None = None) -> None:
        """Each lab's next deadline in real time: its earliest lease deadline or due retry, and any worker
        due to respawn or finish booting; one round trip for all of them, reading only the keys that
        `changed` names for a lab (all of them without it).

        Those moments are simulated, so each is turned into real time through its lab's clock. One the
        clock cannot reach yet (paused, or held at a barrier before it) has no real time: the resume or
        the barrier's lift changes the clock, whose notification brings the lab back here."""
        if not pools:
            return
        reads = []
        with self.r.pipeline(transaction=False) as pipe:
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
            moments = [s for _m, s in leases + scheduled]
            moments += [-math.inf if s.state == "respawning" else s.respawn_at
                        for s in pool.slots.values() if s.state in ("dead", "booting", "respawning")]
            out = [0.0 if at <= t else
                   float(state.get("base_real", time.time())) + (at - float(state.get("base_sim", 0))) / speed
                   for at in moments if at <= t or (state.get("paused") != "1" and at <= held)]
            pool.deadline = min(out, default=math.inf)

    # --- pool hosts (workers/hosts.py) ------------------------------------------------------------
    def ownership(self, live: set[str]) -> set[str]:
        """The labs this host runs: those whose lease it holds, after placing the unowned ones."""
        owners = self.host.owners(sorted(live))
        mine = {lab for lab, holder in owners.items() if holder == self.host.id}
        if self.host.due():  # renew first: placement below reads this host's fresh entry
            mine = self.host.renew(sorted(mine))
            demand = sum(int(registry.settings(self.r, lab).get("workers", 0)) for lab in mine)
            self.host.heartbeat(demand, len(mine))
            self.host.last_beat = time.time()
        for lab, holder in owners.items():
            if holder is not None or self.host.leaving:
                continue
            if lab in self.pools and self.host.claim_back(lab):
                mine.add(lab)  # its lease lapsed while the server was away and nobody took it: keep running it
                continue
            demand = int(registry.settings(self.r, lab).get("workers", 0))
            placed = self.host.place(lab, demand)
            if placed == self.host.id:
                mine.add(lab)
            elif placed is None and lab not in self.waiting:
                self.waiting.add(lab)
                stream.emit(self.r, lab, "pool.waiting", clock.now(self.r, lab), workers=demand)
        return mine

    def adopt(self, lab: str) -> LabPool:
        """A lab this host now owns: new, moved from a silent host, or handed over by a stopping one."""
        pool = self.pools[lab] = LabPool(lab)
        self.waiting.discard(lab)
        prev, handed = self.r.hmget(key(lab, "meta"), "host", "handover_from")
        self.r.hset(key(lab, "meta"), "host", self.host.id)
        self.r.hdel(key(lab, "meta"), "handover_from")
        now = clock.now(self.r, lab)
        if prev and prev != self.host.id:
            stream.emit(self.r, lab, "pool.handover" if handed == prev else "pool.host_silent", now,
                        host=self.host.id, from_host=prev)
        elif not prev:
            stream.emit(self.r, lab, "pool.placed", now, host=self.host.id)
        self.sweep_departed(pool)
        return pool

    def sweep_departed(self, pool: LabPool) -> None:
        """Worker rows left by a host that is gone (or by this host's previous life): those workers died
        with it. An ack-early job one of them held is lost, as with any crashed worker; an ack-late one
        comes back when its lease expires. Rows of a live host still draining after a handover stay."""
        rows = self.r.hgetall(key(pool.lab, "workers"))
        if not rows:
            return
        live = hosts.live_hosts(self.r)
        now = clock.now(self.r, pool.lab)
        for wid, raw in rows.items():
            row = json.loads(raw)
            h = row.get("host")
            if wid in pool.slots or (h and h != self.host.id and h in live):
                continue
            if row.get("job_id") and row.get("attempt"):
                reaper.mark_lost(self.r, pool.lab, row["job_id"], int(row["attempt"]), wid, now)
            self.r.hdel(key(pool.lab, "workers"), wid)
            stream.emit(self.r, pool.lab, "worker.lost", now, worker_id=wid, from_host=h or "?")

    def let_go(self, lab: str) -> None:
        """Another host holds this lab's lease (this one was cut off longer than a lease), or the lab is
        parked (core/parking.py): stop its workers now and drop the local cache. An ack-early job one of
        them held is lost, as with any stopped worker; an ack-late one comes back when its lease runs out."""
        pool = self.pools.pop(lab)
        rows = {s.id: self.row(pool, s) for s in pool.slots.values()}
        for row in rows.values():  # a busy worker's work horse too, as kill() does: it must not outlive its worker
            if row.get("horse_pid") and row.get("host") == self.host.id:
                try:
                    os.kill(int(row["horse_pid"]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.stop_pool(pool)
        self.fleet.stop(lab)
        now = clock.now(self.r, lab)
        for wid, row in rows.items():
            if row.get("job_id") and row.get("attempt"):
                reaper.mark_lost(self.r, lab, row["job_id"], int(row["attempt"]), wid, now)
            if row.get("host") == self.host.id:
                self.r.hdel(key(lab, "workers"), wid)
        self.drop_cache(lab)

    def drop_cache(self, lab: str) -> None:
        here = lab_dir(self.config.var_dir, lab)
        shutil.rmtree(here, ignore_errors=True)
        stale = list(self.r.scan_iter(match=f"media:valid:{here}/*", count=500))
        if stale:
            self.r.delete(*stale)

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

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *a: setattr(self, "running", False))
        signal.signal(signal.SIGINT, lambda *a: setattr(self, "running", False))
        webhooks.Deliverer(self.config).start()  # outbound calls off the reaper loop (see workers/webhooks.py)
        waker: Waker | None = None
        last_expiry = next_host = 0.0
        outage = commands = False
        while self.running:
            try:
                if waker is None:  # (re)connected: whatever changed meanwhile went unheard, so look at everything
                    waker = Waker(self.r, self.host.commands)
                    commands, next_host = True, 0.0
                    for pool in self.pools.values():
                        pool.due_at = 0.0
                if outage:  # the server is back: rq workers sit out their own reconnect backoff (up to
                    outage = False  # 60 s), so restart them now; a lease brings back any attempt they held
                    self.recycle_workers()
                while commands and not self.adopt_soon and (raw := self.r.lpop(self.host.commands)) is not None:
                    self.command(raw)
                commands = False
                self.keep_spares()
                if time.time() >= next_host or self.adopt_soon:
                    self.tick()
                    next_host = self.host.last_beat + self.host.beat_every
                    commands, self.adopt_soon = commands or self.adopt_soon, False
                for pool in list(self.pools.values()):
                    if pool.lab in self.pools and min(pool.due_at, pool.deadline) <= time.time():
                        self.lab_pass(pool)
                if time.time() - last_expiry > 5:
                    self.expire_idle()
                    last_expiry = time.time()
                wake = min([next_host, last_expiry + 5, *(min(p.due_at, p.deadline) for p in self.pools.values()),
                            self.refill_at if len(self.spares) < self.config.spare_workers else math.inf])
                changed = waker.wait(wake - time.time() + 0.0002)
                commands = self.host.commands in changed
                if LABS in changed or PARKED in changed:
                    next_host = 0.0  # a new, deleted, parked or resumed lab: place or stop it now
                self.note(changed, waker)
            except redis.exceptions.OutOfMemoryError:
                time.sleep(0.5)  # the server is at its maxmemory: what could not be written is retried next tick
            except redis.ConnectionError:
                outage = True
                time.sleep(0.5)  # the server restarts (the launcher brings it back); keep going
                if waker is not None:
                    waker.close()
                waker = None
        self.shutdown()

    def note(self, changed: set[str], waker: Waker) -> None:
        """Make the labs that a change concerns due: a deadline key refreshes the lab's deadline; a waking
        key brings a lab at rest (not passed on a cadence) back for a pass; new settings are reconciled now."""
        stale: dict[str, LabPool] = {}
        keys: dict[str, set[str]] = {}
        for k in changed:
            parts = k.split(":", 2)
            pool = self.pools.get(parts[1]) if len(parts) == 3 and parts[0] == "lab" else None
            if pool is None:
                continue
            if parts[2] in DEADLINE_KEYS:
                stale[pool.lab] = pool
                keys.setdefault(pool.lab, set()).add(parts[2])
            if parts[2] == "settings" or pool.due_at == math.inf:
                pool.due_at = 0.0
        if waker.child:  # a child exited: the lab whose worker it was looks at it now
            waker.child = False
            for pool in self.pools.values():
                if any(s.proc is not None and s.state in ("idle", "busy") and s.proc.poll() is not None
                       for s in pool.slots.values()):
                    pool.due_at = 0.0
        self.refresh_deadlines(list(stale.values()), keys)

    def shutdown(self) -> None:
        """A graceful stop hands every lab over: this host stops taking labs, releases each lease (a live
        host adopts the lab at its next tick and starts workers), and warm-stops its own workers, which
        finish their current job. One still busy after the grace is killed; its job's lease brings it back."""
        for proc, _token in self.spares:  # no lab yet: nothing to finish
            proc.kill()
            proc.wait()
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
                    row = self.row(pool, slot)
                    if row.get("host") == self.host.id:
                        if row.get("job_id") and row.get("attempt"):  # killed mid-job: as any crash
                            reaper.mark_lost(self.r, pool.lab, row["job_id"], int(row["attempt"]), slot.id,
                                             clock.now(self.r, pool.lab))
                        self.r.hdel(key(pool.lab, "workers"), slot.id)
                        stream.emit(self.r, pool.lab, "worker.stopped", clock.now(self.r, pool.lab),
                                    worker_id=slot.id)
                self.drop_cache(pool.lab)
            self.host.deregister()
        except redis.RedisError:
            pass


def main() -> None:
    Supervisor(Config.from_env()).run()


if __name__ == "__main__":
    main()
