"""The lab's RQ worker class (workers/rqworker.py) on the real server: what it writes between two jobs."""

from __future__ import annotations

import subprocess
import uuid

import pytest
import redis
from rq import Queue

from runtime import embedded_redis
from tests.helpers import requests_sent
from workers.pool import RQ_BIN, worker_argv
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


@pytest.mark.parametrize("argv", ["the pool's", "RQ's default"])
def test_a_labs_rq_worker_and_its_horse_connect_without_a_handshake(tmp_path, argv):
    """A busy lab's worker runs a horse per job, each on a new connection, and its parent opens another to
    check on it: with RQ's default connection each starts with HELLO and two CLIENT SETINFOs. The pool's
    argv (`--connection-class`) sends none. On a server of its own, so the counts are this worker's alone."""
    server = embedded_redis.start(tmp_path / "redis", persist=False)
    try:
        conn = redis.Redis.from_url(server.url, protocol=2, driver_info=None)
        queue = Queue("t-rqw-handshake", connection=conn)
        for _ in range(2):
            queue.enqueue("os.path.basename", "a/b")
        name = f"t-rqw-{uuid.uuid4().hex[:8]}"
        args = (worker_argv(name, [queue.name]) if argv == "the pool's" else
                ["worker", "--name", name, "--quiet", "--worker-class", "workers.rqworker.LabWorker", queue.name])
        before = handshakes(conn)  # the server's start-up check's own connection made one
        done = subprocess.run([RQ_BIN, *args, "--burst", "--url", server.url], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert queue.finished_job_registry.count == 2, "the worker did not run both jobs"
        sent = handshakes(conn) - before
        if argv == "the pool's":
            assert sent == 0, f"the lab's worker sent {sent} HELLO/SETINFO"
        else:  # the measure sees them when they are sent: the parent's connection, and one per horse
            assert sent >= 3 * 3, f"RQ's default connection sent only {sent} HELLO/SETINFO"
        conn.close()
    finally:
        server.stop()


def handshakes(conn: redis.Redis) -> int:
    """HELLOs and CLIENT SETINFOs the server has run."""
    stats = conn.info("commandstats")
    return sum(int(stats.get(c, {}).get("calls", 0)) for c in ("cmdstat_hello", "cmdstat_client|setinfo"))
