"""The clock's barriers on the real server: what a hold and a lift write, and what they leave alone.

A busy lab moves barriers several times a second (every heartbeat, every hand-off); only a move of the
lowest barrier changes the clock, so only that may rewrite the clock hash (whose keyspace notification
wakes the supervisor). The clock's readings must be the same whichever way it is stored.
"""

from __future__ import annotations

import uuid

import pytest

from core import clock
from core.keys import key
from core.procs import wait


@pytest.fixture
def lab(r):
    name = f"t-clock-{uuid.uuid4().hex[:8]}"
    clock.start(r, name, speed=1000)
    yield name
    r.delete(*(key(name, k) for k in ("clock", "barriers", "barrier_alive")))


def test_a_hold_above_the_lowest_barrier_or_its_lift_leaves_the_clock_hash_untouched(r, lab):
    clock.hold(r, lab, "low", 1e6)
    before = r.hgetall(key(lab, "clock"))
    assert float(before["barrier"]) == 1e6
    clock.hold(r, lab, "high", 2e6)
    clock.hold(r, lab, "high", 3e6)  # a holder moving above the lowest
    clock.hold(r, lab, "twin", 1e6)  # a second holder at the lowest
    clock.lift(r, lab, "twin")
    clock.lift(r, lab, "high")
    assert r.hgetall(key(lab, "clock")) == before, "a change that left the lowest barrier alone rewrote the clock"
    assert clock.holders(r, lab) == ["low"]


def test_moving_the_lowest_barrier_points_the_clock_at_the_new_lowest(r, lab):
    clock.hold(r, lab, "a", 1e6)
    clock.hold(r, lab, "b", 2e6)
    clock.hold(r, lab, "a", 5e5)  # lower: the clock now waits there
    assert float(r.hget(key(lab, "clock"), "barrier")) == 5e5
    clock.lift(r, lab, "a")
    assert float(r.hget(key(lab, "clock"), "barrier")) == 2e6
    clock.lift(r, lab, "b")
    assert r.hget(key(lab, "clock"), "barrier") is None


def test_a_clock_waiting_at_a_barrier_resumes_from_exactly_there_when_it_moves(r, lab):
    at = clock.now(r, lab) + 200  # 0.2 real s ahead at 1000x
    clock.hold(r, lab, "a", at)
    clock.hold(r, lab, "b", 1e6)
    wait(lambda: clock.now(r, lab) == at, 10, f"the clock never reached the barrier at {at}")
    clock.lift(r, lab, "a")
    state = r.hgetall(key(lab, "clock"))
    assert float(state["base_sim"]) == at, "time jumped past the moment it had waited at"
    assert float(state["barrier"]) == 1e6
    assert clock.now(r, lab) >= at


def test_a_race_moves_every_lanes_barrier_only_when_its_lowest_moves(r, lab):
    other = f"{lab}-b"
    clock.start(r, other, speed=1000)
    try:
        clock.link(r, [lab, other])
        clock.hold(r, other, "b", 1e6)
        assert float(r.hget(key(lab, "clock"), "barrier")) == 1e6, "a lane's barrier did not hold its peer"
        before = [r.hgetall(key(x, "clock")) for x in (lab, other)]
        clock.hold(r, lab, "a", 2e6)  # above the race's lowest
        assert [r.hgetall(key(x, "clock")) for x in (lab, other)] == before
        clock.hold(r, lab, "a", 5e5)  # below it: both lanes wait there
        assert [float(r.hget(key(x, "clock"), "barrier")) for x in (lab, other)] == [5e5, 5e5]
    finally:
        r.delete(*(key(other, k) for k in ("clock", "barriers", "barrier_alive")))


def test_a_barrier_moved_without_a_new_stamp_keeps_its_expiry_and_a_new_holder_is_always_stamped(r, lab):
    alive = key(lab, "barrier_alive")
    clock.hold(r, lab, "a", 1e6)
    stamp = r.hget(alive, "a")
    clock.hold(r, lab, "a", 2e6, refresh=False)  # a holder moving its barrier between its own refreshes
    assert r.zscore(key(lab, "barriers"), "a") == 2e6
    assert r.hget(alive, "a") == stamp, "the barrier's expiry was written again without being asked to"
    clock.hold(r, lab, "b", 3e6, refresh=False)
    assert r.hget(alive, "b") is not None, "a new holder's barrier had no expiry: the sweep would lift it at once"
    clock.hold(r, lab, "a", 2e6, ttl=60)
    assert float(r.hget(alive, "a")) > float(stamp) + 30, "a refresh did not restamp the expiry"


def test_a_barrier_held_at_a_moment_already_past_is_placed_at_the_present(r, lab):
    clock.hold(r, lab, "held", 1e6)  # the clock will wait there
    wait(lambda: clock.now(r, lab) >= 50, 10, "the clock never ran")
    clock.hold(r, lab, "late", 1.0)  # a moment the clock has passed (a caller's older reading)
    at = r.zscore(key(lab, "barriers"), "late")
    assert at >= 50, f"a hold took the clock back to {at}"
    assert clock.now(r, lab) >= at, "the clock went back"
