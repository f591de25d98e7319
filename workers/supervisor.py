"""The pool supervisor: real `rq worker` processes per lab, and the broker's clock-driven duties.

It owns process lifecycles (spawn, SIGKILL on *kill worker*, respawn after a delay, drain on
scale-in) and runs the reaper loop (lease expiry → redelivery, due retries, dispatch). Workers
get PR_SET_PDEATHSIG so a supervisor that dies takes its workers with it: no orphans.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from core import clock, registry, stream
from core.config import Config
from core.keys import LABS, POOL_COMMANDS, key, queue_name
from workers.broker import reaper
from workers.engines import autoscale, fairness, loadgen, webhooks
from workers.engines.fleet import SchedulerFleet
from workers.process import die_with_parent

LOOP_S = 0.02  # reaper scan interval: bounds how late past its deadline a lease is redelivered
REAPER_BARRIER_S = 2.0  # real seconds the clock waits for a stalled reaper loop before going on
PACING_WINDOW_S = 3.0  # real seconds over which the clock's achieved speed is measured
RQ_BIN = str(Path(sys.executable).with_name("rq"))


@dataclass
class Slot:
    id: str
    proc: subprocess.Popen | None = None
    state: str = "idle"  # idle|busy (from the worker) · booting · dead · respawning · draining · rewiring
    respawn_at: float = 0.0
    generation: int = 0
    fleet: str | None = None  # the tier this worker alone serves (chapter 6's full separation)


@dataclass
class LabPool:
    lab: str
    slots: dict[str, Slot] = field(default_factory=dict)
    next_id: int = 1
    fault_active: set = field(default_factory=set)
    handoffs_swept: float = 0.0  # real time of the last hand-off sweep (once a second is plenty)
    reconciled: bool = False  # after the first pass, added workers pay the boot lag
    pacing: list = field(default_factory=list)  # (real, simulated) samples: the clock's achieved speed
    reaper_at: float | None = None  # where this loop's barrier on the lab's clock stands


class Supervisor:
    def __init__(self, config: Config):
        self.config = config
        self.r = redis.Redis.from_url(config.redis_url, decode_responses=True)
        self.rq = redis.Redis.from_url(config.redis_url)
        self.pools: dict[str, LabPool] = {}
        self.fleet = SchedulerFleet(self.r, config.redis_url)  # chapter 7's scheduler replicas
        self.running = True

    # --- processes ------------------------------------------------------------------------
    def spawn(self, pool: LabPool, slot: Slot) -> None:
        slot.generation += 1
        slot.fleet = self.fleet_of(pool, slot, registry.settings(self.r, pool.lab))
        name = f"{queue_name(pool.lab)}-{slot.id}-{slot.generation}-{os.getpid()}"
        env = dict(os.environ, LAB_WORKER_ID=slot.id, REDIS_URL=self.config.redis_url,
                   VAR_DIR=str(self.config.var_dir))
        queues = [fairness.tier_queue_name(pool.lab, slot.fleet)] if slot.fleet else []
        slot.proc = subprocess.Popen(
            [RQ_BIN, "worker", "--url", self.config.redis_url, "--name", name, "--quiet",
             "--worker-class", "workers.rqworker.LabWorker",
             "--logging_level", "WARNING", "--worker-ttl", "60", *queues, queue_name(pool.lab)],
            env=env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        slot.state = "idle"
        self.write_row(pool, slot, job_id=None, fleet=slot.fleet)
        stream.emit(self.r, pool.lab, "worker.started", clock.now(self.r, pool.lab), worker_id=slot.id,
                    pid=slot.proc.pid, fleet=slot.fleet or "")

    @staticmethod
    def fleet_of(pool: LabPool, slot: Slot, settings: dict) -> str | None:
        """Chapter 6's full separation gives the first `pro_workers` workers (by id) to pro alone."""
        live = sorted((s for s in pool.slots.values() if s.state != "draining"), key=lambda s: int(s.id[1:]))
        return fairness.fleet_of(settings, live.index(slot) if slot in live else len(live))

    def write_row(self, pool: LabPool, slot: Slot, **extra) -> None:
        raw = self.r.hget(key(pool.lab, "workers"), slot.id)
        row = json.loads(raw) if raw else {"id": slot.id}
        row.update({"id": slot.id, "state": slot.state,
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
        slot.state = "dead"
        speed = max(float(settings.get("speed", 20)), 1e-9)
        slot.respawn_at = time.time() + settings["respawn_delay"] / speed
        self.write_row(pool, slot, job_id=None, attempt=None, horse_pid=None, progress=None)

    def boot_later(self, pool: LabPool, slot: Slot, settings: dict) -> None:
        """A worker added to a running pool is useful only after its boot lag (image pull, start-up,
        health check): hold it in `booting` and start the real process when the lag is over."""
        slot.state = "booting"
        slot.respawn_at = time.time() + settings["boot_lag"] / max(float(settings.get("speed", 20)), 1e-9)
        self.write_row(pool, slot, job_id=None)
        stream.emit(self.r, pool.lab, "worker.booting", clock.now(self.r, pool.lab), worker_id=slot.id,
                    lag=settings["boot_lag"])

    # --- reconcile --------------------------------------------------------------------------
    def reconcile(self, pool: LabPool, settings: dict) -> None:
        """Make the pool match `workers`; scale-in drains (or kills, if the learner chose that)."""
        live = [s for s in pool.slots.values() if s.state != "draining"]
        want = int(settings["workers"])
        while len(live) < want:
            slot = Slot(f"w{pool.next_id}")
            pool.next_id += 1
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

    def check_process(self, pool: LabPool, slot: Slot) -> None:
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
            if time.time() >= slot.respawn_at:
                self.spawn(pool, slot)
            return
        if slot.state in ("dead", "respawning"):
            if slot.state == "dead" and time.time() >= slot.respawn_at:
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
        moved += loadgen.tick(self.r, self.rq, lab, now)
        autoscale.tick(self.r, lab, now, settings, self.config.max_workers)
        reaper.dispatch(self.r, self.rq, lab, older_than=None if moved else time.time() - 2)
        if not state["paused"]:
            fairness.tick(self.r, self.rq, lab, settings, now)
        if time.time() - pool.handoffs_swept > 1:
            pool.handoffs_swept = time.time()
            reaper.resend_lost_handoffs(self.r, self.rq, lab, now)
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
        if not state["slowed"] and achieved < 0.9 * asked:
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
        cmd = json.loads(raw)
        pool = self.pools.get(cmd.get("lab"))
        result: dict = {"ok": False, "error": "unknown lab"}
        if pool and cmd.get("cmd") == "kill":
            slot = pool.slots.get(cmd.get("worker"))
            result = self.kill(pool, slot) if slot else {"ok": False, "error": "unknown worker"}
        elif pool and cmd.get("cmd") == "kill_replica":
            result = self.fleet.kill(pool.lab, cmd.get("replica"), registry.settings(self.r, pool.lab))
        if cmd.get("reply"):
            self.r.rpush(cmd["reply"], json.dumps(result))
            self.r.expire(cmd["reply"], 30)

    def stop_pool(self, pool: LabPool) -> None:
        for slot in pool.slots.values():
            if slot.proc and slot.proc.poll() is None:
                slot.proc.kill()
                slot.proc.wait()
        pool.slots.clear()

    def expire_idle(self) -> None:
        for lab in list(self.r.smembers(LABS)):
            last = self.r.hget(key(lab, "meta"), "last_active")
            if last is None or time.time() - float(last) > self.config.lab_idle_ttl:
                if lab in self.pools:
                    self.stop_pool(self.pools.pop(lab))
                self.fleet.stop(lab)
                registry.teardown(self.r, lab, self.config.var_dir)

    def tick(self) -> None:
        live = self.r.smembers(LABS)
        for lab in list(self.pools):
            if lab not in live:  # deleted through the API: stop its workers, then sweep what they left
                self.stop_pool(self.pools.pop(lab))
                self.fleet.stop(lab)
                registry.teardown(self.r, lab, self.config.var_dir)
        for lab in live:
            pool = self.pools.setdefault(lab, LabPool(lab))
            settings = registry.settings(self.r, lab)
            self.reconcile(pool, settings)
            self.fleet.reconcile(lab, settings)
            self.release_branch(lab, settings)
            self.broker_tick(pool, settings)

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
        last_expiry = 0.0
        while self.running:
            try:
                popped = self.r.blpop(POOL_COMMANDS, timeout=LOOP_S)
                if popped:
                    self.command(popped[1])
                self.tick()
                if time.time() - last_expiry > 5:
                    self.expire_idle()
                    last_expiry = time.time()
            except redis.ConnectionError:
                time.sleep(0.5)  # the server restarts; keep the workers, retry
        self.shutdown()

    def shutdown(self) -> None:
        """Warm-stop every worker (finish the current job) briefly, then kill the rest."""
        self.fleet.stop_all()
        procs = [s.proc for p in self.pools.values() for s in p.slots.values()
                 if s.proc and s.proc.poll() is None]
        for p in procs:
            p.terminate()
        deadline = time.time() + 5
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main() -> None:
    Supervisor(Config.from_env()).run()


if __name__ == "__main__":
    main()
