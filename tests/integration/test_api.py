"""The public HTTP contract: clear errors for bad input, ETag/304, long-poll, Idempotency-Key."""

import http.client
import threading
import time
import uuid

import pytest
import redis

from core import media, registry, stream
from tests.helpers import commands_run, enqueue, long_polls_held, round_trips, sim_time_passes


def multipart(field: str, filename: str, data: bytes, ctype: str = "video/mp4") -> tuple[bytes, dict]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
            f"Content-Type: {ctype}\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def post_oversize(api, path: str, body: bytes, headers: dict) -> int:
    """Send a too-large body the way a browser does; the server may answer 413 and hang up mid-body."""
    host = api.base.split("//")[1]
    conn = http.client.HTTPConnection(host, timeout=20)
    conn.putrequest("POST", path)
    for k, v in {**headers, "Content-Length": str(len(body))}.items():
        conn.putheader(k, v)
    conn.endheaders()
    try:
        conn.send(body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    status = conn.getresponse().status
    conn.close()
    return status


def test_health_reports_web_and_redis(api):
    res = api.call("GET", "/healthz")
    body = res.json()
    assert res.status == 200
    assert {k: body[k] for k in ("ok", "web", "redis", "sandbox")} == {
        "ok": True,
        "web": "ok",
        "redis": "ok",
        "sandbox": "ok",
    }  # ffmpeg runs confined
    assert isinstance(body["master"], int) and body["master"] > 0  # which gunicorn answered (the launcher checks it)


def test_unknown_lab_missing_token_and_wrong_token(api):
    lab, other = api.lab("ch1"), api.lab("ch1")
    assert api.call("GET", "/api/labs/nope").status == 404
    assert api.call("GET", f"/api/labs/{lab['lab_id']}").status == 401
    res = api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"vt_seconds": 600}, other["token"])
    assert res.status == 403 and res.json()["error"] == "forbidden"
    # the view token reads but cannot change anything
    assert api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["view_token"]).status == 200
    assert (
        api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"vt_seconds": 600}, lab["view_token"]).status == 403
    )


def test_bad_settings_get_422_with_a_message_per_field(api):
    lab = api.lab("ch1")
    res = api.call(
        "PATCH",
        f"/api/labs/{lab['lab_id']}/settings",
        {"vt_seconds": -1, "ack_mode": "whenever", "speed": "fast"},
        lab["token"],
    )
    assert res.status == 422
    assert set(res.json()["detail"]) == {"vt_seconds", "ack_mode", "speed"}
    res = api.call(
        "PATCH",
        f"/api/labs/{lab['lab_id']}/settings",
        raw=b"{not json",
        headers={"Content-Type": "application/json"},
        token=lab["token"],
    )
    assert res.status == 400 and res.json()["error"] == "invalid_json"


def test_a_new_labs_answer_carries_its_snapshot_as_get_answers_it(api):
    lab = api.lab("ch1")
    snap, got = lab["snapshot"], api.ok("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"])
    assert set(snap) == set(got) and snap["lab_id"] == got["lab_id"] == lab["lab_id"]
    assert snap["preset"] == "ch1" and snap["settings"] == got["settings"] == lab["settings"]
    # taken at creation: its newest event is at most the one a later GET sees
    assert snap["last_event_id"] is None or stream.order(snap["last_event_id"]) <= stream.order(got["last_event_id"])


def test_unknown_preset_and_bad_speed_are_refused_at_creation(api):
    assert api.call("POST", "/api/labs", {"preset": "ch99"}).status == 422
    assert api.call("POST", "/api/labs", {"preset": "ch1", "speed": 10**9}).status == 422
    assert api.call("POST", "/api/labs", ["ch1"]).status == 422


def test_uploads_are_sniffed_size_limited_and_real_ones_run(api, tmp_path):
    lab = api.lab("ch1", speed=200, workers=1, vt_seconds=1200)
    path = f"/api/labs/{lab['lab_id']}/jobs"
    body, headers = multipart("file", "notes.mp4", b"just some text, not a video")
    res = api.call("POST", path, raw=body, headers=headers, token=lab["token"])
    assert res.status == 415 and res.json()["error"] == "not_a_video"
    body, headers = multipart("file", "empty.mp4", b"")
    assert api.call("POST", path, raw=body, headers=headers, token=lab["token"]).status == 422
    body, headers = multipart("file", "big.mp4", b"\x00\x00\x00\x18ftypmp42" + b"\x00" * (3 * 1024 * 1024))
    assert post_oversize(api, path, body, {**headers, "Authorization": f"Bearer {lab['token']}"}) == 413
    clip = media.generate_clip(tmp_path / "c.mp4", seconds=2).read_bytes()
    body, headers = multipart("file", "../../etc/passwd.mp4", clip)
    res = api.call("POST", path, raw=body, headers=headers, token=lab["token"])
    assert res.status == 202
    job = res.json()["job_id"]
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1, timeout=60)
    out = next(j for j in snap["jobs"] if j["id"] == job)["outputs"]
    video = api.call("GET", out["240p"], token=lab["token"])
    assert video.status == 200 and video.body[4:8] == b"ftyp"


def test_job_status_has_an_etag_and_answers_304_when_unchanged(api):
    lab = api.lab("ch1", speed=20, workers=0)
    job = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {}, lab["token"]).json()
    first = api.call("GET", job["status_url"], token=lab["token"])
    assert first.status == 200 and first.headers["ETag"]
    again = api.call("GET", job["status_url"], token=lab["token"], headers={"If-None-Match": first.headers["ETag"]})
    assert again.status == 304


def test_long_poll_returns_as_soon_as_the_job_changes(api):
    lab = api.lab("ch1", speed=20, workers=0)
    api.workers_ready(lab, 0)  # none of the preset's workers left to claim the job before the test does
    job = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {}, lab["token"]).json()
    tag = api.call("GET", job["status_url"], token=lab["token"]).headers["ETag"]
    result = {}

    def poll():
        result["res"] = api.call(
            "GET", job["status_url"] + "?wait=20", token=lab["token"], headers={"If-None-Match": tag}
        )

    t = threading.Thread(target=poll)
    t.start()
    long_polls_held(api, lab, 1)
    assert t.is_alive(), "long-poll returned before anything changed"
    api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": 1}, lab["token"])
    t.join(20)
    assert result["res"].status == 200 and result["res"].json()["state"] != "queued"


def test_idempotency_key_replays_the_first_response_and_refuses_a_different_body(api):
    lab = api.lab("ch5", speed=20, workers=0)
    path = f"/api/labs/{lab['lab_id']}/jobs"
    key = {"Idempotency-Key": "upload-abc"}
    a = api.call("POST", path, {"sample": "bikes"}, lab["token"], headers=key)
    b = api.call("POST", path, {"sample": "bikes"}, lab["token"], headers=key)
    assert a.status == b.status == 202
    assert a.json()["job_id"] == b.json()["job_id"] and b.headers.get("Idempotent-Replayed") == "true"
    c = api.call("POST", path, {"sample": "bigbuckbunny"}, lab["token"], headers=key)
    assert c.status == 422
    assert api.snapshot(lab)["counts"]["enqueued"] == 1


def test_bad_job_requests_and_unknown_things_are_4xx_not_500(api):
    lab = api.lab("ch1", speed=20, workers=0)
    base = f"/api/labs/{lab['lab_id']}"
    assert api.call("POST", base + "/jobs", {"sample": "../../etc/passwd"}, lab["token"]).status == 422
    assert api.call("POST", base + "/jobs", {"duration_s": "long"}, lab["token"]).status == 422
    assert api.call("GET", base + "/jobs/999", token=lab["token"]).status == 404
    assert api.call("GET", base + "/jobs/1/outputs/..%2Fsecret", token=lab["token"]).status == 404
    assert api.call("POST", base + "/workers/w99/kill", {}, lab["token"]).status == 404
    assert api.call("POST", base + "/faults", {"type": "meteor"}, lab["token"]).status == 422
    assert api.call("POST", base + "/clock", {"action": "rewind"}, lab["token"]).status == 422
    assert api.call("GET", base + "/events?after=yesterday", token=lab["token"]).status == 422
    assert api.call("POST", base + "/dlq/replay", {"reason": 5}, lab["token"]).status == 422


def test_clock_pause_freezes_simulated_time_and_step_advances_it(api):
    lab = api.lab("ch1", speed=100, workers=0)
    base = f"/api/labs/{lab['lab_id']}/clock"
    t0 = api.call("POST", base, {"action": "pause"}, lab["token"]).json()["clock"]["t"]
    sim_time_passes(api, 100, 30)  # a running clock would have moved 30 s meanwhile
    assert api.snapshot(lab)["clock"]["t"] == t0
    t1 = api.call("POST", base, {"action": "step", "seconds": 60}, lab["token"]).json()["clock"]["t"]
    assert t1 == pytest.approx(t0 + 60, abs=0.01)
    api.call("POST", base, {"action": "resume"}, lab["token"])
    api.wait_for(lab, lambda s: s["clock"]["t"] > t1, timeout=20, what="the resumed clock to move on")


def workers_stopped(api, r, lab: dict) -> int:
    """A lab opened with no workers: the pool narrates picking it up and stopping the preset's workers on its own
    schedule (later on a busy box). Once no worker is left and its stream has stayed the same for a second: the
    stream's length."""
    api.wait_for(lab, lambda s: not s["workers"], what="the preset's workers to stop")
    before, deadline = -1, time.monotonic() + 30
    while time.monotonic() < deadline and before != r.xlen(f"lab:{lab['lab_id']}:events"):
        before = r.xlen(f"lab:{lab['lab_id']}:events")
        time.sleep(1.0)
    return before


def test_the_snapshot_says_when_the_event_stream_has_trimmed_its_oldest_events(api, r):
    from core import stream

    lab = api.lab("ch1", workers=0)
    assert api.snapshot(lab)["events_trimmed"] == 0
    before = workers_stopped(api, r, lab)
    # past the stream's cap through the same append every event takes (the cap is approximate)
    added = stream.MAXLEN + 1000
    for start in range(0, added, 1000):
        with r.pipeline(transaction=False) as pipe:
            for i in range(start, start + 1000):
                stream.append(pipe, lab["lab_id"], "clock.stepped", float(i))
            pipe.execute()
    snap = api.snapshot(lab)
    kept = r.xlen(f"lab:{lab['lab_id']}:events")
    assert kept < before + added and snap["events_trimmed"] == before + added - kept, (before, kept)


def test_a_snapshot_costs_two_round_trips_and_three_commands_a_job(api, r, redis_server, monkeypatch):
    """The dashboard's poll, read at the door and then in two round trips whatever the history: the job index,
    then one MULTI of every read (each job's record, attempts and message; one ZMSCORE for all their leases)."""
    lab = api.lab("ch1", workers=0)
    for _ in range(5):
        enqueue(api, lab, sample="carphone_pristine")
    workers_stopped(api, r, lab)  # else their events could land between the two snapshots compared below
    name = f"t-snapshot-{uuid.uuid4().hex[:8]}"
    own = redis.Redis.from_url(redis_server.url, decode_responses=True, client_name=name)
    try:
        own.ping()
        before, trips = commands_run(r, name=name), round_trips(monkeypatch, own)
        door = registry.access(own, lab["lab_id"], lab["token"])
        assert (trips(), commands_run(r, name=name) - before) == (1, 3), "the door took more than one round trip"
        assert door == (True, "owner", door.last, False) and door.last > 0, door
        snap = registry.snapshot(own, lab["lab_id"])
        assert len(snap["jobs"]) == 5 and snap["counts"]["queued"] == 5, snap["counts"]
        # ZREVRANGE; MULTI, 3 a job, ZMSCORE, the lab's own reads, EXEC
        assert (trips(), commands_run(r, name=name) - before) == (1 + 2, 3 + 1 + 1 + 3 * 5 + 1 + 10 + 1)
        assert snap == {**api.snapshot(lab), "clock": snap["clock"]}, "the API's snapshot differs from the registry's"
    finally:
        own.close()


def test_every_snapshot_counts_exactly_the_jobs_it_lists_in_each_state(api):
    """One snapshot is one instant: a job that finishes while the snapshot is read is either listed
    running and counted running, or listed done and counted done, never one of each."""
    lab = api.lab("ch1", speed=1000, workers=3, job_duration=30, vt_seconds=600)
    api.workers_ready(lab, 3)
    for _ in range(12):
        assert (
            api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "carphone_pristine"}, lab["token"]).status
            == 202
        )
    seen, deadline = 0, time.monotonic() + 120
    while time.monotonic() < deadline:
        snap = api.snapshot(lab)
        seen += 1
        listed = {state: sum(1 for j in snap["jobs"] if j["state"] == state) for state in ("running", "done", "dlq")}
        assert {state: snap["counts"][state] for state in listed} == listed, (seen, snap["counts"])
        if listed["done"] + listed["dlq"] == 12:
            break
    assert listed["done"] + listed["dlq"] == 12 and seen > 10


def test_deleting_a_lab_removes_its_keys_and_files(api, stack):
    import redis

    lab = api.lab("ch1", speed=200, workers=1)
    api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"job_type": "thumbnail", "duration_s": 10}, lab["token"])
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    assert api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"]).status == 204
    r = redis.Redis.from_url(stack.redis_url)
    deadline = time.monotonic() + 10
    while left := list(r.scan_iter(match=f"*{lab['lab_id']}*")):
        assert time.monotonic() < deadline, f"keys outlived their lab: {left[:10]}"
        time.sleep(0.2)  # the supervisor stops the lab's workers, whose RQ keys then go too
    assert not (stack.var_dir / "labs" / lab["lab_id"]).exists()
    assert api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"]).status == 404


def test_inline_transcode_makes_the_client_wait_while_enqueue_answers_at_once(api):
    """Chapter 0's hand-off measured for real (the timings are shown, never asserted)."""
    # a short job under a long gateway timeout: the inline handler answers 200 once the paced transcode ends
    lab = api.lab("ch0", speed=200, workers=0, gateway_timeout=7200)
    inline = api.call(
        "POST", f"/api/labs/{lab['lab_id']}/inline", {"sample": "bigbuckbunny", "duration_s": 60}, lab["token"]
    )
    assert inline.status == 200 and inline.json()["output_bytes"] > 1000
    assert inline.json()["simulated_s"] >= 60
    queued = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "bigbuckbunny"}, lab["token"])
    assert queued.status == 202
    assert queued.json()["enqueue_ms"] > 0 and inline.json()["elapsed_ms"] > 0
    assert api.snapshot(lab)["counts"]["queued"] == 1  # the enqueued job waits; the inline one is done
    assert api.call("POST", f"/api/labs/{lab['lab_id']}/inline", {"sample": "poison"}, lab["token"]).status == 422


def test_an_owner_call_records_the_labs_use_unless_it_was_recorded_moments_ago(api, stack):
    """Every owner call keeps its lab in use (parking, idle expiry): a call writes the time unless the stored one
    is within auth.TOUCH_GAP_S (a busy lab's owner calls every second or two); a view token's call writes none."""
    import redis

    from app.auth import TOUCH_GAP_S

    lab = api.lab("ch1", speed=20)
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    meta = f"lab:{lab['lab_id']}:meta"
    recent = time.time() - TOUCH_GAP_S / 2
    r.hset(meta, "last_active", recent)
    assert api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"]).status == 200
    assert float(r.hget(meta, "last_active")) == recent, "a call moments after the last one wrote again"
    stale = time.time() - TOUCH_GAP_S - 1
    r.hset(meta, "last_active", stale)
    assert api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["view_token"]).status == 200
    assert float(r.hget(meta, "last_active")) == stale, "a viewer's call counted as the owner's"
    assert api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"]).status == 200
    assert float(r.hget(meta, "last_active")) > time.time() - 5, "an owner call after the gap wrote nothing"
    r.close()


def test_an_idle_lab_expires_and_leaves_no_keys_files_or_workers(api, stack):
    import redis

    from tests.integration.test_launcher import processes_mentioning

    lab = api.lab("ch1", speed=200, workers=2)
    api.workers_ready(lab, 2)
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    (stack.var_dir / "labs" / lab["lab_id"]).mkdir(parents=True, exist_ok=True)
    r.hset(f"lab:{lab['lab_id']}:meta", "last_active", 0)  # idle since 1970
    deadline = time.monotonic() + 20
    while r.sismember("labs", lab["lab_id"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not r.sismember("labs", lab["lab_id"])
    deadline = time.monotonic() + 15
    while (
        list(r.scan_iter(match=f"*{lab['lab_id']}*")) or processes_mentioning(f"lab-{lab['lab_id']}")
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(r.scan_iter(match=f"*{lab['lab_id']}*")) == []
    assert processes_mentioning(f"lab-{lab['lab_id']}") == []
    assert not (stack.var_dir / "labs" / lab["lab_id"]).exists()


HOSTILE = [
    ("zero.mp4", b"", 422),
    ("notes.mp4", b"hello, I am text", 415),
    ("playlist.m3u8", b"#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n", 415),
    ("page.mp4", b"<html><script>alert(1)</script></html>", 415),
    ("\u202ereverse\u202c.mp4", b"PK\x03\x04zipfile", 415),
]


@pytest.mark.parametrize("name,data,status", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_uploads_are_refused_with_a_reason_and_nothing_else_is_affected(api, name, data, status):
    lab = api.lab("ch4", speed=20, workers=0)
    body, headers = multipart("file", name, data, ctype="application/octet-stream")
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"])
    assert res.status == status and res.json()["error"] and res.json()["detail"]
    assert api.snapshot(lab)["counts"]["enqueued"] == 0
