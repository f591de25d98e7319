"""One supervisor pass over a busy lab, on the real server: what it costs and what it still does.

A pass used to read key by key (the clock four to six times, settings twice, every sorted set's head and due
members one by one, the barriers' expiries twice) and to rewrite the reaper's barrier each second: about 30
commands in about 20 round trips, once a second per busy lab. These drive `Supervisor.lab_pass` directly, on a
lab whose keys a test writes (the races with real workers are covered by test_delivery, test_handoff and
test_lifecycle), and count with the server's own per-client counter (`tot-cmds`) and the requests the pass's
connections send (a pipeline is one).
"""

from __future__ import annotations

import json
import math
import time
import uuid

import pytest
import redis

import chapters
from core import clock
from core.broker import handoff
from core.config import MAINTAIN_S, TIED_LOOK_S, Config
from core.keys import job, key, msg, queue_name
from core.procs import wait
from tests.helpers import commands_run, round_trips
from workers.pool import LabPool
from workers.supervisor import Supervisor


class Counted:
    """The commands (the server's count) and round trips (requests sent) of a supervisor's connections."""

    def __init__(self, r: redis.Redis, sup: Supervisor, monkeypatch):
        self.r, self.sup = r, sup
        self.trips = round_trips(monkeypatch, sup.r, sup.rq)

    def commands(self) -> int:
        addrs = {
            "{}:{}".format(*c._sock.getsockname()[:2])
            for pool in (self.sup.r.connection_pool, self.sup.rq.connection_pool)
            for c in pool._available_connections
            if c._sock is not None
        }
        return commands_run(self.r, addr=addrs)

    def one_pass(self, pool: LabPool) -> tuple[int, int]:
        """Commands and round trips of one pass."""
        before, trips = self.commands(), self.trips()
        self.sup.lab_pass(pool)
        return self.commands() - before, self.trips() - trips


@pytest.fixture
def busy(r, redis_server, tmp_path, monkeypatch):
    """A chapter 1 lab with its clock at 20× and job 1 running under a lease, as a busy lab is between two
    events (no worker processes: `workers` 0, so the pass starts none); its supervisor, not running its loop."""
    lab = f"tpass{uuid.uuid4().hex[:8]}"
    r.set(key(lab, "settings"), json.dumps({**chapters.settings_for("ch1"), "workers": 0}))
    sup = Supervisor(Config(redis_url=redis_server.url, pool_host_id=f"t-{lab}", var_dir=tmp_path))
    pool = sup.pools[lab] = LabPool(lab)
    sup.rq.ping()  # its connection's handshake, made once per process, is not a pass's
    # the clock starts once the supervisor is made (a busy box may take seconds to make it): the lease and the
    # barrier are then as far ahead as the tests take them to be
    clock.start(r, lab, speed=20)
    lease(r, lab, "1", clock.now(r, lab) + 200)  # 10 real seconds ahead
    clock.hold(r, lab, "1:1", clock.now(r, lab) + 100)  # its paced attempt's barrier, alive for 5 s
    yield r, lab, sup, pool, Counted(r, sup, monkeypatch)
    sup.r.close()
    sup.rq.close()
    keys = list(r.scan_iter(match=f"lab:{lab}:*")) + list(r.scan_iter(match=f"*{queue_name(lab)}*"))
    if keys:
        r.delete(*keys)


def lease(r: redis.Redis, lab: str, job_id: str, deadline: float) -> None:
    r.hset(job(lab, job_id), mapping={"id": job_id, "state": "running", "holder": 1, "attempt": 1})
    r.hset(msg(lab, job_id), mapping={"state": "inflight", "receives": 1, "base": 0})
    r.zadd(key(lab, "leases"), {job_id: deadline})
    r.hincrby(key(lab, "states"), "running", 1)


def events(r: redis.Redis, lab: str, kind: str) -> list[dict]:
    return [e for _id, f in r.xrange(key(lab, "events")) if (e := json.loads(f["e"]))["type"] == kind]


def test_a_pass_with_nothing_due_reads_once_writes_nothing_and_is_not_due_again_within_a_second(busy):
    r, lab, sup, pool, count = busy
    sup.lab_pass(pool)  # the first pass puts the reaper's barrier at the lease deadline
    assert r.zscore(key(lab, "barriers"), "reaper") == pytest.approx(float(r.zscore(key(lab, "leases"), "1")))
    held = (
        r.zrange(key(lab, "barriers"), 0, -1, withscores=True),
        r.hgetall(key(lab, "barrier_alive")),
        r.hgetall(key(lab, "clock")),
    )
    commands, trips = count.one_pass(pool)
    assert trips == 1, f"a pass with nothing due took {trips} round trips"
    assert commands <= 13, f"a pass with nothing due ran {commands} commands"
    assert (
        r.zrange(key(lab, "barriers"), 0, -1, withscores=True),
        r.hgetall(key(lab, "barrier_alive")),
        r.hgetall(key(lab, "clock")),
    ) == held, "a pass with nothing due rewrote the barriers or the clock"
    # nothing falls due for seconds: the lease runs out 10 s from now, the attempt's barrier lapses in 5
    assert min(pool.due_at, pool.deadline) > time.time() + MAINTAIN_S, (
        "a lab with nothing due is passed again within a second"
    )


def test_a_pass_redelivers_a_lease_at_its_deadline_and_moves_the_reaper_barrier_to_the_next(busy):
    r, lab, sup, pool, count = busy
    sup.lab_pass(pool)
    due = clock.now(r, lab) + 40  # two real seconds ahead
    lease(r, lab, "2", due)
    sup.lab_pass(pool)  # before its deadline: nothing happens to it, and the reaper's barrier goes there
    assert r.hget(msg(lab, "2"), "state") == "inflight"
    assert r.zscore(key(lab, "barriers"), "reaper") == pytest.approx(due)
    wait(lambda: clock.now(r, lab) >= due, 10, "the clock never reached the lease deadline")
    assert clock.now(r, lab) == pytest.approx(due), "the clock passed the lease deadline before the reaper acted"
    commands, trips = count.one_pass(pool)
    assert r.hget(msg(lab, "2"), "state") == "pending", "the expired lease was not redelivered"
    [ev] = events(r, lab, "job.redelivered")
    assert ev["job_id"] == "2" and ev["t_sim"] == pytest.approx(due, abs=1e-3), ev
    assert r.llen(f"rq:queue:{queue_name(lab)}") == 1, "the redelivery was not sent to RQ"
    assert r.zscore(key(lab, "barriers"), "reaper") == pytest.approx(float(r.zscore(key(lab, "leases"), "1"))), (
        "the reaper's barrier did not move on to the next lease deadline"
    )
    assert trips <= 17, f"a pass that redelivers one lease took {trips} round trips ({commands} commands)"


def test_a_pass_lifts_a_dead_holders_barrier_and_resends_a_lost_hand_off(busy):
    r, lab, sup, pool, count = busy
    sup.lab_pass(pool)
    clock.hold(r, lab, "ghost", clock.now(r, lab), ttl=0.05)  # a horse that died holding the clock
    ghost_at = r.zscore(key(lab, "barriers"), "ghost")
    lapse = float(r.hget(key(lab, "barrier_alive"), "ghost"))
    wait(lambda: time.time() > lapse, 10, "the dead holder's barrier never lapsed")
    assert clock.now(r, lab) == ghost_at, "the clock did not wait at the barrier"
    r.hset(msg(lab, "3"), mapping={"state": "pending", "receives": 0, "base": 0})
    r.zadd(key(lab, "handoffs"), {f"3:1:{lab}-3-1-1": time.time() - handoff.HANDOFF_S - 1})  # taken, never claimed
    commands, trips = count.one_pass(pool)
    assert "ghost" not in clock.holders(r, lab), "a dead holder's barrier was not lifted"
    wait(lambda: clock.now(r, lab) > ghost_at, 10, "the clock still waits for the dead holder")
    assert [e["job_id"] for e in events(r, lab, "job.resent")] == ["3"], "the lost hand-off was not sent again"
    assert r.llen(f"rq:queue:{queue_name(lab)}") == 1, "the resent delivery is not in RQ's queue"
    assert trips <= 16, f"a pass that lifts a barrier and resends a hand-off took {trips} round trips ({commands})"
    assert not math.isinf(pool.deadline), "the lease is still in flight: the lab must keep a deadline"


def test_a_lease_pushed_later_moves_the_reaper_barrier_before_the_clock_gets_there_with_one_read(busy):
    """A heartbeat pushes the lease deadline later without waking the supervisor (wait.PUSHED_LATER), so its
    barrier still stands at the old deadline. Before the clock gets there the supervisor reads the first lease and
    moves it on (no whole pass); the old deadline then holds nothing."""
    r, lab, sup, pool, count = busy
    now = clock.now(r, lab)
    # job 1's lease and its attempt's barrier placed again from this moment: a set-up slowed by a busy box must not
    # have brought the clock near them, or it would stop there, short of the deadline this test moves past
    r.zadd(key(lab, "leases"), {"1": now + 200})
    clock.hold(r, lab, "1:1", now + 100)
    old = now + 60  # three real seconds ahead
    lease(r, lab, "2", old)
    sup.lab_pass(pool)
    assert r.zscore(key(lab, "barriers"), "reaper") == pytest.approx(old)
    r.zincrby(key(lab, "leases"), 200, "2")  # the heartbeat's push
    assert pool.reaper_due < math.inf, "nobody looks at the reaper's barrier before the clock reaches it"
    wait(lambda: time.time() >= pool.reaper_due, 10, "the moment to move the barrier never came")
    before, trips = count.commands(), count.trips()
    sup.duties.move_reaper(pool)
    commands, trips = count.commands() - before, count.trips() - trips
    [(_job, head)] = r.zrange(key(lab, "leases"), 0, 0, withscores=True)
    assert head > old and r.zscore(key(lab, "barriers"), "reaper") == pytest.approx(head), (
        "the barrier was not moved on to the lease deadline that now comes first"
    )
    wait(lambda: clock.now(r, lab) > old, 10, "the clock stood at a lease deadline that had been pushed later")
    # the first lease, then the barrier's move (its script's own commands count on the server)
    assert trips == 2, f"moving the barrier took {trips} round trips ({commands} commands)"


def test_a_lease_due_behind_another_holder_at_its_moment_waits_for_it_and_is_looked_at_soon_not_at_once(busy):
    """A worker that starts at the moment a lease runs out holds the clock there (its start barrier) with the
    reaper's: its start comes first. Its lift leaves the lowest barrier, the reaper's, where it was, so the clock
    is not rebased and nobody is woken. The lab was due again at once for as long as the start took (a pass every
    half millisecond: 15 of a busy lab's 25 round trips a second); now it is looked at again soon (TIED_LOOK_S),
    and the lease still goes back at its deadline, right after the start."""
    r, lab, sup, pool, count = busy
    due = clock.now(r, lab) + 40  # two real seconds ahead
    lease(r, lab, "2", due)
    sup.lab_pass(pool)
    clock.hold(r, lab, "start:w9", due, ttl=30)  # a worker starting at that very moment
    wait(lambda: clock.now(r, lab) >= due, 10, "the clock never reached the lease deadline")
    sup.lab_pass(pool)
    assert r.hget(msg(lab, "2"), "state") == "inflight", "the lease went back before the start at its moment"
    assert pool.passed_at < pool.deadline <= pool.passed_at + TIED_LOOK_S, (
        f"a lease waiting behind another barrier made the lab due {pool.deadline - pool.passed_at:+.4f} s after it"
    )
    held = r.hgetall(key(lab, "clock"))
    clock.lift(r, lab, "start:w9")  # the worker is ready
    assert r.hgetall(key(lab, "clock")) == held, "the lift moved the clock (it would notify, and wake the lab)"
    wait(lambda: time.time() >= pool.deadline, 10, "the lab's next look never came")
    sup.lab_pass(pool)
    assert r.hget(msg(lab, "2"), "state") == "pending", "the lease was not redelivered once the start was done"
    [ev] = events(r, lab, "job.redelivered")
    assert ev["t_sim"] == pytest.approx(due, abs=1e-3), ev
    assert pool.tied_since is None
