"""The lab's RQ worker class (workers/rqworker.py) on the real server: what it writes between two jobs."""

from __future__ import annotations

import uuid

import pytest
import redis
from rq import Queue

from tests.helpers import requests_sent
from workers.rqworker import HEARTBEAT_GAP_S, LabWorker

pytestmark = pytest.mark.integration


def test_a_worker_writes_its_heartbeat_and_state_once_between_two_jobs(redis_server, monkeypatch):
    """RQ's parent beats and says `idle` several times within milliseconds between two jobs: the repeats are
    not sent (a beat in a pipeline neither); a new TTL, a new state and a beat HEARTBEAT_GAP_S later are."""
    conn = redis.Redis.from_url(redis_server.url)
    worker = LabWorker([Queue(f"t-rqw-{uuid.uuid4().hex[:8]}", connection=conn)], connection=conn,
                       name=f"t-rqw-{uuid.uuid4().hex[:8]}")
    clock = [1000.0]
    monkeypatch.setattr("workers.rqworker.time.monotonic", lambda: clock[0])
    try:
        sent = requests_sent(conn, monkeypatch)
        worker.set_state("idle")
        worker.heartbeat()
        assert sent == ["HSET", "HSET", "EXPIRE", "EXPIRE"], sent
        sent.clear()
        worker.heartbeat()
        worker.set_state("idle")
        worker.heartbeat()
        assert sent == [], f"a repeat within the gap was sent again: {sent}"
        worker.heartbeat(150)  # another TTL
        assert sent == ["HSET", "EXPIRE", "EXPIRE"], sent
        sent.clear()
        clock[0] += HEARTBEAT_GAP_S
        worker.heartbeat(150)  # the gap has passed
        worker.set_state("busy")
        assert sent == ["HSET", "EXPIRE", "EXPIRE", "HSET"], sent
        sent.clear()
        with conn.pipeline() as pipe:  # as the suspension check beats, in its pipeline
            worker.heartbeat(150, pipeline=pipe)
            assert pipe.command_stack == [], "a pipelined repeat was queued"
            worker.heartbeat(90, pipeline=pipe)  # as a horse beats while it works: another TTL
            assert len(pipe.command_stack) == 3, "a pipelined heartbeat with a new TTL was skipped"
            pipe.execute()
        assert 0 < conn.ttl(worker.key) <= 90
        assert conn.ttl(worker.key) > 0 and conn.hget(worker.key, "state") == b"busy"
    finally:
        conn.delete(worker.key, worker.executions_key)
        conn.close()
