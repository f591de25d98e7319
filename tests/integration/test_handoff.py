"""Hand-off barriers on the real server: the clock waits only for deliveries a free worker will take.

A transit barrier for a delivery no worker is free to take holds the lab's clock until it lapses (the running
jobs cannot finish past it, so none frees up to take it): seconds of standstill for every lab with more work
than workers (bench throughput found them). These drive core/broker/handoff.py directly: the races are
between producers and work horses, which a whole stack reaches only now and then.
"""

import json
import threading

import pytest
import redis

import chapters
from core import clock
from core.broker import handoff, leases, reaper
from core.keys import attempts, job, key, msg, queue_name
from tests.helpers import requests_sent, round_trips

LAB = "handofftest"


@pytest.fixture
def rl(r):
    def clean() -> None:
        r.delete(*(key(LAB, k) for k in ("clock", "barriers", "barrier_alive", "workers")))

    clean()
    clock.start(r, LAB, speed=1000)
    yield r
    clean()


def workers(r, **states: str) -> None:
    r.hset(key(LAB, "workers"), mapping={w: json.dumps({"id": w, "state": s}) for w, s in states.items()})


def transit(r) -> list[str]:
    return [h for h in clock.holders(r, LAB) if h.startswith("transit:")]


def test_producers_sending_at_once_to_one_idle_worker_leave_at_most_one_barrier(rl):
    """Eight producers look at the one idle worker at the same moment: each sees it free. Without the second
    look after holding, several barriers stay, and all but one wait for a worker that is not coming."""
    workers(rl, w1="idle", w2="busy")
    go = threading.Barrier(8)

    def produce(job_id: str) -> None:
        go.wait()
        handoff.hold_for_transit(rl, LAB, job_id, 1)

    threads = [threading.Thread(target=produce, args=(str(n),)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(transit(rl)) <= 1, transit(rl)


def test_a_producer_holds_the_clock_for_an_idle_workers_delivery_only(rl, monkeypatch):
    """Counted and held in one step: one request, whether it holds or not."""
    workers(rl, w1="idle", w2="busy")
    handoff.hold_for_transit(rl, LAB, "1", 1)
    sent = requests_sent(rl, monkeypatch)  # (the first call loaded the script)
    handoff.hold_for_transit(rl, LAB, "2", 1)  # queued behind the busy worker: no barrier
    assert sent == ["EVALSHA"], f"a producer's look and hold took more than one round trip: {sent}"
    assert transit(rl) == [handoff.transit_holder("1", 1)]


def test_a_producers_hold_answers_the_labs_simulated_time_so_it_reads_the_clock_once(rl):
    """The transit step answers the clock's present moment (what a read just after it gives), whether it held
    or not, so the producer's job record is stamped without a second read; a lab without a clock answers
    None. The clock is paused between the steps, so the two readings must agree exactly."""
    workers(rl, w1="idle", w2="busy")
    clock.pause(rl, LAB)
    held_at = handoff.hold_for_transit(rl, LAB, "1", 1)  # holds: the idle worker's delivery
    assert transit(rl) == [handoff.transit_holder("1", 1)]
    assert held_at == clock.now(rl, LAB) and held_at > 0
    clock.resume(rl, LAB)
    queued_at = handoff.hold_for_transit(rl, LAB, "2", 1)  # queued behind the busy worker: no barrier
    assert transit(rl) == [handoff.transit_holder("1", 1)]
    after = clock.now(rl, LAB)
    assert held_at <= queued_at <= after, (held_at, queued_at, after)
    rl.delete(key(LAB, "clock"))
    assert handoff.hold_for_transit(rl, LAB, "3", 1) is None


def test_a_delivery_that_overtook_the_one_held_for_takes_its_barrier(rl):
    """Two producers' sends cross on the way to RQ's queue: the barrier was placed for job 1, the idle worker
    received job 2. Job 1 now waits behind a busy worker, so its barrier must go with job 2's receive."""
    workers(rl, w1="idle")
    handoff.hold_for_transit(rl, LAB, "1", 1)
    workers(rl, w1="busy")
    handoff.received(rl, LAB, "2", 1)
    assert transit(rl) == []


def test_an_attempt_that_overtook_the_delivery_held_for_takes_that_barrier_in_its_own_step(rl):
    """As above, with the attempt's own barrier placed in the same step: no barrier of its own delivery is
    held, so the lowest hand-off's goes (the one the idle worker was held for), and the others stay."""
    workers(rl, w1="idle", w2="idle", w3="idle")
    handoff.hold_for_transit(rl, LAB, "1", 1)
    handoff.hold_for_transit(rl, LAB, "3", 1)
    handoff.received(rl, LAB, "2", 1, holder="2:1", at=0.0)
    assert sorted(clock.holders(rl, LAB)) == ["2:1", handoff.transit_holder("3", 1)]
    assert handoff.transit_holder("1", 1) not in rl.hgetall(key(LAB, "barrier_alive"))
    handoff.received(rl, LAB, "3", 1, holder="3:1", at=0.0)  # its own, now
    assert sorted(clock.holders(rl, LAB)) == ["2:1", "3:1"]
    handoff.received(rl, LAB, "4", 1, holder="4:1", at=0.0)  # none of its kind left: nothing else goes
    assert sorted(clock.holders(rl, LAB)) == ["2:1", "3:1", "4:1"]


def test_a_receive_lifts_its_own_barrier_and_leaves_the_others(rl):
    workers(rl, w1="idle", w2="idle")
    handoff.hold_for_transit(rl, LAB, "1", 1)
    handoff.hold_for_transit(rl, LAB, "2", 1)
    workers(rl, w1="idle", w2="busy")
    handoff.received(rl, LAB, "2", 1)
    assert transit(rl) == [handoff.transit_holder("1", 1)]


def test_an_attempt_takes_the_clock_from_its_hand_off_and_gives_it_to_the_next_in_one_step_each(rl, monkeypatch):
    """Its start holds its own barrier as its hand-off's goes; its end holds the next queued delivery's as its own
    goes: each one change of the barriers (one script, the clock rebased at most once), so the clock never runs
    between the two. The end, with its look at the queue and the worker's row said idle again, is one round trip."""
    workers(rl, w1="idle")
    handoff.received(rl, LAB, "0", 1, holder="nobody", row={"state": "idle"}, wid="w1")  # (loads both scripts;
    handoff.hold_for_next(rl, LAB, 0.0, "nobody")  # nothing queued: its barrier goes again)
    handoff.hold_for_transit(rl, LAB, "1", 1)
    sent = requests_sent(rl, monkeypatch)
    handoff.received(rl, LAB, "1", 1, holder="1:1", at=0.0, row={"state": "busy", "job_id": "1"}, wid="w1")
    assert sent == ["EVALSHA"], f"the start was more than one step (the barriers read first?): {sent}"
    assert clock.holders(rl, LAB) == ["1:1"], "the attempt's barrier did not take the hand-off's place"
    assert json.loads(rl.hget(key(LAB, "workers"), "w1")) == {"id": "w1", "state": "busy", "job_id": "1"}
    queue = f"rq:queue:{queue_name(LAB)}"
    rl.rpush(queue, f"{LAB}-2-1-123")  # the next delivery, as a producer names it
    try:
        sent.clear()
        handoff.hold_for_next(rl, LAB, 0.0, "1:1", row={"state": "idle", "job_id": None}, wid="w1")
        assert sent == ["EVALSHA"], f"the end took more than one round trip: {sent}"
        assert clock.holders(rl, LAB) == [handoff.transit_holder("2", 1)], "the next delivery did not take the clock"
        assert json.loads(rl.hget(key(LAB, "workers"), "w1")) == {"id": "w1", "state": "idle", "job_id": None}
        rl.delete(queue)
        rl.rpush(queue, "rq-own-job-id")  # a head no producer named: the clock does not wait for it
        handoff.hold_for_next(rl, LAB, 0.0, handoff.transit_holder("2", 1))
        assert clock.holders(rl, LAB) == []
        rl.delete(queue)
        rl.rpush(queue, f"{LAB}-3-02-9")  # a delivery number as RQ's id spells it
        handoff.hold_for_next(rl, LAB, 0.0, "1:1")
        assert clock.holders(rl, LAB) == [handoff.transit_holder("3", 2)]
        rl.delete(queue)
        handoff.hold_for_next(rl, LAB, 0.0, handoff.transit_holder("3", 2))  # nothing queued: the barrier goes
        assert clock.holders(rl, LAB) == []
    finally:
        rl.delete(queue)


def test_a_delivery_is_noted_and_enqueued_in_one_step(rl, redis_server, monkeypatch):
    """The hand-off's note and RQ's enqueue go in one MULTI: neither is ever without the other, and a send is
    one round trip."""
    rq_conn = redis.Redis.from_url(redis_server.url)  # as RQ's own (bytes)
    queue = f"rq:queue:{queue_name(LAB)}"
    try:
        reaper.send(rq_conn, LAB, "1", 1)  # (RQ's first enqueue on a connection may ask the server its version)
        trips = round_trips(monkeypatch, rq_conn)
        reaper.send(rq_conn, LAB, "2", 1)
        assert trips() == 1, f"a send took {trips()} round trips"
        noted = [m.decode().rsplit(":", 1)[1] for m in rq_conn.zrange(key(LAB, "handoffs"), 0, -1)]
        assert [q.decode() for q in rq_conn.lrange(queue, 0, -1)] == noted and len(noted) == 2
    finally:
        for rq_id in rq_conn.lrange(queue, 0, -1):
            rq_conn.delete(b"rq:job:" + rq_id)
        rq_conn.delete(queue, key(LAB, "handoffs"))
        rq_conn.close()


@pytest.mark.parametrize("arrives", ["first", "again"])
def test_a_receive_takes_its_hand_off_note_away_and_answers_with_the_record_it_left(rl, arrives):
    """A delivery that arrives ends its hand-off whatever comes of it (run, or a stale second copy): its note
    goes in the receive, so the supervisor's sweep finds only lost ones. The receive answers with the job's
    record as it left it, so the attempt reads it no more."""
    note = handoff.note_of("1", 1, f"{LAB}-1-1-7")
    rl.hset(job(LAB, "1"), mapping={"id": "1", "state": "queued", "attempt": 0, "payload": "{}", "source": "s"})
    rl.hset(msg(LAB, "1"), mapping={"state": "pending", "receives": 0})
    rl.hset(key(LAB, "states"), "queued", 1)
    rl.zadd(key(LAB, "handoffs"), {note: 1.0, handoff.note_of("2", 1, f"{LAB}-2-1-8"): 1.0})
    settings = {**chapters.settings_for("ch1"), "guard": "claim"}
    try:
        if arrives == "again":
            assert leases.receive(rl, LAB, "1", 1, "w1", 5.0, settings, 1)[0] == leases.RUN
            rl.zadd(key(LAB, "handoffs"), {note: 1.0})  # a second copy of delivery 1, sent again
        outcome, rec = leases.receive(rl, LAB, "1", 1, "w1", 5.0, settings, 1, note)
        assert rl.zrange(key(LAB, "handoffs"), 0, -1) == [handoff.note_of("2", 1, f"{LAB}-2-1-8")], (
            "the receive left its hand-off note (or took another's)"
        )
        if arrives == "first":
            assert outcome == leases.RUN
            assert rec == rl.hgetall(job(LAB, "1")), "the record answered is not the one the receive left"
            assert rec["state"] == "running" and rec["attempt"] == "1" and rec["worker"] == "w1"
        else:
            assert (outcome, rec) == (leases.STALE, {})
    finally:
        rl.delete(
            job(LAB, "1"),
            msg(LAB, "1"),
            attempts(LAB, "1"),
            *(key(LAB, k) for k in ("handoffs", "states", "events", "counts", "leases", "alive")),
        )


def test_a_workers_row_is_merged_in_one_round_trip_and_a_dead_one_is_left_to_the_supervisor(rl, monkeypatch):
    """A work horse marks its row busy (and idle again) in one round trip, where a read and a write left room for
    the supervisor's own write between them: a row it marked dead came back busy. The supervisor, the row's
    owner, makes a missing row and writes any state."""
    from core.broker.state import merge_worker_row
    from workers.tasks import set_worker

    rows = key(LAB, "workers")
    workers(rl, w1="idle", w2="dead")
    monkeypatch.setenv("LAB_WORKER_ID", "w1")
    set_worker(rl, LAB, state="idle")  # (the first call loads the script)
    sent = round_trips(monkeypatch, rl)
    set_worker(rl, LAB, state="busy", job_id="7", horse_pid=None)
    assert sent() == 1, f"the horse's row took {sent()} round trips"
    assert json.loads(rl.hget(rows, "w1")) == {"id": "w1", "state": "busy", "job_id": "7", "horse_pid": None}
    assert not merge_worker_row(rl, LAB, "w2", {"state": "busy"}), "a horse brought a dead worker's row back"
    assert json.loads(rl.hget(rows, "w2"))["state"] == "dead"
    assert not merge_worker_row(rl, LAB, "w3", {"state": "busy"}) and not rl.hexists(rows, "w3")
    assert merge_worker_row(rl, LAB, "w2", {"state": "idle", "pid": 12}, owner=True)
    assert merge_worker_row(rl, LAB, "w3", {"state": "starting"}, owner=True)
    assert {w: json.loads(v)["state"] for w, v in rl.hgetall(rows).items()} == {
        "w1": "busy",
        "w2": "idle",
        "w3": "starting",
    }
    assert json.loads(rl.hget(rows, "w3"))["id"] == "w3"
