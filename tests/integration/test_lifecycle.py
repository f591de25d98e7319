"""Nothing outlives its lab, and nobody can fill the server: on a stack of its own, with its own
Redis-protocol server (AOF on, a memory ceiling), a small blob store and a short reconcile period.

Deleted labs leave no process (rq worker, horse, ffmpeg, scheduler replica) and no blob, also when an
upload finishes after the delete; one client's byte budget leaves room for another's upload and job; a
write at the server's maxmemory answers 507 with a reason; an event flood with 2 kB strings and a large
AOF after its data went away stay bounded. Everything real: valkey, supervisor, rq workers, ffmpeg.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
import uuid

import pytest

from core import blobs, media
from core.keys import LABS
from core.procs import processes_matching, wait
from runtime import embedded_redis
from runtime.harness.stack import Stack
from tests.integration.test_api import multipart

MAX_BLOB_BYTES, CLIENT_SHARE = 8_000_000, 0.25  # one client may hold 2 MB, the server 8 MB
HOOK = "http://127.0.0.1:9/"  # an allowlisted webhook target nobody listens on
PRESETS = ["ch1", "ch2", "ch6", "ch7", "ch8"] * 2  # workers, fleets and chapter 7's scheduler replicas


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A stack on a server of its own (the memory and AOF tests change its configuration)."""
    root = tmp_path_factory.mktemp("lifecycle")
    server = embedded_redis.start(root / "redis", persist=True, maxmemory=512 * 1024 * 1024)
    try:
        with Stack(
            "lifecycle",
            root=root,
            redis_url=server.url,
            env={
                "MAX_LABS": "40",
                "MAX_BLOB_BYTES": str(MAX_BLOB_BYTES),
                "CLIENT_BLOB_SHARE": str(CLIENT_SHARE),
                "MAX_LAB_BYTES": str(MAX_BLOB_BYTES),
                "MAX_UPLOAD_BYTES": str(2 * 1024 * 1024),
                "RECONCILE_S": "3",
                "WEBHOOK_TEST_ALLOWLIST": HOOK,
            },
        ) as s:
            yield s
    finally:
        server.stop()


@pytest.fixture
def r(own):
    return own.redis_client()


def clip() -> tuple[bytes, dict]:
    return multipart("file", "clip.mp4", media.sample_clip("carphone_pristine").read_bytes())  # ~590 kB


def processes(own) -> int:
    text = own.api().call("GET", "/metrics").body.decode()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("asyncworklab_processes ")))


def upload_across_delete(own, lab: dict) -> int:
    """An upload whose last bytes arrive after its lab was deleted: the status it gets."""
    body, headers = clip()
    conn = http.client.HTTPConnection(own.url.split("//")[1], timeout=60)
    conn.putrequest("POST", f"/api/labs/{lab['lab_id']}/jobs")
    for k, v in {
        **headers,
        "Content-Length": str(len(body)),
        "Authorization": f"Bearer {lab['token']}",
        "Idempotency-Key": "across-delete",
    }.items():
        conn.putheader(k, v)
    conn.endheaders()
    conn.send(body[: len(body) // 2])
    # the server is reading this upload before the delete: it has claimed the request's Idempotency-Key
    held = f"/api/labs/{lab['lab_id']}/idempotency"
    wait(
        lambda: own.api().call("GET", held, token=lab["token"]).json()["keys_held"] >= 1,
        20,
        "the half-sent upload never reached the server",
    )
    assert own.api().call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"]).status == 204
    conn.send(body[len(body) // 2 :])
    status = conn.getresponse().status
    conn.close()
    return status


def test_deleted_labs_leave_no_process_and_no_blob(own, r):
    api = own.api()
    before = blobs.server_usage(r)
    labs: list[dict] = [{}] * len(PRESETS)

    def open_and_delete(i: int) -> None:
        lab = labs[i] = api.ok("POST", "/api/labs", {"preset": PRESETS[i], "speed": 100}, expect=(201,))
        body, headers = clip()
        api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"])
        if i % 2:  # the other half at once (often in the tick that starts their workers)
            time.sleep(2)
        assert api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"]).status == 204

    threads = [threading.Thread(target=open_and_delete, args=(i,)) for i in range(len(PRESETS))]
    for t in threads:
        t.start()
    racing = api.ok("POST", "/api/labs", {"preset": "ch1", "speed": 100}, expect=(201,))
    late = upload_across_delete(own, racing)
    for t in threads:
        t.join()
    ids = [lab["lab_id"] for lab in [*labs, racing]]
    assert late in (404, 410), f"an upload finishing after its lab's delete was answered {late}"

    wait(lambda: not processes_matching(*ids), 60, f"processes of deleted labs still run: {processes_matching(*ids)}")
    wait(lambda: processes(own) == 0, 20, "/metrics never said 0 processes with no lab left")
    wait(
        lambda: blobs.server_usage(r) == before,
        20,
        f"blobs:bytes stayed at {blobs.server_usage(r)} (was {before} before the labs)",
    )
    wait(
        lambda: not [k for lab in ids for k in r.scan_iter(match=f"lab:{lab}:*", count=1000)],
        20,
        "keys of deleted labs were left",
    )


def test_the_reconcile_sweeps_the_keys_of_a_lab_nobody_registered_and_keeps_a_live_ones(own, r):
    """Keys whose lab is not in `labs` (a teardown cut short by a crash) go at the next reconcile; a live
    lab's stay. (The session's shared stack reconciles rarely, since tests there write unregistered labs.)"""
    api = own.api()
    lab = api.lab("ch1")
    live = lab["lab_id"]
    ghost = f"ghost{uuid.uuid4().hex[:8]}"
    r.set(f"lab:{ghost}:settings", "{}")
    r.zadd(f"lab:{ghost}:leases", {"1": 1.0})
    r.hset(f"lab:{ghost}:clock", mapping={"base_sim": 0, "speed": 20})
    wait(lambda: not list(r.scan_iter(match=f"lab:{ghost}:*")), 20, "the unregistered lab's keys were never swept")
    assert r.exists(f"lab:{live}:settings") and r.sismember(LABS, live), "the reconcile swept a live lab"
    api.delete(lab)


def test_one_client_filling_its_budget_leaves_room_for_another(own, r):
    greedy, other = own.api(source="127.0.0.2"), own.api(source="127.0.0.3")
    try:
        body, headers = clip()
        statuses = []
        while len(statuses) < 20 and (not statuses or statuses[-1] == 202):
            lab = greedy.lab("ch1", workers=0)  # a lab per upload: the budget is the client's, not a lab's
            res = greedy.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"])
            statuses.append(res.status)
        assert statuses[-1] == 507 and res.data["error"] == "client_storage_full", (statuses, res.data)
        assert "one client" in res.data["detail"]

        lab = other.lab("ch1")
        res = other.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"])
        assert res.status == 202, f"another client's upload was refused: {res.status} {res.body[:200]!r}"
        snap = other.wait_for(lab, lambda s: s["counts"]["done"] == 1, 120, "the other client's job never finished")
        assert snap["counts"]["dlq"] == 0
        assert blobs.client_usage(r, "127.0.0.3") > len(body) // 2  # its upload and outputs count as its own

        # the greedy client's jobs now run: outputs past its budget are refused, and each such job ends in
        # the DLQ, counted with its reason, never lost
        lab = greedy.created[0]
        for _ in range(8):  # sample clips: no upload, but their outputs are the client's bytes too
            assert greedy.enqueue(lab, {"sample": "carphone_pristine"}).status == 202
        greedy.ok("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": 1}, lab["token"], expect=(200,))
        ends = greedy.wait_for(
            lab,
            lambda s: s["counts"]["done"] + s["counts"]["dlq"] == 9,
            240,
            "the greedy client's jobs never all ended",
        )["counts"]
        dead = greedy.ok("GET", f"/api/labs/{lab['lab_id']}/dlq", token=lab["token"])["dead_letters"]
        assert ends["dlq"] == len(dead) >= 1, {k: ends[k] for k in ("done", "dlq")}
        assert all("output not stored" in e["last_error"] + e["reason"] for e in dead), dead
        assert blobs.client_usage(r, "127.0.0.2") <= MAX_BLOB_BYTES * CLIENT_SHARE
    finally:
        greedy.delete_created()
        other.delete_created()


def test_a_write_at_maxmemory_answers_507_with_a_reason(own, r):
    api = own.api()
    lab = api.lab("ch1")
    ceiling = r.config_get("maxmemory")["maxmemory"]
    try:
        r.config_set("maxmemory", 1)  # the server is past its ceiling: every write that adds data is refused
        res = api.enqueue(lab, {"sample": "carphone_pristine"})
    finally:
        r.config_set("maxmemory", ceiling)
    assert res.status == 507, f"{res.status} {res.body[:200]!r}"
    assert res.data["error"] == "server_memory_full" and "maxmemory" in res.data["detail"]
    assert own.supervisor.poll() is None, "the supervisor died at the memory ceiling"
    assert api.enqueue(lab, {"sample": "carphone_pristine"}).status == 202
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1, 120, "a job after the ceiling was lifted never finished")
    api.delete(lab)


def test_an_event_flood_with_long_strings_stays_bounded(own, r):
    api = own.api()
    lab = api.lab("ch1", workers=0)
    events = f"lab:{lab['lab_id']}:events"
    url, n = HOOK + "a" * (2000 - len(HOOK)), 400
    used = int(r.info("memory")["used_memory"])
    for _ in range(n):
        api.ok("PUT", f"/api/labs/{lab['lab_id']}/webhook", {"url": url}, lab["token"], expect=(200,))
    stream_bytes = r.memory_usage(events) or 0
    grown = int(r.info("memory")["used_memory"]) - used
    assert stream_bytes < n * len(url) / 2, f"{n} events with a 2 kB URL took {stream_bytes} bytes of stream"
    assert grown < n * len(url), f"the server grew {grown} bytes for {n} events of a 2 kB URL"
    registered = [e for e in api.events(lab) if e["type"] == "webhook.registered"]
    assert len(registered) == n and registered[-1]["truncated"] is True
    assert registered[-1]["data"]["target"].startswith(HOOK)
    api.delete(lab)


def test_the_aof_is_rewritten_when_it_outgrows_the_live_data(own, r):
    """64 MB written, rewritten into the AOF, then deleted: the pool's reconcile rewrites the file, where the
    server's own trigger (the file doubled since its last rewrite) would wait for 64 MB more."""
    for i in range(4):
        r.set(f"filler:{i}", os.urandom(16 * 1024 * 1024))  # random: the AOF's RDB preamble cannot compress it
    rewriting = lambda: int(r.info("persistence")["aof_rewrite_in_progress"])  # noqa: E731
    wait(lambda: not rewriting(), 60, "the server's own AOF rewrite never ended")
    r.bgrewriteaof()  # the file now holds the 64 MB as its base
    wait(lambda: not rewriting(), 60, "the AOF rewrite never ended")
    peak = int(r.info("persistence")["aof_current_size"])
    assert peak > 64 * 1024 * 1024
    r.delete(*(f"filler:{i}" for i in range(4)))
    wait(
        lambda: int(r.info("persistence")["aof_current_size"]) < peak / 4,
        60,
        f"the AOF stayed at {int(r.info('persistence')['aof_current_size'])} bytes for "
        f"{int(r.info('memory')['used_memory_dataset'])} bytes of live data",
    )
