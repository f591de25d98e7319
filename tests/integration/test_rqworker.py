"""The lab's RQ worker class (workers/rqworker.py) on the real server: what it writes between two jobs."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid

import pytest
import redis
from rq import Queue
from rq.job import Job
from rq.utils import now

from runtime import embedded_redis
from tests.helpers import requests_sent
from workers.pool import RQ_BIN, worker_argv
from workers.rqworker import HEARTBEAT_GAP_S, LabWorker


def test_a_worker_writes_its_heartbeat_and_state_once_between_two_jobs(redis_server, monkeypatch):
    """RQ's parent beats and says `idle` several times within milliseconds between two jobs: the repeats are
    not sent (a beat in a pipeline neither); a new TTL, a new state and a beat HEARTBEAT_GAP_S later are."""
    conn = redis.Redis.from_url(redis_server.url)
    worker = LabWorker(
        [Queue(f"t-rqw-{uuid.uuid4().hex[:8]}", connection=conn)], connection=conn, name=f"t-rqw-{uuid.uuid4().hex[:8]}"
    )
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
        args = (
            worker_argv(name, [queue.name])
            if argv == "the pool's"
            else ["worker", "--name", name, "--quiet", "--worker-class", "workers.rqworker.LabWorker", queue.name]
        )
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


def test_a_plain_jobs_success_leaves_nothing_behind_in_one_transaction(tmp_path):
    """A lab's job (result_ttl=0, no dependents, no repeats) ends in one MULTI, where RQ's own worker first
    watches and reads its dependents and reads its executions twice on another connection: no WATCH for it.
    The job leaves no key behind, the worker counts it, and a job that keeps its result goes RQ's own way
    (its dependents watched, its result kept)."""
    server = embedded_redis.start(tmp_path / "redis", persist=False)
    try:
        conn = redis.Redis.from_url(server.url, protocol=2, driver_info=None)
        queue = Queue("t-rqw-plain", connection=conn)
        plain = [queue.enqueue("os.path.basename", f"a/{i}", result_ttl=0).id for i in range(3)]
        kept = queue.enqueue("os.path.basename", "a/kept").id
        name = f"t-rqw-{uuid.uuid4().hex[:8]}"
        before = conn.info("commandstats")
        done = subprocess.run(
            [RQ_BIN, *worker_argv(name, [queue.name]), "--burst", "--url", server.url], capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        stats = conn.info("commandstats")
        watched = int(stats.get("cmdstat_watch", {}).get("calls", 0)) - int(
            before.get("cmdstat_watch", {}).get("calls", 0)
        )
        left = sorted(k.decode() for k in conn.scan_iter() if any(j in k.decode() for j in plain))
        assert left == [], f"a plain job left keys behind: {left}"
        assert conn.zcard(f"rq:wip:{queue.name}") == 0, "an execution stayed in the started registry"
        assert conn.smembers(f"rq:worker:{name}:executions") == set(), "an execution stayed in the worker's index"
        assert Job.fetch(kept, connection=conn).return_value() == "kept", "the kept job's result was lost"
        assert queue.finished_job_registry.get_job_ids() == [kept]
        assert int(conn.hget(f"rq:worker:{name}", "successful_job_count") or 0) == 4
        assert watched == 1, f"the worker watched {watched} times (only the kept job's dependents are watched)"
        conn.close()
    finally:
        server.stop()


def test_a_suspended_lab_worker_takes_no_further_job(tmp_path):
    """The lab's worker asks whether `rq suspend` is on with one EXISTS before each dequeue (RQ's own check is a
    MULTI with a heartbeat in it). A worker already waiting takes the job that comes; suspended, it takes no
    other; resumed, it does."""
    server = embedded_redis.start(tmp_path / "redis", persist=False)
    conn = redis.Redis.from_url(server.url, protocol=2, driver_info=None)
    queue = Queue("t-rqw-suspend", connection=conn)
    name = f"t-rqw-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [RQ_BIN, *worker_argv(name, [queue.name]), "--url", server.url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        until(lambda: conn.hget(f"rq:worker:{name}", "state") == b"idle", "the worker never waited")
        subprocess.run([RQ_BIN, "suspend", "--url", server.url], check=True, capture_output=True, timeout=30)
        first = queue.enqueue("os.path.basename", "a/1", result_ttl=0)
        until(lambda: not conn.exists(first.key), "the waiting worker did not run the job that came")
        second = queue.enqueue("os.path.basename", "a/2", result_ttl=0)
        until(lambda: conn.hget(f"rq:worker:{name}", "state") == b"suspended", "the worker did not see the suspension")
        assert queue.get_job_ids() == [second.id], "a suspended worker took a job"
        subprocess.run([RQ_BIN, "resume", "--url", server.url], check=True, capture_output=True, timeout=30)
        until(lambda: not conn.exists(second.key), "the resumed worker did not run the job")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        conn.close()
        server.stop()


def until(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_worker_leaves_its_command_channel_even_when_its_thread_read_the_unsubscribe_first(redis_server):
    """rq/rq#1613 with redis-py 8: the channel's thread reads the unsubscribe's reply, then waits up to 60 s to be
    subscribed again, and `stop()` joins it without a bound: a worker's end hung for a minute. Here the race is
    made to happen (the reply read before the stop); the lab's worker still leaves at once (its join is bounded
    as RQ means it, 1 s; the bound below only tells a hang from that)."""
    conn = redis.Redis.from_url(redis_server.url)
    worker = LabWorker(
        [Queue(f"t-rqw-{uuid.uuid4().hex[:8]}", connection=conn)], connection=conn, name=f"t-rqw-{uuid.uuid4().hex[:8]}"
    )
    worker.subscribe()
    try:
        until(lambda: worker.pubsub.subscribed and worker.pubsub_thread.is_alive(), "the channel never opened")
        worker.pubsub.unsubscribe()
        until(lambda: not worker.pubsub.subscribed, "the thread never read the unsubscribe's reply")
        leaving = threading.Thread(target=worker.unsubscribe, daemon=True)
        leaving.start()
        leaving.join(20)
        assert not leaving.is_alive(), "the worker hung leaving its command channel"
    finally:
        conn.close()


def test_a_plain_jobs_horse_starts_it_in_one_write_and_leaves_the_workers_key_to_its_parent(redis_server, monkeypatch):
    """Before a job runs, RQ's horse beats the worker's key and writes the job's heartbeat twice; for a plain job
    the lab's horse writes its status (with the heartbeat) once: the parent's beats keep the worker's key. A job
    that keeps its result is started RQ's own way."""
    from redis.client import Pipeline

    conn = redis.Redis.from_url(redis_server.url)
    queue = Queue(f"t-rqw-{uuid.uuid4().hex[:8]}", connection=conn)
    plain = queue.enqueue("os.path.basename", "a/b", result_ttl=0)
    kept = queue.enqueue("os.path.basename", "a/kept")
    worker = LabWorker([queue], connection=conn, name=f"t-rqw-{uuid.uuid4().hex[:8]}")
    sent: list[list[str]] = []  # each pipeline's commands, as it is sent
    execute = Pipeline.execute

    def recorded(pipe, *a, **kw):
        sent.append([c[0][0] for c in pipe.command_stack])
        return execute(pipe, *a, **kw)

    monkeypatch.setattr(Pipeline, "execute", recorded)
    try:
        worker.prepare_job_execution(plain, remove_from_intermediate_queue=True)
        assert sent == [["HSET", "PERSIST", "LREM"]], sent
        assert conn.hget(plain.key, "status") == b"started" and conn.ttl(plain.key) == -1
        assert conn.hget(plain.key, "worker_name") == worker.name.encode()
        sent.clear()
        worker.prepare_job_execution(kept, remove_from_intermediate_queue=True)
        assert sent and "EXPIRE" in sent[0], f"a job that keeps its result was not started RQ's way: {sent}"
    finally:
        conn.delete(plain.key, kept.key, worker.key, worker.executions_key)
        conn.close()


def test_a_plain_jobs_end_takes_its_execution_out_of_every_index(redis_server):
    """The lean end removes what RQ's cleanup_execution does: the execution's record, its place in the started
    registry and in the worker's own index (which outlives the job while the worker lives), and the job's
    executions with its keys."""
    from datetime import timedelta

    conn = redis.Redis.from_url(redis_server.url)
    queue = Queue(f"t-rqw-{uuid.uuid4().hex[:8]}", connection=conn)
    job = queue.enqueue("os.path.basename", "a/b", result_ttl=0)
    worker = LabWorker([queue], connection=conn, name=f"t-rqw-{uuid.uuid4().hex[:8]}")
    try:
        execution = worker.prepare_execution(job)
        assert conn.smembers(worker.executions_key) == {execution.composite_key.encode()}
        job.started_at = now()
        job.ended_at = job.started_at + timedelta(seconds=1)
        worker.handle_job_success(job, queue, queue.started_job_registry, execution)
        assert conn.smembers(worker.executions_key) == set(), "the execution stayed in the worker's index"
        assert conn.zcard(queue.started_job_registry.key) == 0, "the execution stayed in the started registry"
        assert [k for k in conn.scan_iter() if job.id.encode() in k] == [], "the job left keys behind"
        assert int(conn.hget(worker.key, "successful_job_count")) == 1
        assert execution.id not in worker.executions
    finally:
        conn.delete(worker.key, worker.executions_key)
        conn.close()


def test_a_horse_starts_with_the_servers_notification_setting_in_hand(r, monkeypatch):
    """Whether the server sends keyspace notifications is asked once per NOTIFY_CHECK_S, by the worker parent
    before it forks (a horse inherits the answer): not once per job. A "yes" is trusted that long; a "no" is
    asked again each time (a watch then polls, so it must not miss the setting coming on)."""
    from workers import tasks

    clock = [5000.0]
    monkeypatch.setattr("workers.tasks.time.monotonic", lambda: clock[0])
    monkeypatch.setattr(tasks, "_notify", None)
    flags = r.config_get("notify-keyspace-events")["notify-keyspace-events"]
    try:
        r.config_set("notify-keyspace-events", "".join(sorted(set(flags) | set("Kh"))))  # as the supervisor's Waker
        on = r.config_get("notify-keyspace-events")["notify-keyspace-events"]  # as the server spells it
        sent = requests_sent(r, monkeypatch)
        assert tasks.keyspace_flags(r) == on and sent == ["CONFIG GET"]
        sent.clear()
        clock[0] += tasks.NOTIFY_CHECK_S / 2
        assert tasks.keyspace_flags(r) == on and sent == [], f"asked again within the gap: {sent}"
        clock[0] += tasks.NOTIFY_CHECK_S
        assert tasks.keyspace_flags(r) == on and sent == ["CONFIG GET"], sent
        r.config_set("notify-keyspace-events", "")
        clock[0] += tasks.NOTIFY_CHECK_S
        sent.clear()
        assert tasks.keyspace_flags(r) == "" and tasks.keyspace_flags(r) == ""
        assert sent == ["CONFIG GET", "CONFIG GET"], f"a 'no' was trusted: {sent}"
    finally:
        r.config_set("notify-keyspace-events", flags)
