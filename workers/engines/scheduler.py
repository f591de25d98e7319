"""Chapter 7's scheduler replica: one real process running the lab's cron entry on its own clock.

Every replica is the same code, as every API replica runs the same in-process scheduler: at each
tick of its clock it runs the "send the daily digest" task, or first asks the strategy whether it
may. `none` runs everywhere; `lock` is the lesson's SET NX EX lock (losers skip the tick);
`heartbeat` extends that lock while the run lives; `leader` holds a renewed lease and runs every
tick without further locking. A follower looks for the lease every few seconds and, whatever its
loop's lag, at the very moment the lease runs out: it holds the lab clock there (a barrier) until it
has tried, so a dead leader is replaced within its lease, as the lesson says, not a poll later.
A run that starts more than 1.5 intervals after the last one is a catch-up: it also mails the buckets of
the ticks nobody ran. Idempotent mode claims each digest with a conditional write first, so a double run
costs one wasted run and no extra emails. A digest is the one a tick owes a user (tick, user): a repeat
is the same tick's digest mailed again (a second replica's run, a catch-up re-covering a cut run), never
another tick's, whatever sharding or the idempotent switch were when that other tick ran.

Each replica's clock runs `clock_skew·(k−1)/(N−1)` simulated seconds ahead of replica 1's, and it
judges locks by that clock; its scheduler fires `cron_late·(k−1)/(N−1)` s after each tick (the lesson's
late replica, which finds a too-short lock expired while the first run still holds it).
Run: `python -m workers.engines.scheduler <lab> <replica>` (the fleet does).
The face both processes share (state keys, readers, commands) is core/engines/scheduler.py.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time

import redis

from core import clock, registry, stream
from core.challenges import run as runs
from core.engines import shards
from core.engines.scheduler import TASK, clock_offset, cron_key, digest, lease_watch, tick_of
from workers.engines import locks

FOLLOWER_POLL_S = 5.0  # simulated seconds between a follower's tries for the leader lease
# A follower's barrier sits this far (simulated s) past the lease's expiry, so the clock it stops at is past
# the deadline on any float rounding of `lab time + skew`, and the try there finds the lease expired.
WATCH_PAST_S = 1e-3
CATCH_UP_FACTOR = 1.5  # the lesson's rule: a last run older than 1.5 intervals means a tick was missed
SENT_TTL_S = 3600  # real seconds the "digest sent" claims are kept
SLICES = 10  # a run mails its users in this many batches spread over its duration
SETTINGS_EVERY_S = 0.1  # real seconds between re-reads of the lab's settings
# A batch of digests: claim (tick, user) in the sent hash; count an email unless idempotent and claimed before.
_SEND = """
local ticks, emails, claims = KEYS[1], KEYS[2], KEYS[3]
local tick, idempotent, ttl = ARGV[1], ARGV[2], ARGV[3]
local sent, wasted = 0, 0
for i = 4, #ARGV do
  local first = redis.call('HSETNX', claims, ARGV[i], tick)
  if first == 0 and idempotent == '1' then
    wasted = wasted + 1
  else
    sent = sent + 1
    redis.call('HINCRBY', emails, ARGV[i], 1)
  end
end
redis.call('EXPIRE', claims, ttl)
if sent > 0 then redis.call('HINCRBY', ticks, tick .. ':emails', sent) end
if wasted > 0 then redis.call('HINCRBY', ticks, tick .. ':wasted', wasted) end
return {sent, wasted}
"""
# Start of a run, atomically: count it for its tick, note who ran it, and see who else is running.
_START = """
local ticks, running = KEYS[1], KEYS[2]
local tick, runner, entry = ARGV[1], ARGV[2], ARGV[3]
local runs = redis.call('HINCRBY', ticks, tick .. ':runs', 1)
local by = redis.call('HGET', ticks, tick .. ':by')
redis.call('HSET', ticks, tick .. ':by', by and (by .. ',' .. runner) or runner)
local others = {}
for _, rid in ipairs(redis.call('HKEYS', running)) do
  if rid ~= runner then table.insert(others, rid) end
end
redis.call('HSET', running, runner, entry)
if #others > 0 then redis.call('HINCRBY', ticks, tick .. ':overlaps', 1) end
return {runs, table.concat(others, ',')}
"""


def loop_sleep(settings: dict) -> float:
    """About one simulated second per loop, within 4–50 ms of real time."""
    return min(0.05, max(0.004, 1 / max(float(settings.get("speed", 20)), 1e-9)))


class Replica:
    def __init__(self, r: redis.Redis, lab: str, replica: str):
        self.r, self.lab, self.id = r, lab, replica
        self.running = True
        self.run_thread: threading.Thread | None = None
        self.last_tick: int | None = None
        self.leader_until = -math.inf  # my belief, on my clock
        self.next_renew = self.next_try = -math.inf
        self.watch_at: float | None = None  # where (lab clock) my lease-watch barrier stands, if I hold one
        self.watch_refreshed = 0.0  # real time of its last refresh
        self.rq = redis.Redis.from_url(os.environ["REDIS_URL"])  # RQ's side of a challenge job's enqueue: bytes
        self.start_script = r.register_script(_START)
        self.send_script = r.register_script(_SEND)
        self.settings = registry.settings(r, lab)

    # --- clock ------------------------------------------------------------------------------
    def now(self) -> float:
        """This replica's clock: the lab's simulated time plus its own skew."""
        return clock.now(self.r, self.lab) + clock_offset(self.settings, self.id)

    def emit(self, type_: str, **data) -> None:
        stream.emit(self.r, self.lab, type_, clock.now(self.r, self.lab), replica=self.id, **data)

    # --- the loop -------------------------------------------------------------------------
    def loop(self) -> None:
        read_at = 0.0
        while self.running:
            try:
                if time.monotonic() - read_at > SETTINGS_EVERY_S:
                    self.settings, read_at = registry.settings(self.r, self.lab), time.monotonic()
                self.keep_watch()
                self.step()
            except redis.ConnectionError:
                time.sleep(0.5)  # the server restarts: keep the process, try again
            time.sleep(loop_sleep(self.settings))
        self.stop()

    def step(self) -> None:
        lab_now = clock.now(self.r, self.lab)
        now = lab_now + clock_offset(self.settings, self.id)
        self.lead(now)
        tick = tick_of(self.settings, self.id, lab_now)
        if self.last_tick is None or tick < self.last_tick:  # start-up, or the interval was raised: on from here
            self.r.hset(cron_key(self.lab, "seen"), self.id, tick)  # ("starting" until then; a plan waits for it)
            self.last_tick = tick
        elif tick > self.last_tick:
            self.last_tick = tick
            self.on_tick(tick, now)

    def on_tick(self, tick: int, now: float) -> None:
        # Fresh settings for the tick itself: a reset measures from the next tick, and a replica still
        # on the strategy it read a loop ago would record that tick under the old one.
        self.settings = registry.settings(self.r, self.lab)
        if runs.fire(self.r, self.rq, self.lab, tick, self.id, now):  # a challenge's run: the learner's task
            self.r.hset(cron_key(self.lab, "seen"), self.id, tick)  # once fired: the fleet's plan waits for it
            return
        strategy = self.settings["cron_strategy"]
        with self.r.pipeline() as pipe:
            pipe.hsetnx(cron_key(self.lab, "ticks"), f"{tick}:strategy", strategy)  # what this tick measures
            pipe.hset(cron_key(self.lab, "seen"), self.id, tick)
            pipe.execute()
        if self.run_thread and self.run_thread.is_alive():
            self.emit("cron.skipped", tick=tick, reason="its previous run is still going")
            return
        if strategy == "leader":
            if self.leader_until <= now:
                return  # followers do not run scheduled work at all
        elif strategy in ("lock", "heartbeat"):
            got = locks.acquire(self.r, self.lab, TASK, self.id, now, float(self.settings["cron_lock_ttl"]))
            if not got["won"]:
                self.emit(
                    "cron.skipped",
                    tick=tick,
                    reason=f"lock held by {got['holder']}",
                    remaining=round(got["expires"] - now, 3),
                )
                return
            # A replica that reaches the tick after the holder finished and released finds the lock free:
            # the last-run record (the one catch-up keeps) says the tick is done. On the lab's compressed
            # clock a process that lags a quarter of a real second is 45 simulated seconds late.
            last = self.r.hget(cron_key(self.lab, "last_run"), "tick")
            if last is not None and int(last) >= tick:
                locks.release(self.r, self.lab, TASK, self.id)
                self.emit("cron.skipped", tick=tick, reason=f"tick {tick} already ran")
                return
        self.run_thread = threading.Thread(
            target=self.run, args=(tick, strategy, dict(self.settings), now), daemon=True
        )
        self.run_thread.start()

    # --- leader election --------------------------------------------------------------------
    def lead(self, now: float) -> None:
        """Hold, renew (every third of the lease) or try for the leader lease; let it go off strategy."""
        lease = float(self.settings["leader_lease"])
        if self.settings["cron_strategy"] != "leader":
            self.watch(None)
            if self.leader_until > -math.inf:
                locks.release(self.r, self.lab, "leader", self.id)
                self.leader_until = -math.inf
            return
        if self.leader_until > now:
            if now >= self.next_renew:
                holder = locks.extend(self.r, self.lab, "leader", self.id, now, lease)
                if holder is None:
                    self.leader_until, self.next_renew = now + lease, now + lease / 3
                else:
                    self.leader_until = -math.inf
                    self.emit("leader.lost", holder=holder or "nobody")
            return
        if now < self.next_try:
            return
        got = locks.acquire(self.r, self.lab, "leader", self.id, now, lease)
        # lost: look again in a poll (a graceful leader lets go early), and at the lease's end at the latest
        self.next_try = now + FOLLOWER_POLL_S if got["won"] else min(now + FOLLOWER_POLL_S, got["expires"])
        self.watch(None if got["won"] else got["expires"])
        if got["won"]:
            self.leader_until, self.next_renew = got["expires"], now + lease / 3
            self.emit(
                "leader.elected",
                lease=lease,
                previous=got["previous"] or "none",
                vacant=round(max(0.0, now - got["previous_expires"]), 3) if got["previous"] else 0,
            )
            if got["previous"] and got["previous"] != self.id:
                self.record_failover(got["previous"], lease)

    def watch(self, expires: float | None) -> None:
        """Hold the lab clock at the lease's expiry (`expires`, on my clock) until I have tried for it; None
        lifts the barrier (I lead, or the strategy has no lease)."""
        if expires is None:
            if self.watch_at is not None:
                clock.lift(self.r, self.lab, lease_watch(self.id))
                self.watch_at = None
            return
        at = expires - clock_offset(self.settings, self.id) + WATCH_PAST_S
        if at != self.watch_at:
            clock.hold(self.r, self.lab, lease_watch(self.id), at)
            self.watch_at, self.watch_refreshed = at, time.monotonic()

    def keep_watch(self) -> None:
        """Refresh my barrier while I live (the supervisor lifts a silent holder's), or place it again if it lapsed."""
        if self.watch_at is None or time.monotonic() - self.watch_refreshed < clock.BARRIER_TTL / 3:
            return
        self.watch_refreshed = time.monotonic()
        if not clock.refresh(self.r, self.lab, lease_watch(self.id)):
            clock.hold(self.r, self.lab, lease_watch(self.id), self.watch_at)

    def record_failover(self, previous: str, lease: float) -> None:
        """How long the schedule had no leader: from the old leader's SIGKILL (if it was killed) to now."""
        t = clock.now(self.r, self.lab)
        killed = self.r.hget(cron_key(self.lab, "killed"), previous)
        row = {
            "from": previous,
            "to": self.id,
            "t": round(t, 3),
            "lease": lease,
            "gap_s": round(t - float(killed), 3) if killed is not None else None,
        }
        with self.r.pipeline() as pipe:
            pipe.lpush(cron_key(self.lab, "failovers"), json.dumps(row))
            pipe.ltrim(cron_key(self.lab, "failovers"), 0, 19)
            pipe.hdel(cron_key(self.lab, "killed"), previous)
            pipe.execute()

    # --- one run of the task ----------------------------------------------------------------
    def run(self, tick: int, strategy: str, s: dict, start: float) -> None:
        """The task, from `start` (when the tick fired and the lock, if any, was taken) to start + duration."""
        r, lab = self.r, self.lab
        ticks = cron_key(lab, "ticks")
        runs, others = self.start_script(
            keys=[ticks, cron_key(lab, "running")], args=[tick, self.id, json.dumps({"tick": tick, "since": start})]
        )
        slow = r.getdel(cron_key(lab, "slow_next"))
        duration = float(slow) if slow else float(s["cron_task_s"])
        interval, buckets = float(s["cron_interval"]), int(s["shard_buckets"])
        # The lesson's rule, on scheduled times (tick × interval): a run that got going a little late
        # under load is not a missed tick; a last run more than 1.5 intervals back is.
        last = r.hgetall(cron_key(lab, "last_run"))
        ago = (tick - int(last["tick"])) * interval if last else 0.0
        catch_up = ago > CATCH_UP_FACTOR * interval
        covers = [tick]
        if catch_up:
            r.hincrby(ticks, f"{tick}:catch_up", 1)
            # the missed ticks' buckets, at most one day back (older digests are not worth sending late)
            missed = range(max(int(last["tick"]) + 1, tick - buckets + 1), tick)
            self.emit(
                "cron.catch_up" if s["cron_catch_up"] else "cron.missed",
                tick=tick,
                ago=round(ago, 3),
                factor=CATCH_UP_FACTOR,
                missed=tick - int(last["tick"]) - 1,
                covered=len(missed) if s["cron_catch_up"] else 0,
            )
            if s["cron_catch_up"]:
                covers = [*missed, tick]
        self.emit(
            "cron.run_started",
            tick=tick,
            strategy=strategy,
            duration=duration,
            run=int(runs),
            catch=" — a catch-up run" if catch_up else (" — AGAIN" if int(runs) > 1 else ""),
        )
        if others:
            self.emit("cron.overlap", tick=tick, others=others)
        everyone = shards.users(int(s["cron_users"]))
        due = [(t, u) for t in covers for u in shards.due_users(t, everyone, buckets, bool(s["cron_shard"]))]
        sent = wasted = 0
        lost_lock = False
        ttl, beat_at = float(s["cron_lock_ttl"]), start + float(s["cron_lock_ttl"]) / 3
        batches = [due[i::SLICES] for i in range(SLICES)] if due else []
        for i in range(len(batches) + 1):
            until = start + duration * (i + 1) / (len(batches) + 1)
            while self.running and self.now() < until:
                if strategy == "heartbeat" and not lost_lock and self.now() >= beat_at:
                    beat_at = self.now() + ttl / 3
                    holder = locks.extend(r, lab, TASK, self.id, self.now(), ttl)
                    if holder is not None:
                        lost_lock = True
                        self.emit("cron.lock_lost", tick=tick, holder=holder or "nobody")
                time.sleep(loop_sleep(s))
            if not self.running:
                return
            if i < len(batches) and batches[i]:
                n_sent, n_wasted = self.send_digests(tick, batches[i], bool(s["cron_idempotent"]))
                sent, wasted = sent + n_sent, wasted + n_wasted
        self.finish(tick, strategy, s, start, sent, wasted)

    def send_digests(self, tick: int, due: list[tuple[int, int]], idempotent: bool) -> tuple[int, int]:
        """Mail each (tick, user) the digest that tick owes them, in one atomic step; when idempotent, a
        digest already claimed (that tick's, for that user) is skipped (wasted work, no email).

        Keyed by the tick, not the day: a day that began unsharded mailed everyone on its first tick, and a
        catch-up after sharding was switched on owes each missed bucket its own digest, not a repeat of
        that one."""
        args = [tick, int(idempotent), SENT_TTL_S, *(digest(t, u) for t, u in due)]
        sent, wasted = self.send_script(
            keys=[cron_key(self.lab, "ticks"), cron_key(self.lab, "emails"), cron_key(self.lab, "sent")], args=args
        )
        return int(sent), int(wasted)

    def finish(self, tick: int, strategy: str, s: dict, start: float, sent: int, wasted: int) -> None:
        r, lab = self.r, self.lab
        # Recorded before the lock is let go, so whoever takes it next knows this tick is done. Set once
        # the run is done (a run that crashed is then caught up), to the tick it ran for, not the time
        # it ended: a long task must not hide a missed tick, nor a slow old run rewind the record.
        r.hdel(cron_key(lab, "running"), self.id)
        last = r.hget(cron_key(lab, "last_run"), "tick")
        if last is None or int(last) < tick:
            r.hset(cron_key(lab, "last_run"), mapping={"t": start, "tick": tick})
        if strategy in ("lock", "heartbeat"):
            holder = locks.release(r, lab, TASK, self.id, s["cron_release"])
            if holder and holder != self.id:
                self.emit(
                    "cron.foreign_release" if s["cron_release"] == "delete" else "cron.release_refused",
                    tick=tick,
                    holder=holder,
                )
        self.emit("cron.run_finished", tick=tick, emails=sent, wasted=wasted)

    def stop(self) -> None:
        """Graceful stop (scale-in, SIGTERM): let go of the leader lease (and my watch on it). A crash
        (SIGKILL) does not: the fleet lifts a killed replica's barrier, the supervisor a silent one's."""
        self.watch(None)
        if self.leader_until > -math.inf:
            locks.release(self.r, self.lab, "leader", self.id)


def main(argv: list[str]) -> None:
    lab, replica = argv[0], argv[1]
    r = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
    rep = Replica(r, lab, replica)
    signal.signal(signal.SIGTERM, lambda *a: setattr(rep, "running", False))
    rep.loop()


if __name__ == "__main__":
    main(sys.argv[1:])
