"""Limits on a stack of their own, configured tight: per-client rate limits, the machine's lab and
worker ceilings (429 + Retry-After), idle expiry that leaves nothing behind, and an access log that
never shows a token. Everything real: supervisor, rq workers, ffmpeg, gunicorn on a free port.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import websocket
from playwright.sync_api import expect

import chapters
from core import blobs, hosts, media
from core.keys import owner
from core.procs import wait
from runtime.harness.stack import Stack
from tests.conftest import ARTIFACTS
from tests.integration.test_api import multipart
from tests.integration.test_launcher import processes_mentioning

RATE_JOBS, RATE_KILLS, WINDOW = 4, 2, 3600
MAX_LABS, MAX_WORKERS, IDLE_TTL, MAX_LAB_BYTES = 3, 3, 12, 1_000_000
ROOM_MISSES, ROOM_SEATS, METRICS_TOKEN = 3, 5, "metrics-secret-for-tests"
WS_PER_CLIENT, CONN_PER_CLIENT, HEADER_TIMEOUT = 8, 24, 2


@pytest.fixture(scope="module")
def tight(redis_server, tmp_path_factory):
    """A second real stack, configured tight, on its own database of the session's server (lab counts
    see only its labs), with an access log."""
    root = tmp_path_factory.mktemp("tight")
    db = redis_server.url.rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(db).flushdb()
    with Stack(
        "tight",
        root=root,
        redis_url=db,
        access_log=str(root / "access.log"),
        env={
            "MAX_LABS": str(MAX_LABS),
            "MAX_WORKERS": str(MAX_WORKERS),
            "LAB_IDLE_TTL": str(IDLE_TTL),
            "RATE_JOBS": str(RATE_JOBS),
            "RATE_KILLS": str(RATE_KILLS),
            "RATE_WINDOW": str(WINDOW),
            "MAX_UPLOAD_BYTES": str(2 * 1024 * 1024),
            "MAX_LAB_BYTES": str(MAX_LAB_BYTES),
            "RATE_ROOM_LOOKUPS": str(ROOM_MISSES),
            "RATE_ROOM_SEATS": str(ROOM_SEATS),
            "METRICS_TOKEN": METRICS_TOKEN,
            "RATE_CHALLENGE_RUNS": "1",
            "MAX_CLIENT_LABS": "4",
            "RATE_LABS": "200",
            "WS_PER_CLIENT": str(WS_PER_CLIENT),
            "CONN_PER_CLIENT": str(CONN_PER_CLIENT),
            "HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        },
    ) as s:
        yield s


@pytest.fixture
def tapi(tight):
    client = tight.api()
    yield client
    client.delete_created()
    r = redis.Redis.from_url(tight.redis_url)
    deadline = time.monotonic() + 20
    while r.scard("labs") and time.monotonic() < deadline:  # the next test starts with an empty machine
        time.sleep(0.1)


def post_from(stack, source_ip: str, path: str, body: dict, token: str) -> tuple[int, dict, dict]:
    """A POST from another loopback address: another client, as far as the server can tell."""
    conn = http.client.HTTPConnection(stack.url.split("//")[1], timeout=20, source_address=(source_ip, 0))
    conn.request(
        "POST", path, json.dumps(body), {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    )
    res = conn.getresponse()
    out = res.status, dict(res.getheaders()), json.loads(res.read() or b"{}")
    conn.close()
    return out


def until_limited(stack, source_ip: str, path: str, body: dict, token: str, limit: int) -> list[int]:
    """Statuses of limit + 1 calls in one fixed window (re-run if an hour boundary passed meanwhile)."""
    while True:
        slot = int(time.time() // WINDOW)
        statuses = [post_from(stack, source_ip, path, body, token)[0] for _ in range(limit + 1)]
        if int(time.time() // WINDOW) == slot:
            return statuses


def test_one_client_gets_429_with_retry_after_past_its_job_budget_and_others_do_not(tight, tapi):
    lab = tapi.lab("ch0", speed=20, workers=0)
    path = f"/api/labs/{lab['lab_id']}/jobs"
    statuses = until_limited(tight, "127.0.0.2", path, {"sample": "carphone_pristine"}, lab["token"], RATE_JOBS)
    assert statuses == [202] * RATE_JOBS + [429]
    status, headers, body = post_from(tight, "127.0.0.2", path, {"sample": "carphone_pristine"}, lab["token"])
    assert status == 429 and body["error"] == "rate_limited" and "try again in" in body["detail"]
    assert 1 <= int(headers["Retry-After"]) <= WINDOW
    assert tapi.snapshot(lab)["counts"]["enqueued"] == RATE_JOBS, "a refused call made no job"
    # another client is not held back by the first one's budget
    assert post_from(tight, "127.0.0.3", path, {"sample": "carphone_pristine"}, lab["token"])[0] == 202


def test_challenge_runs_are_rate_limited_per_client(tight, tapi):
    def body(challenge: str) -> dict:
        return {"challenge": challenge, "code": chapters.CHALLENGES[challenge]["starter"]}

    def run(lab: dict, challenge: str, source_ip: str = "127.0.0.6") -> tuple[int, dict, dict]:
        return post_from(tight, source_ip, f"/api/labs/{lab['lab_id']}/challenge", body(challenge), lab["token"])

    # chapter 5's run asks for more workers than this host runs (MAX_WORKERS): refused for that, and it spends
    # nothing of the client's one run
    big = tapi.lab("ch5", speed=20, workers=0)
    assert chapters.CHALLENGES["effectively-once"]["settings"]["workers"] > MAX_WORKERS
    status, _, refused = run(big, "effectively-once")
    assert status == 429 and refused["error"] == "workers_full", refused
    # chapter 4's fits (its 3 workers): the client's one run goes, its next is refused for the budget
    labs = [tapi.lab("ch4", speed=20, workers=0) for _ in range(2)]
    runs = [run(lab, "retry-policy") for lab in labs]
    assert runs[0][0] == 202 and runs[1][0] == 429 and runs[1][2]["error"] == "rate_limited", runs
    # another client is not held back by the first one's budget (the first run's lab gone, its workers free)
    tapi.delete(labs[0])
    assert run(labs[1], "retry-policy", "127.0.0.7")[0] == 202


def test_worker_kills_are_rate_limited_per_client(tight, tapi):
    lab = tapi.lab("ch0", speed=200)
    tapi.workers_ready(lab, 1)
    kill = f"/api/labs/{lab['lab_id']}/workers/w1/kill"
    statuses = until_limited(tight, "127.0.0.4", kill, {}, lab["token"], RATE_KILLS)
    assert statuses[0] == 200 and statuses[-1] == 429  # between: 409 while w1 is dead, or 200 once back
    assert len([e for e in tapi.events(lab) if e["type"] == "worker.killed"]) <= RATE_KILLS
    # cutting a lease short spends the same budget of disruptions, and the refusal says so
    expire = f"/api/labs/{lab['lab_id']}/jobs/1/lease/expire"
    status, _, body = post_from(tight, "127.0.0.4", expire, {}, lab["token"])
    assert status == 429 and "worker kills and lease expiries" in body["detail"], body


def test_the_machine_refuses_labs_and_workers_past_its_ceilings_with_429_and_retry_after(tight, tapi):
    labs = [tapi.lab("ch0", speed=20, workers=0) for _ in range(MAX_LABS)]
    res = tapi.call("POST", "/api/labs", {"preset": "ch0"})
    assert res.status == 429 and res.json()["error"] == "labs_full" and res.headers["Retry-After"] == "60"
    first, second = labs[0], labs[1]
    ok = tapi.call("PATCH", f"/api/labs/{first['lab_id']}/settings", {"workers": MAX_WORKERS}, first["token"])
    assert ok.status == 200
    res = tapi.call("PATCH", f"/api/labs/{second['lab_id']}/settings", {"workers": 1}, second["token"])
    assert res.status == 429 and res.json()["error"] == "workers_full" and int(res.headers["Retry-After"]) > 0
    assert f"at most {MAX_WORKERS} workers" in res.json()["detail"]
    # resizing the lab that holds them stays possible, and freeing workers lets the other lab grow
    assert tapi.call("PATCH", f"/api/labs/{first['lab_id']}/settings", {"workers": 1}, first["token"]).status == 200
    assert tapi.call("PATCH", f"/api/labs/{second['lab_id']}/settings", {"workers": 2}, second["token"]).status == 200
    tapi.call("DELETE", f"/api/labs/{labs[2]['lab_id']}", token=labs[2]["token"])
    res = tapi.call("POST", "/api/labs", {"preset": "ch0"})  # a lab slot is free, but no worker is
    assert res.status == 429 and res.json()["error"] == "workers_full"


def test_a_second_pool_host_adds_its_ceiling_to_the_pool(tight, tapi):
    """MAX_WORKERS is each pool host's own ceiling: with a second host, two labs each grow to a full host's
    worth (before: the web tier refused the second past one host's ceiling), and a lab may not grow past what
    its own host has free however much room the pool has elsewhere."""
    r = redis.Redis.from_url(tight.redis_url, decode_responses=True)
    (first_host,) = hosts.live_hosts(r)
    # placement reads each host's heartbeat: let the last test's labs leave this host's count first
    wait(lambda: hosts.live_hosts(r)[first_host].get("workers") == "0", 30, "the first host to report no workers")
    env = dict(tight.env(), POOL_HOST_ID="p2", VAR_DIR=str(tight.root / "var-p2"))
    host = subprocess.Popen([sys.executable, "-m", "workers.supervisor"], env=env, start_new_session=True)
    try:
        wait(lambda: "p2" in hosts.live_hosts(r), 30, "the second pool host to register")
        labs = [tapi.lab("ch0", speed=20, workers=0) for _ in range(2)]
        placed = wait(
            lambda: (
                [r.get(owner(lab["lab_id"])) for lab in labs]
                if all(r.get(owner(lab["lab_id"])) for lab in labs)
                else None
            ),
            30,
            "both labs to be placed",
        )
        assert sorted(placed) == sorted([first_host, "p2"])  # one lab per host: the emptier host gets the next
        for lab in labs:
            res = tapi.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": MAX_WORKERS}, lab["token"])
            assert res.status == 200, res.json()
        for lab, where in zip(labs, placed, strict=True):
            tapi.workers_ready(lab, MAX_WORKERS)
            assert {w["host"] for w in tapi.snapshot(lab)["workers"]} == {where}
        res = tapi.call(
            "PATCH", f"/api/labs/{labs[0]['lab_id']}/settings", {"workers": MAX_WORKERS + 1}, labs[0]["token"]
        )
        assert res.status == 429 and "this lab's pool host runs at most" in res.json()["detail"]
    finally:
        host.terminate()
        host.wait(30)
    wait(lambda: "p2" not in hosts.live_hosts(r), 30, "the second pool host to deregister")
    third = tapi.call("POST", "/api/labs", {"preset": "ch0"})
    assert third.status == 429 and f"at most {MAX_WORKERS} workers" in third.json()["detail"]


def test_a_lab_cannot_fill_the_disk_past_its_share(tight, tapi):
    lab = tapi.lab("ch0", speed=20, workers=0)
    clip = media.sample_clip("carphone_pristine").read_bytes()  # ~590 kB: one fits in 1 MB, two do not
    body, headers = multipart("file", "one.mp4", clip)
    assert (
        tapi.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"]).status
        == 202
    )
    res = tapi.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"])
    assert res.status == 413 and res.json()["error"] == "lab_storage_full"
    uploads = blobs.names(redis.Redis.from_url(tight.redis_url), lab["lab_id"], "uploads/")
    assert len(uploads) == 1, "the refused upload left no partial blob"
    assert not list((tight.var_dir / "tmp").glob("upload-*")), "nor a temp file"
    assert tapi.snapshot(lab)["counts"]["enqueued"] == 1


def test_an_idle_lab_expires_on_its_own_and_leaves_no_keys_files_or_processes(tight, tapi):
    lab = tapi.lab("ch0", speed=200, workers=1, job_duration=10)
    tapi.workers_ready(lab, 1)
    lab_id = lab["lab_id"]
    body, headers = multipart("file", "clip.mp4", media.sample_clip("carphone_pristine").read_bytes())
    res = tapi.call("POST", f"/api/labs/{lab_id}/jobs", raw=body, headers=headers, token=lab["token"])
    assert res.status == 202
    tapi.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    r = redis.Redis.from_url(tight.redis_url, decode_responses=True)
    assert list(r.scan_iter(match=f"*{lab_id}*")) and blobs.names(r, lab_id, "uploads/")
    assert (tight.var_dir / "labs" / lab_id / "cache").is_dir()  # the worker's local copy of the upload
    assert processes_mentioning(f"lab-{lab_id}")
    deadline = time.monotonic() + IDLE_TTL + 60
    while r.sismember("labs", lab_id) and time.monotonic() < deadline:
        time.sleep(0.5)  # nobody touches it: after IDLE_TTL s the supervisor's sweep removes it
    assert not r.sismember("labs", lab_id)
    deadline = time.monotonic() + 20
    while (
        list(r.scan_iter(match=f"*{lab_id}*")) or processes_mentioning(f"lab-{lab_id}")
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(r.scan_iter(match=f"*{lab_id}*")) == []
    assert processes_mentioning(f"lab-{lab_id}") == []
    assert not (tight.var_dir / "labs" / lab_id).exists()
    res = tapi.call("GET", f"/api/labs/{lab_id}", token=lab["token"])  # its page says so in a sentence
    assert res.status == 404 and res.json()["error"] == "lab_expired", res.body
    assert "removed after 1 minute without a visit" in res.json()["detail"]
    tapi.created.clear()


def test_the_access_log_never_shows_a_token(tight, tapi):
    lab = tapi.lab("ch0", speed=20, workers=0)
    lab_id, token, view = lab["lab_id"], lab["token"], lab["view_token"]
    tapi.call("GET", f"/api/labs/{lab_id}/events?after=0&token={token}", token=token)
    tapi.call(
        "GET",
        f"/chapters/0?lab={lab_id}&view={view}",
        headers={"Referer": f"{tight.url}/chapters/0?lab={lab_id}&view={view}"},
    )
    ws = websocket.create_connection(
        tight.url.replace("http", "ws") + f"/ws/labs/{lab_id}?after=0&token={token}", origin=tight.url, timeout=10
    )
    ws.close()  # (gunicorn does not log upgraded requests; its redaction is checked with the others)
    tapi.call("GET", f"/api/labs/{lab_id}", headers={"Cookie": f"lab_{lab_id}={token}"})
    deadline, log = time.monotonic() + 10, Path(tight.access_log)
    while f"GET /api/labs/{lab_id} HTTP" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    text = log.read_text()
    assert f"/api/labs/{lab_id}/events" in text and f"lab={lab_id}" in text  # requests are logged…
    assert token not in text and view not in text  # …their tokens are not
    assert "token=[redacted]" in text and "view=[redacted]" in text


def test_the_autoscaler_never_grows_a_lab_past_the_machines_worker_ceiling(redis_server):
    """A deep queue asks for 8 workers; with 3 allowed on the machine and 1 used elsewhere, it gets 2."""
    from core import registry as lab_registry
    from core.keys import key
    from workers.engines import autoscale

    r = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/5", decode_responses=True)
    r.flushdb()  # a database no supervisor watches: nothing else acts on these labs
    busy = lab_registry.create(r, "ch0", 20, chapters.settings_for("ch0"))["lab_id"]  # ch0: 1 worker
    lab = lab_registry.create(r, "ch2", 20, chapters.settings_for("ch2"))["lab_id"]
    settings = lab_registry.update_settings(r, lab, {"workers": 1, "autoscale": True})
    r.hset(key(lab, "states"), "queued", 500)
    assert autoscale.tick(r, lab, 1000.0, settings, machine_max=MAX_WORKERS) == MAX_WORKERS - 1
    assert lab_registry.settings(r, lab)["workers"] == MAX_WORKERS - 1
    assert lab_registry.settings(r, busy)["workers"] == 1
    r.flushdb()


@pytest.mark.e2e
def test_a_full_machine_shows_the_learner_a_plain_lab_is_full_message(tight, tapi, page, shot):
    for _ in range(MAX_LABS):
        tapi.lab("ch0", speed=20, workers=0)
    page.goto(f"{tight.url}/chapters/1")
    expect(page.locator("#lab-widget")).to_have_attribute("data-state", "error", timeout=30_000)
    expect(page.locator("#lab-widget")).to_contain_text(
        f"all {MAX_LABS} labs it may run are in use; try again in a minute"
    )
    expect(page.get_by_role("button", name="Try again")).to_be_visible()
    shot("lab-full")
    page.locator("#lab-widget").screenshot(path=str(ARTIFACTS / "lab-full-widget.png"))


def get_from(stack, source_ip: str, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection(stack.url.split("//")[1], timeout=20, source_address=(source_ip, 0))
    conn.request("GET", path, headers=headers or {})
    res = conn.getresponse()
    out = res.status, dict(res.getheaders()), res.read()
    conn.close()
    return out


def test_a_cross_site_form_post_cannot_open_a_lab(tight, tapi):
    res = tapi.call(
        "POST",
        "/api/labs",
        raw=b"preset=ch8",
        headers={"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"},
    )
    assert res.status == 403 and res.json()["error"] == "bad_origin"
    assert redis.Redis.from_url(tight.redis_url).scard("labs") == 0, "no lab was made"
    ok = tapi.call("POST", "/api/labs", {"preset": "ch0"}, headers={"Origin": tight.url})  # our own page
    assert ok.status == 201
    tapi.created.append(ok.json())


def test_metrics_lists_no_lab_id_without_its_token(tight, tapi):
    lab = tapi.lab("ch0", speed=20, workers=0)
    anonymous = tapi.call("GET", "/metrics")
    assert anonymous.status == 200 and lab["lab_id"].encode() not in anonymous.body
    assert b"asyncworklab_labs 1" in anonymous.body
    assert tapi.call("GET", "/metrics", token="wrong").status == 403
    assert lab["lab_id"].encode() in tapi.call("GET", "/metrics", token=METRICS_TOKEN).body


def test_guessing_room_codes_is_rate_limited_per_client_hits_included(tight, tapi):
    room = tapi.call("POST", "/api/rooms", {"preset": "ch1", "speed": 20})
    assert room.status == 201
    room = room.json()
    tapi.created.append(room["lab"])
    code = room["code"]
    assert len(code) == 10
    misses = [get_from(tight, "127.0.0.7", f"/api/rooms/ZZZZZZZZ{i}{i}")[0] for i in range(2, 2 + ROOM_MISSES)]
    assert misses == [404] * ROOM_MISSES
    status, headers, _ = get_from(tight, "127.0.0.7", f"/api/rooms/{code}")  # a hit is refused too: no oracle
    assert status == 429 and int(headers["Retry-After"]) >= 1
    assert get_from(tight, "127.0.0.8", f"/api/rooms/{code}")[0] == 200  # another client is not held back


def test_room_seats_cost_a_budget_per_client(tight, tapi):
    """Before: one address minted 1,100 seats in 1.9 s and checked them all in as viewers. Now it gets
    RATE_ROOM_SEATS a window, then 429 with Retry-After; another client's page still gets its seat."""
    room = tapi.call("POST", "/api/rooms", {"preset": "ch1", "speed": 20}).json()
    tapi.created.append(room["lab"])
    path = f"/api/rooms/{room['code']}/members"
    assert until_limited(tight, "127.0.0.11", path, {}, "", ROOM_SEATS) == [201] * ROOM_SEATS + [429]
    status, headers, body = post_from(tight, "127.0.0.11", path, {}, "")
    assert status == 429 and body["error"] == "rate_limited" and "room seats" in body["detail"]
    assert 1 <= int(headers["Retry-After"]) <= WINDOW
    assert post_from(tight, "127.0.0.12", path, {}, "")[0] == 201


def test_parallel_uploads_cannot_pass_the_disk_cap_together(tight, tapi):
    from concurrent.futures import ThreadPoolExecutor

    lab = tapi.lab("ch0", speed=20, workers=0)
    clip = media.sample_clip("carphone_pristine").read_bytes()  # ~590 kB: one fits in 1 MB, two do not
    body, headers = multipart("file", "one.mp4", clip)

    def upload(i: int) -> int:
        return post_raw_from(tight, f"127.0.1.{i + 1}", f"/api/labs/{lab['lab_id']}/jobs", body, headers, lab["token"])

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(upload, range(8)))
    assert statuses.count(202) == 1 and set(statuses) == {202, 413}, statuses
    assert blobs.usage(redis.Redis.from_url(tight.redis_url), lab["lab_id"]) <= MAX_LAB_BYTES  # blobs in the server


def post_raw_from(stack, source_ip: str, path: str, body: bytes, headers: dict, token: str) -> int:
    conn = http.client.HTTPConnection(stack.url.split("//")[1], timeout=30, source_address=(source_ip, 0))
    conn.request("POST", path, body, {**headers, "Authorization": f"Bearer {token}"})
    res = conn.getresponse()
    res.read()
    conn.close()
    return res.status


def close_code(ws: websocket.WebSocket) -> int | None:
    """The close code the server sends, reading past any events; None if it keeps the socket open."""
    ws.settimeout(5)
    try:
        for _ in range(200):
            op, data = ws.recv_data(control_frame=True)
            if op == websocket.ABNF.OPCODE_CLOSE:
                return int.from_bytes(data[:2], "big")
    except websocket.WebSocketTimeoutException:
        return None
    return None


def test_a_client_holding_its_maximum_of_sockets_is_refused_more_and_nobody_else_waits(tight, tapi):
    """issue 23: 257 WebSockets on a view token froze the web tier. Now one client gets WS_PER_CLIENT; the
    next is closed with 4429 and a reason, and /healthz, pages and the owner's own calls from elsewhere answer."""
    lab = tapi.lab("ch1", workers=0)
    url = tight.url.replace("http", "ws") + f"/ws/labs/{lab['lab_id']}?token={lab['view_token']}"
    held = [websocket.create_connection(url, timeout=10) for _ in range(WS_PER_CLIENT)]
    try:
        extra = websocket.create_connection(url, timeout=10)
        assert close_code(extra) == 4429
        extra.close()
        assert all(close_code(ws) is None for ws in held[:2])  # the held ones stay open
        assert get_from(tight, "127.0.0.2", "/healthz")[0] == 200
        assert get_from(tight, "127.0.0.2", "/chapters/1")[0] == 200
        owner = {"Authorization": f"Bearer {lab['token']}"}
        assert get_from(tight, "127.0.0.2", f"/api/labs/{lab['lab_id']}", owner)[0] == 200
    finally:
        for ws in held:
            ws.close()


def test_slow_headers_are_cut_and_past_its_connection_cap_a_client_is_closed_at_once(tight, tapi):
    """issue 23: 260 slowloris connections froze the web tier. Now a client's connections past CONN_PER_CLIENT
    are closed on accept, the rest once HEADER_TIMEOUT passes without a whole request, and others are served."""
    host, port = tight.url.split("//")[1].split(":")
    socks = []
    for _ in range(CONN_PER_CLIENT + 6):
        s = socket.create_connection((host, int(port)), timeout=15, source_address=("127.0.0.3", 0))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        socks.append(s)
    try:
        assert get_from(tight, "127.0.0.2", "/healthz")[0] == 200
        closed = []
        for s in socks:
            try:
                closed.append(s.recv(1024) == b"")
            except ConnectionResetError:
                closed.append(True)
            except TimeoutError:  # the client's own 15 s socket timeout: the server left it open
                closed.append(False)
        # every one cut by the server: the cap's extras at once, the rest by the header timeout
        assert all(closed), f"{closed.count(False)} of {len(socks)} half-sent requests were left open"
        assert get_from(tight, "127.0.0.3", "/healthz")[0] == 200  # the same client, well-behaved, is served
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def full_disk(tmp_path):
    """A 64 MB tmpfs (root only) that holds a stack's VAR_DIR and its server's data; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    """Append zeros to `path` until its disk has no byte left: 64 kB writes, then ever smaller ones down to one
    byte (the few kB a 64 kB write leaves free let the server's small AOF appends through now and then, so it
    took writes again between refusals). Called again, it takes back what was freed since (a server's failed
    rewrite removing its temporary file)."""
    written = 0
    with open(path, "ab", buffering=0) as out:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            try:
                while written < 80 * 1024 * 1024:  # the disk is 64 MB
                    written += out.write(bytes(size))
                raise AssertionError("the 64 MB disk never filled")
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def test_a_full_disk_answers_507_with_the_cause_reads_still_work_and_healthz_says_why(full_disk):
    """Before: at 0 B free every job POST, a new lab and an upload answered 500 (MISCONF; OSError ENOSPC)
    and so did the owner's snapshot. Now each change answers 507 naming the cause with Retry-After, the
    snapshot answers, /healthz says why, and once space is freed the same POST makes its job."""
    with Stack("diskfull", root=full_disk, persist=True) as s:
        sapi = s.api()
        lab = sapi.lab("ch0", speed=20, workers=0)
        jobs = f"/api/labs/{lab['lab_id']}/jobs"
        filler = full_disk / "filler.bin"
        fill(filler)
        # the server refuses changes once a write to its AOF has failed (the pool's own writes get there within a
        # second or two); VAR_DIR's free bytes alone say so at once, before the server has tried a write
        wait(
            lambda: any("refuses changes" in w for w in sapi.call("GET", "/healthz").json()["why"]),
            30,
            "/healthz to say the server refuses changes",
        )
        health = sapi.call("GET", "/healthz").json()
        assert health["ok"] and health["writes"].startswith("refused"), health
        assert health["disk"]["var_dir_free_bytes"] < 1 << 16, health
        clip = media.sample_clip("carphone_pristine").read_bytes()
        body, headers = multipart("file", "one.mp4", clip)
        calls = [
            lambda: sapi.call("POST", jobs, {"sample": "carphone_pristine"}, lab["token"]),
            lambda: sapi.call("POST", "/api/labs", {"preset": "ch0"}),
            lambda: sapi.call("POST", jobs, token=lab["token"], headers=headers, raw=body),
        ]
        for call in calls:
            fill(filler)  # still 0 B free at each call
            res = call()
            assert res.status == 507 and res.json()["error"] in ("disk_full", "server_disk_full"), res.body
            assert "disk" in res.json()["detail"] and int(res.headers["Retry-After"]) >= 1
        snap = sapi.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"])
        assert snap.status == 200 and snap.json()["lab_id"] == lab["lab_id"], "the owner's snapshot still answers"
        filler.unlink()
        wait(lambda: sapi.call("GET", "/healthz").json()["writes"] == "ok", 30, "writes to be accepted again")
        assert sapi.call("POST", jobs, {"sample": "carphone_pristine"}, lab["token"]).status == 202


def test_the_pool_waits_through_a_full_disk_says_so_and_carries_on(full_disk, tmp_path):
    """Before: the first write the supervisor made after the server's disk filled raised MISCONF and the
    supervisor died (its workers with it). Now it waits, says why in its log, and carries on when space
    returns: it is the same process, and a job sent then runs to done. The server's data is on the full disk;
    the logs and VAR_DIR are not."""
    root = tmp_path / "stack"
    root.mkdir()
    (root / "redis").symlink_to(full_disk, target_is_directory=True)
    with Stack("poolfull", root=root, persist=True, logs=True) as s:
        sapi = s.api()
        lab = sapi.lab("ch0", speed=200, workers=1)
        sapi.workers_ready(lab, 1)
        supervisor = s.supervisor
        filler = full_disk / "filler.bin"
        fill(filler)
        log = root / "logs" / "supervisor.log"
        wait(lambda: "the server refuses writes" in log.read_text(), 60, "the supervisor to say writes are refused")
        assert supervisor.poll() is None, log.read_text()[-2000:]
        filler.unlink()
        wait(lambda: "the server writes again" in log.read_text(), 60, "the supervisor to carry on")
        assert supervisor.poll() is None and s.supervisor is supervisor
        res = sapi.call(
            "POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "carphone_pristine", "duration_s": 10}, lab["token"]
        )
        assert res.status == 202, res.body
        sapi.wait_for(lab, lambda snap: snap["counts"]["done"] == 1, 90)
        assert "Traceback" not in log.read_text()
