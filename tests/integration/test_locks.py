"""Chapter 7's lock on the real server: SET NX EX semantics on the lab clock, owner-only release,
and expiry judged by each replica's own clock (the skew that eats the margin)."""

import pytest

from core.engines.locks import lock_key, read
from workers.engines import locks

LAB = "locktest"


@pytest.fixture
def rl(r):
    r.delete(lock_key(LAB, "t"))
    yield r
    r.delete(lock_key(LAB, "t"))


def test_only_one_holder_until_the_ttl_runs_out(rl):
    assert locks.acquire(rl, LAB, "t", "A", now=0, ttl=120)["won"]
    lost = locks.acquire(rl, LAB, "t", "B", now=119, ttl=120)
    assert not lost["won"] and lost["holder"] == "A"
    took = locks.acquire(rl, LAB, "t", "B", now=120, ttl=120)
    assert took["won"] and took["previous"] == "A" and took["fence"] == 2


def test_a_replica_whose_clock_runs_ahead_sees_the_lock_expire_early(rl):
    """Holder's deadline is 0 + 50 on its clock; a checker 10 s ahead reads 40 s of holder time as 50."""
    locks.acquire(rl, LAB, "t", "A", now=0, ttl=50)
    assert not locks.acquire(rl, LAB, "t", "B", now=45, ttl=50)["won"]  # same clock: still A's at 45
    assert locks.acquire(rl, LAB, "t", "C", now=40 + 10, ttl=50)["won"]  # 10 s ahead: gone at A's 40


def test_compare_and_delete_releases_only_your_own_lock(rl):
    locks.acquire(rl, LAB, "t", "A", now=0, ttl=30)
    locks.acquire(rl, LAB, "t", "B", now=30, ttl=30)  # A's expired mid-run; B holds it now
    assert locks.release(rl, LAB, "t", "A", "compare") == "B"
    assert read(rl, LAB, "t")["holder"] == "B"
    assert locks.release(rl, LAB, "t", "A", "delete") == "B"  # the plain DEL of the lesson's snippet
    assert read(rl, LAB, "t")["holder"] is None


def test_only_the_holder_can_extend(rl):
    locks.acquire(rl, LAB, "t", "A", now=0, ttl=30)
    assert locks.extend(rl, LAB, "t", "A", now=20, ttl=30) is None
    assert read(rl, LAB, "t")["expires"] == 50
    assert locks.extend(rl, LAB, "t", "B", now=25, ttl=30) == "A"
    assert not locks.acquire(rl, LAB, "t", "B", now=45, ttl=30)["won"]
