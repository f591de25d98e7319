"""A paced attempt's watch on its lab's clock and faults (workers/tasks.py Watch), on the real server.

A paced job used to read both hashes every 0.25 s whatever happened; it now reads them only when the
server's keyspace notifications say they changed, and must still hear a pause or a fault at once.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from core import clock
from core.keys import key
from runtime.procs import wait
from workers.tasks import Watch


def _commands_of(r: redis.Redis, client_id: int) -> int:
    """Commands the server has run for one client connection so far (its own count, `tot-cmds`)."""
    line = r.execute_command("CLIENT LIST ID", client_id)
    return int(dict(f.split("=", 1) for f in line.split())["tot-cmds"])


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
        me = own.client_id()
        before = _commands_of(r, me)
        for _ in range(5):
            assert watch.clock() == first
            assert watch.faults() == {}
        assert not watch.wait(0.05), "the watch woke with nothing changed"
        assert _commands_of(r, me) == before, "the attempt read a hash that had not changed"

        clock.pause(r, lab)
        wait(lambda: watch.wait(0.1), 10, "a pause never woke the paced attempt")
        assert clock.reading(watch.clock(), 0)["paused"], "the attempt did not see the pause"
        r.hset(key(lab, "faults"), mapping={"storage_outage_from": 5, "storage_outage_until": 65})
        wait(lambda: watch.wait(0.1), 10, "a storage outage never woke the paced attempt")
        assert watch.faults()["storage_outage_until"] == "65"
    finally:
        watch.close()
        own.close()
