"""Uploads and outputs as blobs in the Redis-protocol server (core/blobs.py), on a real server."""

from __future__ import annotations

import pytest
import redis

from core import blobs, media, registry
from core.broker.retry import NonRetryable
from core.keys import LABS, key
from tests.helpers import requests_sent
from tests.integration.test_api import multipart
from workers import tasks


@pytest.fixture
def tight_caps(monkeypatch):
    monkeypatch.setenv("MAX_LAB_BYTES", "1000")
    monkeypatch.setenv("MAX_BLOB_BYTES", "1500")
    blobs.caps.cache_clear()
    yield
    blobs.caps.cache_clear()


@pytest.fixture
def own_db(redis_server):
    """A database of the session's server no other test's lab writes to: the server-wide blob total is
    this test's alone."""
    client = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/5", decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def test_blobs_are_capped_per_lab_and_per_server_and_teardown_gives_the_bytes_back(own_db, tight_caps, tmp_path):
    r = own_db
    r.sadd(LABS, "bA", "bB")
    before = blobs.server_usage(r)
    assert blobs.put(r, "bA", "uploads/a.bin", b"x" * 600) == 600
    with pytest.raises(blobs.BlobFull) as full:
        blobs.put(r, "bA", "uploads/b.bin", b"y" * 600)
    assert full.value.scope == "lab"
    assert blobs.put(r, "bA", "uploads/a.bin", b"z" * 900) == 900  # an overwrite counts once
    blobs.put(r, "bB", "uploads/c.bin", b"w" * 500)
    with pytest.raises(blobs.BlobFull) as full:
        blobs.put(r, "bB", "uploads/d.bin", b"v" * 200)
    assert full.value.scope == "server"
    assert blobs.usage(r, "bA") == 900 and blobs.server_usage(r) - before == 1400
    assert blobs.get(r, "bA", "uploads/a.bin") == b"z" * 900
    # `r` decodes responses, yet blobs come back as bytes; a cached copy lands on local disk
    path = blobs.local_path(r, "bA", blobs.ref("uploads/a.bin"), tmp_path)
    assert path.read_bytes() == b"z" * 900 and path.is_relative_to(tmp_path)
    with pytest.raises(FileNotFoundError):
        blobs.local_path(r, "bA", blobs.ref("uploads/none.bin"), tmp_path)
    for lab in ("bA", "bB"):
        registry.teardown(r, lab, tmp_path)
        assert blobs.names(r, lab) == {} and blobs.usage(r, lab) == 0
    assert blobs.server_usage(r) == before


def test_an_attempts_outputs_are_stored_all_or_none_in_one_request(own_db, tight_caps, monkeypatch):
    """An attempt's renditions go up together (workers/tasks.py publish): one check of the caps for their sum,
    one request, and a set that would pass a cap leaves none of its blobs behind."""
    r = own_db
    r.sadd(LABS, "mA")
    blobs.put(r, "mA", "uploads/src.bin", b"s" * 100)  # (the script loaded)
    sent = requests_sent(r, monkeypatch)
    assert blobs.put_many(r, "mA", {"transcoded/1/240p.mp4": b"a" * 300, "transcoded/1/thumb.jpg": b"t" * 50}) == {
        "transcoded/1/240p.mp4": 300,
        "transcoded/1/thumb.jpg": 50,
    }
    assert sent == ["HGET", "EVALSHA"], f"the outputs took more than the lab's client and one script: {sent}"
    assert blobs.usage(r, "mA") == 450
    with pytest.raises(blobs.BlobFull) as full:  # 450 + 400 + 200 + 1 - 50 (thumb.jpg overwritten) > 1000
        blobs.put_many(
            r,
            "mA",
            {
                "transcoded/2/240p.mp4": b"b" * 400,
                "transcoded/2/480p.mp4": b"c" * 200,
                "transcoded/1/thumb.jpg": b"u" * 1,
            },
        )
    assert full.value.scope == "lab"
    assert blobs.names(r, "mA", "transcoded/2/") == {}, "a set past the cap left some of its blobs behind"
    assert blobs.get(r, "mA", "transcoded/1/thumb.jpg") == b"t" * 50 and blobs.usage(r, "mA") == 450
    assert blobs.put_many(r, "mA", {"transcoded/1/thumb.jpg": b"v" * 20, "transcoded/2/240p.mp4": b"d" * 500}) == {
        "transcoded/1/thumb.jpg": 20,
        "transcoded/2/240p.mp4": 500,
    }
    assert blobs.usage(r, "mA") == 920 and blobs.names(r, "mA")["transcoded/1/thumb.jpg"] == 20


def test_an_unguarded_write_goes_out_in_pieces(own_db, tmp_path):
    r = own_db
    r.sadd(LABS, "bC")
    src = tmp_path / "f.bin"
    src.write_bytes(bytes(range(256)) * 4096)  # 1 MiB: four pieces
    assert blobs.put_file(r, "bC", "transcoded/1/240p-w1-a1.mp4", src, atomic=False) == src.stat().st_size
    assert blobs.get(r, "bC", "transcoded/1/240p-w1-a1.mp4") == src.read_bytes()
    registry.teardown(r, "bC", tmp_path)


def test_a_client_is_capped_across_its_labs_and_a_deleted_lab_stores_nothing(own_db, monkeypatch, tmp_path):
    monkeypatch.setenv("MAX_LAB_BYTES", "1000")
    monkeypatch.setenv("MAX_BLOB_BYTES", "2000")
    monkeypatch.setenv("CLIENT_BLOB_SHARE", "0.5")  # 1000 bytes per client
    blobs.caps.cache_clear()
    r = own_db
    for lab, who in (("cA", "10.0.0.1"), ("cB", "10.0.0.1"), ("cC", "10.0.0.2")):
        r.sadd(LABS, lab)
        r.hset(key(lab, "meta"), "client", who)
    blobs.put(r, "cA", "uploads/a.bin", b"x" * 600)
    with pytest.raises(blobs.BlobFull) as full:
        blobs.put(r, "cB", "uploads/b.bin", b"y" * 600)  # within cB's own cap, past its client's
    assert full.value.scope == "client"
    assert blobs.put(r, "cC", "uploads/c.bin", b"z" * 600) == 600  # another client is not held back
    assert blobs.client_usage(r, "10.0.0.1") == 600 and blobs.client_usage(r, "10.0.0.2") == 600

    r.srem(LABS, "cC")  # deleted: what arrives after the delete is refused and leaves no byte
    with pytest.raises(blobs.LabGone):
        blobs.put(r, "cC", "uploads/late.bin", b"w" * 100)
    assert blobs.get(r, "cC", "uploads/late.bin") is None
    registry.teardown(r, "cC", tmp_path)
    assert blobs.client_usage(r, "10.0.0.2") == 0 and blobs.server_usage(r) == 600

    r.set(blobs.TOTAL, 999_999)  # counters left wrong by a crash or an older AOF
    r.set(blobs.client_key("10.0.0.1"), 5)
    r.set(blobs.client_key("10.0.0.9"), 77)
    assert blobs.recount(r) == 600
    assert blobs.client_usage(r, "10.0.0.1") == 600 and blobs.client_usage(r, "10.0.0.9") == 0
    blobs.caps.cache_clear()


@pytest.mark.parametrize("atomic", [True, False])
def test_an_attempts_outputs_count_in_its_clients_share_like_its_uploads(own_db, monkeypatch, tmp_path, atomic):
    """What a worker publishes (workers/tasks.py publish, guarded in one step or unguarded in pieces) counts
    against the client's share of the store exactly as an upload does: outputs are the bulk of a lab's bytes."""
    monkeypatch.setenv("MAX_LAB_BYTES", "1000")
    monkeypatch.setenv("MAX_BLOB_BYTES", "4000")
    monkeypatch.setenv("CLIENT_BLOB_SHARE", "0.25")  # 1000 bytes per client
    blobs.caps.cache_clear()
    r = own_db
    for lab in ("oA", "oB"):
        r.sadd(LABS, lab)
        r.hset(key(lab, "meta"), "client", "10.0.0.3")

    def outputs(job: int, size: int) -> dict:
        made = tmp_path / f"{job}-240p.mp4"
        made.write_bytes(b"o" * size)
        return {f"transcoded/{job}/240p.mp4": made}

    blobs.put(r, "oA", "uploads/src.bin", b"u" * 300)
    tasks.publish(r, "oB", outputs(1, 400), atomic)
    assert blobs.client_usage(r, "10.0.0.3") == 700, "the outputs were left out of their client's bytes"
    with pytest.raises(NonRetryable, match="client"):  # within oB's own cap, past its client's share
        tasks.publish(r, "oB", outputs(2, 400), atomic)
    assert blobs.client_usage(r, "10.0.0.3") == 700 and blobs.names(r, "oB", "transcoded/2/") == {}
    blobs.caps.cache_clear()


def test_an_upload_lives_in_the_server_not_on_the_web_hosts_disk_and_its_outputs_are_served(api, stack):
    lab = api.lab("ch1", speed=200, workers=1, job_duration=10)
    body, headers = multipart("file", "clip.mp4", media.sample_clip("carphone_pristine").read_bytes())
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"])
    assert res.status == 202, res.body
    job_id = res.json()["job_id"]
    r = redis.Redis.from_url(stack.redis_url)
    assert list(blobs.names(r, lab["lab_id"], "uploads/")) == [f"uploads/{res.json()['payload']['video_id']}.bin"]
    assert not list((stack.var_dir / "tmp").glob("upload-*")), "the upload's temp file is gone"
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    job = next(j for j in snap["jobs"] if j["id"] == job_id)
    got = api.call("GET", job["outputs"]["240p"], token=lab["token"])
    assert got.status == 200 and got.headers["Content-Type"] == "video/mp4"
    assert got.body == blobs.get(r, lab["lab_id"], f"transcoded/{job_id}/240p.mp4")
    part = api.call("GET", job["outputs"]["240p"], token=lab["token"], headers={"Range": "bytes=0-99"})
    assert part.status == 206 and part.body == got.body[:100]  # <video> seeks with ranges
    again = api.call("GET", job["outputs"]["240p"], token=lab["token"], headers={"If-None-Match": got.headers["ETag"]})
    assert again.status == 304
    # the only local copies are the worker host's cache and nothing under transcoded/ survives a publish
    assert not [p for p in (stack.var_dir / "labs" / lab["lab_id"]).rglob("*.mp4") if "transcoded" in p.parts]
