"""Hand-off barriers on the real server: the clock waits only for deliveries a free worker will take.

A transit barrier for a delivery no worker is free to take holds the lab's clock until it lapses (the running
jobs cannot finish past it, so none frees up to take it): seconds of standstill for every lab with more work
than workers (bench throughput found them). These drive workers/broker/handoff.py directly: the races are
between producers and work horses, which a whole stack reaches only now and then.
"""

import json
import threading

import pytest

from core import clock
from core.keys import key
from workers.broker import handoff

pytestmark = pytest.mark.integration
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


def test_a_producer_holds_the_clock_for_an_idle_workers_delivery_only(rl):
    workers(rl, w1="idle", w2="busy")
    handoff.hold_for_transit(rl, LAB, "1", 1)
    handoff.hold_for_transit(rl, LAB, "2", 1)  # queued behind the busy worker: no barrier
    assert transit(rl) == [handoff.transit_holder("1", 1)]


def test_a_delivery_that_overtook_the_one_held_for_takes_its_barrier(rl):
    """Two producers' sends cross on the way to RQ's queue: the barrier was placed for job 1, the idle worker
    received job 2. Job 1 now waits behind a busy worker, so its barrier must go with job 2's receive."""
    workers(rl, w1="idle")
    handoff.hold_for_transit(rl, LAB, "1", 1)
    workers(rl, w1="busy")
    handoff.received(rl, LAB, "2", 1)
    assert transit(rl) == []


def test_a_receive_lifts_its_own_barrier_and_leaves_the_others(rl):
    workers(rl, w1="idle", w2="idle")
    handoff.hold_for_transit(rl, LAB, "1", 1)
    handoff.hold_for_transit(rl, LAB, "2", 1)
    workers(rl, w1="idle", w2="busy")
    handoff.received(rl, LAB, "2", 1)
    assert transit(rl) == [handoff.transit_holder("1", 1)]
