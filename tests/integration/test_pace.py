"""What a paced attempt costs the server, on the real server.

Its watch on the lab's clock and faults (workers/tasks.py Watch): a paced job used to read both hashes every
0.25 s whatever happened; it now reads them only when the server's keyspace notifications say they changed,
and must still hear a pause or a fault at once. Its heartbeat: a lease pushed later must not make the
supervisor read the leases again (workers/wait.py Waker), while a lease that may have come earlier must.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
import redis

from core import clock, registry, stream
from core.broker import leases, retry
from core.engines import loadgen
from core.keys import job, key, keyspace, msg
from core.procs import wait
from core.settings import DEFAULTS
from tests.helpers import commands_run, requests_sent, round_trips
from workers import tasks
from workers.engines.loadgen import ENGINE as GENERATOR
from workers.pool import LabPool
from workers.tasks import Watch, report_progress
from workers.wait import Waker, engine_moments, note, refresh_deadlines


@pytest.fixture
def lab(r):
    flags = r.config_get("notify-keyspace-events")["notify-keyspace-events"]
    r.config_set("notify-keyspace-events", "".join(sorted(set(flags) | set("Kh"))))  # as the supervisor does
    name = f"t-pace-{uuid.uuid4().hex[:8]}"
    clock.start(r, name, speed=20)
    yield name
    r.delete(key(name, "clock"), key(name, "faults"))


def test_a_paced_attempt_reads_the_clock_and_faults_only_when_they_change(r, redis_server, lab):
    own = redis.Redis.from_url(redis_server.url, decode_responses=True)  # the attempt's connection
    watch = Watch(own, lab)
    try:
        first = watch.clock()
        assert watch.faults() == {}
        me = str(own.client_id())
        before = commands_run(r, id=me)
        for _ in range(5):
            assert watch.clock() == first
            assert watch.faults() == {}
            assert watch.now() == pytest.approx(clock.reading(first, time.time())["t_raw"], abs=1.0)
        assert not watch.wait(0.05), "the watch woke with nothing changed"
        assert commands_run(r, id=me) == before, "the attempt read a hash that had not changed"

        clock.pause(r, lab)
        wait(lambda: watch.wait(0.1), 10, "a pause never woke the paced attempt")
        assert clock.reading(watch.clock(), 0)["paused"], "the attempt did not see the pause"
        r.hset(key(lab, "faults"), mapping={"storage_outage_from": 5, "storage_outage_until": 65})
        wait(lambda: watch.wait(0.1), 10, "a storage outage never woke the paced attempt")
        assert watch.faults()["storage_outage_until"] == "65"
    finally:
        watch.close()
        own.close()


def test_a_barrier_that_moves_the_clock_hands_the_watch_its_new_reading_and_other_writes_are_read(r, redis_server, lab):
    own = redis.Redis.from_url(redis_server.url, decode_responses=True)  # the attempt's connection
    watch = Watch(own, lab)
    try:
        watch.clock()
        me = str(own.client_id())
        clock.hold(r, lab, "other:1", 1e6)  # another attempt's barrier: the lowest, so the clock is rebased
        wait(lambda: watch.wait(0.1), 10, "a barrier's move never woke the paced attempt")
        before = commands_run(r, id=me)
        assert watch.clock() == r.hgetall(key(lab, "clock")), "the reading handed over is not the hash as stored"
        assert float(watch.clock()["barrier"]) == 1e6
        assert commands_run(r, id=me) == before, "the attempt read the clock again after a barrier's move"
        clock.pause(r, lab)  # a write that only notifies
        wait(lambda: watch.wait(0.1), 10, "a pause never woke the paced attempt")
        assert clock.reading(watch.clock(), 0)["paused"], "the attempt did not read the paused clock"
        assert commands_run(r, id=me) == before + 1, "the pause was not read once"
    finally:
        watch.close()
        own.close()
        r.delete(key(lab, "barriers"), key(lab, "barrier_alive"))


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
def test_a_paced_attempt_wakes_when_ffmpeg_exits_not_at_the_end_of_its_wait(r, redis_server, lab, monkeypatch, pidfd):
    """The attempt's barrier holds the clock until its ffmpeg is done, so it must notice the exit, not sleep on
    to the end of its wait; where the system has no pidfd (a kernel before 5.3) it looks now and then instead."""
    if not pidfd:

        def no_pidfd(_pid):
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    own = redis.Redis.from_url(redis_server.url, decode_responses=True)
    watch = Watch(own, lab)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        began = time.monotonic()
        assert not watch.wait(120, [proc]), "nothing changed, yet the watch said so"
        assert proc.poll() is not None, "the wait ended while the process still ran"
        assert time.monotonic() - began < 120, "the wait ran to its end instead of ending with the process"
    finally:
        proc.kill()
        proc.wait()
        watch.close()
        own.close()


def test_a_pool_host_hears_only_the_labs_it_follows_and_holds_no_pattern(r, lab):
    """Each host subscribes to its own labs' channels by name: another lab's writes reach it not at all, and the
    server matches no pattern of its on any write (a pattern per host over every lab grows with hosts × labs)."""
    other = f"t-pace-{uuid.uuid4().hex[:8]}"
    patterns = r.pubsub_numpat()
    waker = Waker(r, f"t-commands-{lab}")

    def listeners(name: str) -> int:
        return dict(r.pubsub_numsub(keyspace(r, key(name, "settings"))))[keyspace(r, key(name, "settings"))]

    def heard_first(name: str) -> set[str]:
        heard: set[str] = set()
        wait(lambda: heard.update(waker.wait(0.1)) or key(name, "settings") in heard, 10, f"{name} was never heard")
        return heard

    try:
        waker.follow([lab])
        assert listeners(lab) == 1, "follow returned before the server had made its subscriptions"
        assert r.pubsub_numpat() == patterns, "the host subscribed to a pattern"
        r.hset(key(other, "settings"), "x", 1)  # notifications come in the order the writes were made
        r.hset(key(lab, "settings"), "x", 1)
        assert key(other, "settings") not in heard_first(lab), "a lab the host does not run woke it"
        waker.follow([other])  # the lab moved to another host, this one took another
        wait(lambda: (listeners(lab), listeners(other)) == (0, 1), 10, "the host's subscriptions did not follow")
        r.hset(key(lab, "settings"), "y", 1)
        r.hset(key(other, "settings"), "y", 1)
        assert key(lab, "settings") not in heard_first(other), "a lab the host let go still woke it"
    finally:
        waker.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        r.delete(key(lab, "settings"), key(other, "settings"))


def test_a_heartbeat_does_not_wake_the_supervisor_but_a_cut_lease_does(r, lab):
    waker = Waker(r, f"t-commands-{lab}")
    waker.follow([lab])
    mine = key(lab, "leases")
    try:
        r.hset(job(lab, "j"), mapping={"state": "running", "holder": 1})
        r.hset(msg(lab, "j"), mapping={"state": "inflight", "receives": 1})
        r.zadd(mine, {"j": 30.0})
        wait(lambda: mine in waker.wait(0.1), 10, "the first lease never woke the supervisor")
        assert leases.extend_lease(r, lab, "j", 1, "w1", 10.0, 30.0), "the heartbeat did not extend the lease"
        assert r.zscore(mine, "j") == pytest.approx(40.0, abs=1e-9)
        assert r.hget(msg(lab, "j"), "deadline") is None, "the deadline was written twice (the zset is its one place)"
        # a later change the supervisor hears: notifications arrive in the order the server made them, so
        # everything the heartbeat caused has been heard once this one is
        r.hset(key(lab, "settings"), "x", 1)
        heard: set[str] = set()
        wait(lambda: heard.update(waker.wait(0.1)) or key(lab, "settings") in heard, 10, "the sentinel was never heard")
        assert mine not in heard, "a heartbeat that only pushed its lease later woke the supervisor"
        assert leases.cut(r, lab, "j", 12.0), "the lease was not cut"
        wait(lambda: mine in waker.wait(0.1), 10, "a cut lease (a deadline come earlier) never woke the supervisor")
        assert r.zscore(mine, "j") == 12.0
    finally:
        waker.close()
        signal.set_wakeup_fd(-1)  # the Waker's SIGCHLD wake-up, which the supervisor keeps for its life
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        r.delete(job(lab, "j"), msg(lab, "j"), mine, *(key(lab, k) for k in ("events", "counts", "alive", "settings")))


def test_a_heartbeat_moves_its_attempts_barrier_in_the_same_round_trip(r, redis_server, lab, monkeypatch):
    own = redis.Redis.from_url(redis_server.url, decode_responses=True)  # the attempt's connection
    try:
        r.hset(job(lab, "j"), mapping={"state": "running", "holder": 1})
        r.hset(msg(lab, "j"), mapping={"state": "inflight", "receives": 1})
        r.zadd(key(lab, "leases"), {"j": 30.0})
        clock.hold(r, lab, "j:1", 10.0)
        assert leases.extend_lease(
            own, lab, "j", 1, "w1", 10.0, 30.0, then=clock.barrier_call(lab, "hold", "j:1", 20.0, refresh=False)
        )
        sent = requests_sent(own, monkeypatch)  # (the first call above loaded the script)
        assert leases.extend_lease(
            own, lab, "j", 1, "w1", 20.0, 30.0, then=clock.barrier_call(lab, "hold", "j:1", 30.0, refresh=False)
        )
        assert sent == ["EVALSHA"], f"a heartbeat and its barrier's move took more than one round trip: {sent}"
        assert r.zscore(key(lab, "leases"), "j") == pytest.approx(50.0, abs=1e-9), "the lease was not extended"
        assert r.zscore(key(lab, "barriers"), "j:1") == 30.0, "the barrier did not move on with the heartbeat"
        assert float(r.hget(key(lab, "clock"), "barrier")) == 30.0, "the clock does not wait at the moved barrier"
        assert len(r.xrange(key(lab, "events"))) == 2, "each heartbeat is one lease.extended event"
    finally:
        own.close()
        r.delete(
            job(lab, "j"),
            msg(lab, "j"),
            *(key(lab, k) for k in ("leases", "barriers", "barrier_alive", "events", "counts", "alive")),
        )


def test_a_tenth_of_progress_is_one_command_shown_on_its_workers_row(r, redis_server, lab, monkeypatch):
    """The attempt appends its tenth as an event, nothing else; the snapshot finds the newest one among the lab's
    newest events and shows it on the row of the worker running that attempt, never on a dead worker's row or
    the next attempt's."""
    monkeypatch.setenv("LAB_WORKER_ID", "w1")
    rows = key(lab, "workers")
    row = {
        "id": "w1",
        "state": "busy",
        "host": "p1",
        "pid": 4321,
        "job_id": "7",
        "fleet": None,
        "attempt": 2,
        "horse_pid": 4322,
        "progress": None,
    }
    r.hset(rows, mapping={"w1": json.dumps(row), "w2": json.dumps({**row, "id": "w2", "state": "dead"})})
    name = f"t-progress-{uuid.uuid4().hex[:8]}"
    own = redis.Redis.from_url(redis_server.url, decode_responses=True, client_name=name)  # the attempt's
    try:
        own.ping()
        before, trips = commands_run(r, name=name), round_trips(monkeypatch, own)
        report_progress(own, lab, "7", 2, 30, 12.5)
        assert (trips(), commands_run(r, name=name) - before) == (1, 1), "a tenth cost more than its one event"
        workers = {w["id"]: w for w in registry.snapshot(r, lab)["workers"]}
        assert workers["w1"] == {**row, "progress": 30}, "the row lost or changed a field, or shows no progress"
        for i in range(40):  # other events after it: the snapshot looks back past them
            stream.emit(own, lab, "job.enqueued", 12.5, job_id=str(100 + i))
        report_progress(own, lab, "7", 2, 40, 13.0)
        stream.emit(own, lab, "job.enqueued", 13.0, job_id="200")
        assert registry.snapshot(r, lab)["workers"][0]["progress"] == 40, "the newest tenth was not the one shown"
        monkeypatch.setenv("LAB_WORKER_ID", "w2")
        report_progress(own, lab, "7", 2, 50, 13.5)
        assert registry.snapshot(r, lab)["workers"][1]["progress"] is None, "a dead worker's row shows progress"
        assert registry.snapshot(r, lab)["workers"][0]["progress"] == 40, "another worker's tenth was shown"
        r.hset(rows, "w1", json.dumps({**row, "job_id": "8", "attempt": 1}))  # w1 has moved on to job 8
        assert registry.snapshot(r, lab)["workers"][0]["progress"] is None, "another attempt's progress was shown"
        events = [json.loads(f["e"]) for _i, f in r.xrange(key(lab, "events")) if "job.progress" in f["e"]]
        assert [(e["job_id"], e["worker_id"], e["data"]["percent"], e["t_sim"]) for e in events] == [
            ("7", "w1", 30, 12.5),
            ("7", "w1", 40, 13.0),
            ("7", "w2", 50, 13.5),
        ]
    finally:
        own.close()
        r.delete(rows, key(lab, "events"), key(lab, "counts"))


def test_a_barrier_that_moves_the_clock_refreshes_the_supervisors_deadline_without_a_read(r, redis_server, lab):
    name = f"t-sup-{uuid.uuid4().hex[:8]}"
    own = redis.Redis.from_url(redis_server.url, decode_responses=True, client_name=name)  # the supervisor's
    waker = Waker(own, f"t-commands-{lab}")
    waker.follow([lab])
    pool = LabPool(lab)
    try:
        refresh_deadlines(own, [pool])
        sent = commands_run(r, name=name)
        clock.hold(r, lab, "other:1", 1e6)  # the lowest barrier: the clock is rebased
        heard: set[str] = set()
        wait(
            lambda: heard.update(waker.wait(0.1)) or key(lab, "clock") in waker.published,
            10,
            "the barrier's move was never heard with its clock",
        )
        note(own, {lab: pool}, heard, waker)
        assert pool.heads["clock"] == r.hgetall(key(lab, "clock")), "the deadline was computed from another clock"
        assert commands_run(r, name=name) == sent, "the supervisor read the clock a barrier's move had handed it"
        clock.pause(r, lab)  # a write that only notifies: read
        wait(lambda: key(lab, "clock") in waker.wait(0.1), 10, "the pause was never heard")
        assert key(lab, "clock") not in waker.published
    finally:
        waker.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        own.close()
        r.delete(key(lab, "barriers"), key(lab, "barrier_alive"))


def test_the_load_generators_next_arrival_makes_the_lab_due_when_the_clock_gets_there(r, lab):
    """The generator holds the clock at its next arrival until a pass enqueues it: the lab's deadline is the moment
    the clock gets there. Left to the housekeeping cadence, every arrival held the clock up to 0.1 real s, and a
    chapter 2 overload at 20x ran at about 2x (one arrival a cadence)."""
    pool = LabPool(lab, busy={GENERATOR.name})  # as a pass leaves it while the generator is on
    at = clock.now(r, lab) + 2.0
    loadgen.hold_next(r, lab, at)
    try:
        reached = clock.reached_at(r.hgetall(key(lab, "clock")), at)
        engine_moments(r, pool)
        refresh_deadlines(r, [pool])
        assert pool.heads["engines"] == [pytest.approx(at)]
        assert pool.deadline == pytest.approx(reached, abs=1e-3), "not due when the clock gets there"
        pool.busy = set()  # the generator is off: its barrier is nobody's deadline
        engine_moments(r, pool)
        refresh_deadlines(r, [pool])
        assert pool.heads["engines"] == [] and pool.deadline > reached + 0.5
    finally:
        r.delete(key(lab, "barriers"), key(lab, "barrier_alive"))


@pytest.mark.parametrize(
    ("gap", "shown"),
    [(None, "fewer"), (0.02, "every")],
    ids=["tenths faster than the gap: about one a gap", "tenths slower than the gap: every one"],
)
def test_progress_moves_about_once_a_gap_at_any_speed(r, redis_server, lab, monkeypatch, gap, shown):
    """A job's tenths of progress are what its worker card's bar shows: no two closer than PROGRESS_GAP_S real
    seconds apart (at 20× a 40 s job's tenths come every 0.2 s), and every one of them when a tenth takes longer
    than that. The attempt still ends at its simulated end."""
    if gap is not None:
        monkeypatch.setattr(tasks, "PROGRESS_GAP_S", gap)
    own = redis.Redis.from_url(redis_server.url, decode_responses=True)
    settings = {**DEFAULTS, "upload_parts": 0}
    start = clock.now(own, lab)
    try:
        watch = Watch(own, lab)
        tasks.pace(own, lab, "j", 1, settings, start, 40.0, [], retry.jitter_rng(0, "j", 1), watch)
        watch.close()
        assert clock.now(own, lab) >= start + 40.0, "the attempt ended before its simulated end"
        # each tick's time as the attempt stamped it (its own clock: the server's stream ids add the round trip's
        # jitter, which a loaded box stretches by tens of ms either way)
        ticks = [
            (1000 * e["t_real"], e["data"]["percent"])
            for _i, f in r.xrange(key(lab, "events"))
            if (e := json.loads(f["e"]))["type"] == "job.progress"
        ]
        percents = [p for _ms, p in ticks]
        assert percents == sorted(set(percents)) and all(0 < p < 100 for p in percents), percents
        if shown == "every":
            assert [p // 10 for p in percents] == list(range(1, 10)), f"a tenth was not shown: {percents}"
        else:
            gaps = [b - a for (a, _), (b, _) in zip(ticks, ticks[1:], strict=False)]
            assert ticks and all(g >= 1000 * tasks.PROGRESS_GAP_S - 1 for g in gaps), f"ticks closer: {gaps}"
            assert len(ticks) < 9, f"every tenth was shown, {len(ticks)} ticks in 2 real seconds"
    finally:
        own.close()
        r.delete(key(lab, "events"), key(lab, "counts"), key(lab, "barriers"), key(lab, "barrier_alive"))


def test_a_barrier_lifted_while_its_holder_still_paces_is_placed_again(r, redis_server, lab):
    """A holder that stalls past its barrier's expiry has it lifted by the supervisor's sweep; the next refresh
    finds its stamp gone and places the barrier again, so the clock does not run past the attempt's moments."""
    own = redis.Redis.from_url(redis_server.url, decode_responses=True)
    settings = {**DEFAULTS, "upload_parts": 0}
    start = clock.now(own, lab)
    watch = Watch(own, lab)
    pacing = threading.Thread(
        target=tasks.pace,
        args=(own, lab, "j", 1, settings, start, 100.0, [], retry.jitter_rng(0, "j", 1), watch),
        daemon=True,
    )
    pacing.start()
    try:
        wait(lambda: r.zscore(key(lab, "barriers"), "j:1") is not None, 10, "the attempt never held the clock")
        clock.lift(r, lab, "j:1")  # what the sweep does to a holder it took for dead
        assert r.zscore(key(lab, "barriers"), "j:1") is None
        wait(
            lambda: r.zscore(key(lab, "barriers"), "j:1") is not None or not pacing.is_alive(),
            10,
            "the lifted barrier was never placed again",
        )
        assert pacing.is_alive(), "the attempt ended before it placed its barrier again"
        assert r.zscore(key(lab, "barriers"), "j:1") == pytest.approx(start + 100.0), (
            "the barrier came back elsewhere than the attempt's end"
        )
        assert r.hget(key(lab, "barrier_alive"), "j:1") is not None, "the barrier came back unstamped"
    finally:
        clock.set_speed(r, lab, 2000)  # to its end at once
        pacing.join(30)
        watch.close()
        own.close()
        r.delete(key(lab, "events"), key(lab, "counts"), key(lab, "barriers"), key(lab, "barrier_alive"))


def test_a_new_tenth_goes_in_its_heartbeats_round_trip_where_beats_come_often(r, redis_server, lab, monkeypatch):
    """At 20× a 10 s heartbeat beats every 0.5 real s, more often than a tenth may be shown (PROGRESS_GAP_S): each
    tenth then waits for the next beat and goes in its script's call, so the attempt wakes the server once, not
    twice. Every tenth shown is stamped at a beat, follows at once the stream entry before the beat's own, and the
    attempt sends no request of its own for it."""
    own = redis.Redis.from_url(redis_server.url, decode_responses=True)
    settings = {**DEFAULTS, "upload_parts": 0, "heartbeat": True, "heartbeat_interval": 10.0, "heartbeat_extend": 30}
    assert tasks.rides_with_beat(settings, 20) and not tasks.rides_with_beat({**settings, "heartbeat": False}, 20)
    start = clock.now(own, lab)
    try:
        r.hset(job(lab, "j"), mapping={"state": "running", "holder": 1})
        r.hset(msg(lab, "j"), mapping={"state": "inflight", "receives": 1})
        r.zadd(key(lab, "leases"), {"j": start + 30})
        sent = requests_sent(own, monkeypatch)
        watch = Watch(own, lab)
        tasks.pace(own, lab, "j", 1, settings, start, 60.0, [], retry.jitter_rng(0, "j", 1), watch)
        watch.close()
        rows = [json.loads(f["e"]) for _i, f in r.xrange(key(lab, "events"))]
        shown = [i for i, e in enumerate(rows) if e["type"] == "job.progress"]
        assert shown, f"no tenth was shown in 3 real seconds: {[e['type'] for e in rows]}"
        for i in shown:
            beat = rows[i + 1]
            assert beat["type"] == "lease.extended" and beat["t_sim"] == rows[i]["t_sim"], (rows[i], beat)
        assert "XADD" not in sent, f"a tenth went on its own: {sent}"
    finally:
        own.close()
        r.delete(
            job(lab, "j"),
            msg(lab, "j"),
            *(key(lab, k) for k in ("events", "counts", "alive", "leases", "barriers", "barrier_alive")),
        )
