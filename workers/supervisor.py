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
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from core import clock, parking, registry, stream
from core.config import Config
from core.keys import LABS, host_commands, host_running, key, owner, queue_name, spare_assignment
from workers import hosts, reconcile
from workers.broker import reaper
from workers.engines import autoscale, fairness, loadgen, webhooks
from workers.engines.fleet import SchedulerFleet
from workers.process import die_with_parent

LOOP_S = 0.02  # fallback scan interval when the server refuses keyspace notifications (see Waker)
REAPER_BARRIER_S = 2.0  # real seconds the clock waits for a stalled reaper loop before going on
PACING_WINDOW_S = 3.0  # real seconds over which the clock's achieved speed is measured
HOUSEKEEP_S = 0.1  # process checks and the chapter engines (load generator, fairness, autoscale)
IDLE_S = 1.0  # with no lab at all, nothing is due: wake only for a command or a new lab
SPARE_REFILL_S = 2.0  # real seconds after a spare worker was taken before the host starts replacements
STOP_GRACE_S = 2.0  # real seconds a warm-stopped worker holding no job may take to exit before it is killed
WATCHED = ("leases", "scheduled", "clock", "settings")  # per-lab keys whose change can move a deadline
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
    """How the supervisor sleeps: until the next lease deadline or due retry of any lab, or until a
    change that can move one, never on a fixed poll.

    Changes arrive as Redis keyspace notifications (`notify-keyspace-events`, switched on here), so
    the code that claims, extends or ends a lease needs no extra call: a ZADD to `lab:*:leases`, a
    new retry in `lab:*:scheduled`, a clock or settings change, a new lab, or a command pushed to
    this pool host's command list wakes the loop at once. The timeout is computed from the deadline in real time and
    enforced by the client's own `select` (a server-side BLPOP timeout rounds up to the server's
    100 ms cron on an idle server). A server that refuses CONFIG SET falls back to a 20 ms poll.
    """

    def __init__(self, r: redis.Redis, commands: str):
        self.r = r
        self.ps = None
        try:
            flags = r.config_get("notify-keyspace-events").get("notify-keyspace-events", "")
            want = set(flags) | set("Kzls$h")
            r.config_set("notify-keyspace-events", "".join(sorted(want)))
            ps = r.pubsub(ignore_subscribe_messages=True)
            db = r.connection_pool.connection_kwargs.get("db", 0)
            ps.psubscribe(f"__keyspace@{db}__:{commands}", f"__keyspace@{db}__:{LABS}",
                          *(f"__keyspace@{db}__:lab:*:{k}" for k in WATCHED))
            self.ps = ps
        except redis.ResponseError:
            self.ps = None

    def wait(self, timeout: float) -> set[str]:
        """Sleep up to `timeout` s; the keys that changed meanwhile (empty: the timeout passed)."""
        if self.ps is None:
            time.sleep(min(timeout, LOOP_S))
            return set()
        changed: set[str] = set()
        msg = self.ps.get_message(timeout=max(0.0, timeout))
        while msg:
            if msg.get("type") == "pmessage":
                changed.add(msg["channel"].split(":", 1)[1])
            msg = self.ps.get_message(timeout=0)
        return changed


def next_deadline(r: redis.Redis, labs: list[str]) -> dict[str, float]:
    """Per lab, the real time (time.time()) of its earliest lease deadline or due retry; one round trip."""
    if not labs:
        return {}
    with r.pipeline(transaction=False) as pipe:
        for lab in labs:
            pipe.hgetall(key(lab, "clock"))
            pipe.zrange(key(lab, "leases"), 0, 0, withscores=True)
            pipe.zrange(key(lab, "scheduled"), 0, 0, withscores=True)
        res = pipe.execute()
    out = {}
    for i, lab in enumerate(labs):
        state, leases, scheduled = res[3 * i: 3 * i + 3]
        due = [score for _m, score in (leases + scheduled)]
        if not due or state.get("paused") == "1":
            continue
        base_sim = float(state.get("base_sim", 0))
        base_real = float(state.get("base_real", time.time()))
        speed = max(float(state.get("speed", 20)), 1e-9)
        out[lab] = base_real + (min(due) - base_sim) / speed
    return out


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
    def broker_tick(self, pool: LabPool, settings: dict) -> None:
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
                self.r.rpush(self.host.commands, raw)  # being placed or adopted here: after this tick
                return
        if cmd.get("id") and not self.r.set(f"pool:cmd:{cmd['id']}", self.host.id, nx=True, ex=60):
            return  # a copy sent to the lab's previous owner was already carried out
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
        for tmp in (registry.lab_dir(self.config.var_dir, lab) / "transcoded").glob(f"*/{pattern}"):
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
        self.keep_spares()
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
            pool = self.pools.get(lab) or self.adopt(lab)
            settings = registry.settings(self.r, lab)
            self.reconcile(pool, settings)
            self.fleet.reconcile(lab, settings)
            self.release_branch(lab, settings)
            self.broker_tick(pool, settings)
        self.report_running()

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
        lab_dir = registry.lab_dir(self.config.var_dir, lab)
        shutil.rmtree(lab_dir, ignore_errors=True)
        stale = list(self.r.scan_iter(match=f"media:valid:{lab_dir}/*", count=500))
        if stale:
            self.r.delete(*stale)

    def release_branch(self, lab: str, settings: dict) -> None:
        """A branch (app/branch.py) starts paused; its clock runs once its workers are taking jobs."""
        if self.r.hget(key(lab, "meta"), "hold_until_ready") and \
                self.r.scard(f"rq:workers:{queue_name(lab)}") >= int(settings["workers"]):
            self.r.hdel(key(lab, "meta"), "hold_until_ready")
            stream.emit(self.r, lab, "clock.resumed", clock.resume(self.r, lab))

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *a: setattr(self, "running", False))
        signal.signal(signal.SIGINT, lambda *a: setattr(self, "running", False))
        webhooks.Deliverer(self.config).start()  # outbound calls off the reaper loop (see workers/webhooks.py)
        waker: Waker | None = None
        last_expiry = next_full = 0.0
        outage = False
        deadlines: dict[str, float] = {}
        while self.running:
            try:
                waker = waker or Waker(self.r, self.host.commands)
                if outage:  # the server is back: rq workers sit out their own reconnect backoff (up to
                    outage = False  # 60 s), so restart them now; a lease brings back any attempt they held
                    self.recycle_workers()
                while (raw := self.r.lpop(self.host.commands)) is not None:
                    self.command(raw)
                now = time.time()
                due = [lab for lab, t in deadlines.items() if t <= now and lab in self.pools]
                if now >= next_full or any(t <= now for t in self.slot_timers()):
                    self.tick()
                    next_full = now + HOUSEKEEP_S
                else:
                    for lab in due:  # a deadline passed between two housekeeping ticks: just the broker
                        pool = self.pools[lab]
                        self.broker_tick(pool, registry.settings(self.r, lab))
                if time.time() - last_expiry > 5:
                    self.expire_idle()
                    last_expiry = time.time()
                deadlines = next_deadline(self.r, list(self.pools))
                wake = min([next_full if self.pools else time.time() + IDLE_S, *deadlines.values(),
                            *self.slot_timers()])
                changed = waker.wait(wake - time.time() + 0.0002)
                if any(k == LABS or k.endswith((":settings", ":clock")) for k in changed):
                    next_full = 0.0  # a new lab, new settings or a clock change: reconcile now
            except redis.exceptions.OutOfMemoryError:
                time.sleep(0.5)  # the server is at its maxmemory: what could not be written is retried next tick
            except redis.ConnectionError:
                outage = True
                time.sleep(0.5)  # the server restarts (the launcher brings it back); keep going
                waker = None
        self.shutdown()

    def slot_timers(self) -> list[float]:
        """Real times a worker is due to respawn or finish booting.

        Those moments are simulated (Slot.respawn_at), so each is turned into real time through its lab's
        clock. One the clock cannot reach yet (paused, or held at a barrier before it) has no real time:
        the resume or the barrier's lift changes the clock, whose notification wakes the loop."""
        out: list[float] = []
        for pool in self.pools.values():
            waiting = [s for s in pool.slots.values() if s.state in ("dead", "booting", "respawning")]
            if not waiting:
                continue
            state = self.r.hgetall(key(pool.lab, "clock"))
            t = clock._now(state)
            barrier = state.get("barrier")
            speed = max(float(state.get("speed", 20)), 1e-9)
            for slot in waiting:
                if slot.state == "respawning" or t >= slot.respawn_at:
                    out.append(0.0)
                elif state.get("paused") == "1" or (barrier not in (None, "") and slot.respawn_at > float(barrier)):
                    continue
                else:
                    out.append(float(state.get("base_real", time.time()))
                               + (slot.respawn_at - float(state.get("base_sim", 0))) / speed)
        return out

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
