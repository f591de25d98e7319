"""The replay harness against the real server (runtime/harness/replay.py): MONITOR as it records, and copies of a
recorded session doing on their own keys what the session did on its own."""

from __future__ import annotations

import time
import uuid

import redis

from core.procs import wait
from runtime.harness.replay import Recorder, build, clone_keys, plan, rename, run


def test_the_recorder_keeps_every_argument_byte_for_byte_and_who_sent_it(redis_server):
    rec = Recorder(redis_server.url).start()
    client = redis.Redis.from_url(redis_server.url)
    name = f"t-rec-{uuid.uuid4().hex[:8]}".encode()
    odd = [b'quote " and \\ back', bytes(range(256)), b"\r\n*1\r\n$4\r\nPING", "é€".encode(), b""]
    try:
        client.rpush(name, *odd)
        wait(lambda: any(argv[1:2] == [name] for _, _, argv in rec.commands), 10, "the RPUSH was never recorded")
        _, addr, argv = next(c for c in rec.commands if c[2][1:2] == [name])
        assert argv == [b"RPUSH", name, *odd]
        assert addr == client.client_info()["addr"]
    finally:
        rec.stop()
        client.delete(name)
        client.close()


def test_copies_of_a_recorded_session_do_on_their_own_keys_what_it_did(redis_server):
    url, lab = redis_server.url, uuid.uuid4().hex[:10]
    r = redis.Redis.from_url(url, decode_responses=True)
    session = redis.Redis.from_url(url, decode_responses=True)
    names = [rename([lab], c) for c in range(2)]
    copies = [new.decode() for n in names for new in n.values()]
    r.hset(f"lab:{lab}:settings", "speed", 20)  # made before the window: each copy starts from a clone of it
    session.ping()  # connected (and its client library named) before the window
    rec = Recorder(url).start()
    try:
        w0 = rec.mark(r)
        now = time.time()
        session.hset(f"lab:{lab}:clock", "base_real", f"{now:.4f}")
        session.xadd(f"lab:{lab}:events", {"e": "x"})
        session.zadd(f"lab:{lab}:leases", {"j": now})
        with session.pipeline(transaction=False) as pipe:  # one read for the server: one group to replay
            pipe.incr(f"lab:{lab}:n")
            pipe.incr(f"lab:{lab}:n")
            pipe.execute()
        session.hget(f"lab:{lab}:settings", "speed")
        wait(lambda: sum(1 for c in rec.commands if lab.encode() in b"".join(c[2])) >= 6, 10, "the session unrecorded")
        w1 = time.time()
        commands = rec.stop()
        raw = redis.Redis.from_url(url)  # keys as bytes, as the copies' names are
        assert clone_keys(raw, names) == 5 * len(names), "not every key of the lab was cloned for each copy"
        per = plan(commands, (w0, w1), rec.open_at_mark, rec.ignore)
        assert len(per) == 1, f"the bench's own connections were replayed too: {list(per)}"
        start = time.time() + 0.2
        conns = [c for n in names for c in build(per, n, w0, start, (w0 - 60, w1 + 60))]
        assert [len(c.groups) for c in conns] == [5, 5], "the pipeline was not one group, or a command was lost"
        res = run(url, conns, (start, start + (w1 - w0) + 1.0), lambda: ())
        assert (res.errors, res.dropped, res.sent, len(res.latency_ms)) == (0, 0, 10, 10)
        for copy in copies:
            assert r.get(f"lab:{copy}:n") == "4", "the copy's pipeline did not run on its own key (cloned 2, +2)"
            assert r.xlen(f"lab:{copy}:events") == 2
            moved = float(r.hget(f"lab:{copy}:clock", "base_real"))
            assert abs(moved - (now + start - w0)) < 1e-3, "a time in the copy was not moved with its start"
            assert abs(r.zscore(f"lab:{copy}:leases", "j") - (now + start - w0)) < 1e-3
        assert r.get(f"lab:{lab}:n") == "2", "a copy wrote to the recorded lab's keys"
    finally:
        r.delete(*(f"lab:{x}:{k}" for x in [lab, *copies] for k in ("settings", "clock", "events", "leases", "n")))
        session.close()
        r.close()
