"""Hostile uploads against the real stack (real workers, real ffmpeg), all into one lab.

Each is refused at upload with a reason or dead-lettered with its reason; nothing else in the lab is
affected: a good clip uploaded after all of them still completes, and no worker process died.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from core import blobs, media
from tests.conftest import ARTIFACTS, Api
from tests.helpers import readline_within
from tests.integration.test_api import multipart, post_oversize
from tests.integration.test_launcher import processes_mentioning

MAX_UPLOAD = 2 * 1024 * 1024  # the shared stack's MAX_UPLOAD_BYTES


def ffmpeg(*args: str) -> None:
    subprocess.run([media.ffmpeg(), "-v", "error", "-y", *args], check=True, timeout=60)


def faststart(src: Path, dst: Path) -> bytes:
    """A remux with the index (moov) first, so a truncated copy still starts like a good file."""
    ffmpeg("-i", str(src), "-c", "copy", "-movflags", "+faststart", str(dst))
    return dst.read_bytes()


def declaring(data: bytes, width: int, height: int) -> bytes:
    """The same MP4 with its track header and sample entry claiming width×height."""
    b = bytearray(data)
    moov = b.find(b"moov")
    entry = b.find(b"avc1", moov)
    b[entry + 28 : entry + 32] = struct.pack(">HH", width, height)
    tkhd = b.find(b"tkhd", moov)
    b[tkhd + 80 : tkhd + 88] = struct.pack(">II", width << 16, height << 16)
    return bytes(b)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("hostile")
    bbb, carphone = media.sample_clip("bigbuckbunny"), media.sample_clip("carphone_pristine")
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x64:duration=1", "-frames:v", "1", str(d / "x.png"))
    ffmpeg(
        "-f",
        "lavfi",
        "-i",
        "color=black:s=5000x5000:d=0.08:r=25",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
        str(d / "huge.mp4"),
    )
    fast = faststart(bbb, d / "fast.mp4")
    return {
        "good": carphone.read_bytes(),
        "png": (d / "x.png").read_bytes(),
        "huge": (d / "huge.mp4").read_bytes(),
        "bbb": bbb.read_bytes(),
        "fast": fast,
        "liar": declaring(carphone.read_bytes(), 30000, 30000),
    }


@pytest.fixture(scope="module")
def lab(stack):
    client = Api(stack.url)
    lab = client.lab(
        "ch4", speed=200, workers=2, vt_seconds=3600, max_attempts=3, job_duration=10, classify_errors=True
    )  # this file is about which inputs are refused, and why
    client.workers_ready(lab, 2)  # exactly 2: the preset's third has drained away, so the pids are for good
    lab["client"] = client
    lab["pids"] = {w["id"]: w["pid"] for w in client.snapshot(lab)["workers"]}
    lab["seen"] = {}  # case → what the app did, written out for the closing note
    yield lab
    client.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "hostile-inputs.json").write_text(json.dumps(lab["seen"], indent=1, ensure_ascii=False))


def upload(lab, name: str, data: bytes, ctype: str = "video/mp4", headers: dict | None = None):
    body, hdrs = multipart("file", name, data, ctype)
    return lab["client"].call(
        "POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers={**hdrs, **(headers or {})}, token=lab["token"]
    )


def clip_path() -> str:
    return str(media.sample_clip("carphone_pristine"))


# (id, filename, bytes (or a key of `files`), part Content-Type, status, error)
REFUSED = [
    ("text", "notes.txt", b"just some notes, not a video\n", "text/plain", 415, "not_a_video"),
    ("text-named-mp4", "movie.mp4", b"just some notes, not a video\n", "video/mp4", 415, "not_a_video"),
    ("png", "photo.mp4", "png", "video/mp4", 415, "not_a_video"),
    ("zero-byte", "empty.mp4", b"", "video/mp4", 422, "empty_file"),
    ("truncated-mp4", "cut.mp4", "bbb-cut", "video/mp4", 422, "undecodable_video"),
    ("hls-playlist", "list.m3u8", "hls", "application/vnd.apple.mpegurl", 415, "not_a_video"),
    ("ffconcat", "list.ffconcat", "concat", "text/plain", 415, "not_a_video"),
    ("playlist-behind-mp4-magic", "list.mp4", "hls-ftyp", "video/mp4", 422, "undecodable_video"),
    ("huge-dimensions-5000x5000", "huge.mp4", "huge", "video/mp4", 422, "undecodable_video"),
    ("html", "page.mp4", b"<html><script>alert(1)</script></html>", "text/html", 415, "not_a_video"),
    ("zip-with-rtl-name", "\u202ereverse\u202c.mp4", b"PK\x03\x04zipfile", "application/zip", 415, "not_a_video"),
]


def resolve(files: dict, data) -> bytes:
    if isinstance(data, bytes):
        return data
    hls = (
        f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:5,\n{clip_path()}\n#EXTINF:5,\nfile:///etc/passwd\n"
        "#EXT-X-ENDLIST\n"
    )
    return {
        "bbb-cut": files["bbb"][: len(files["bbb"]) // 3],
        "hls": hls.encode(),
        "concat": f"ffconcat version 1.0\nfile '{clip_path()}'\nfile '/etc/passwd'\n".encode(),
        "hls-ftyp": b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + hls.encode(),
    }.get(data) or files[data]


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_hostile_upload_is_refused_at_the_door_with_a_reason(lab, files, case):
    _id, name, data, ctype, status, error = case
    before = lab["client"].snapshot(lab)["counts"]["enqueued"]
    res = upload(lab, name, resolve(files, data), ctype)
    assert res.status == status, res.body
    body = res.json()
    lab["seen"][_id] = f"{res.status} {body['error']}: {body['detail']}"
    assert body["error"] == error and body["detail"], body
    assert "/" not in str(body["detail"]).replace("/etc/passwd", ""), "no server path in the reason"
    assert lab["client"].snapshot(lab)["counts"]["enqueued"] == before, "a refused upload made no job"


def test_oversize_uploads_get_a_json_413_either_way(lab):
    head = b"\x00\x00\x00\x18ftypmp42"
    auth = {"Authorization": f"Bearer {lab['token']}"}
    path = f"/api/labs/{lab['lab_id']}/jobs"
    # just over the limit: counted while streaming to disk, the partial file removed
    body, headers = multipart("file", "big.mp4", head + b"\x00" * MAX_UPLOAD)
    assert post_oversize(lab["client"], path, body, {**headers, **auth}) == 413
    # far over it: refused from Content-Length before the body is read
    body, headers = multipart("file", "bigger.mp4", head + b"\x00" * (3 * MAX_UPLOAD))
    assert post_oversize(lab["client"], path, body, {**headers, **auth}) == 413
    body, headers = multipart("file", "big.mp4", head + b"\x00" * MAX_UPLOAD)
    res = lab["client"].call("POST", path, raw=body, headers=headers, token=lab["token"])
    lab["seen"]["oversize"] = f"{res.status} {res.json()['error']}: {res.json()['detail']}"
    assert res.status == 413 and res.json()["error"] == "too_large" and "bytes" in res.json()["detail"]


def test_a_multipart_body_labelled_json_and_a_missing_file_field_are_4xx(lab, files):
    body, headers = multipart("file", "clip.mp4", files["good"])
    path = f"/api/labs/{lab['lab_id']}/jobs"
    res = lab["client"].call("POST", path, raw=body, headers={"Content-Type": "application/json"}, token=lab["token"])
    # a video's bytes are past the JSON size cap before they are past the parser: refused unread
    assert (res.status, res.json()["error"]) in ((400, "invalid_json"), (413, "body_too_large")), res.body
    small = body[:1000]  # under the cap, the same bytes are not JSON
    res = lab["client"].call("POST", path, raw=small, headers={"Content-Type": "application/json"}, token=lab["token"])
    assert res.status == 400 and res.json()["error"] == "invalid_json"
    body, headers = multipart("video", "clip.mp4", files["good"])
    res = lab["client"].call("POST", path, raw=body, headers=headers, token=lab["token"])
    assert res.status == 422 and res.json()["error"] == "missing_file"


@pytest.mark.parametrize(
    ("what", "status", "error"), [("request-line", 414, "uri_too_long"), ("header", 431, "headers_too_large")]
)
def test_a_request_too_long_for_the_web_server_is_refused_in_json(lab, what, status, error):
    """gunicorn refuses these before the app sees them; the answer is still the API's JSON, not an HTML page."""
    path, headers = f"/api/labs/{lab['lab_id']}", {}
    if what == "request-line":
        path += "?q=" + "x" * 9000
    else:
        headers["X-Long"] = "x" * 9000
    res = lab["client"].call("GET", path, headers=headers, token=lab["token"])
    assert res.status == status and res.headers["Content-Type"] == "application/json", res.body
    assert res.json()["error"] == error and res.json()["detail"]


def test_a_truncated_faststart_mp4_passes_the_door_and_is_dead_lettered_with_its_reason(lab, files):
    # the index and the first frames whole, the last fifth gone (the 1 s sample interleaves its audio: a cut at
    # two thirds already reaches into the packets the door decodes)
    cut = files["fast"][: len(files["fast"]) * 4 // 5]
    res = upload(lab, "cut-faststart.mp4", cut)
    assert res.status == 202, res.body  # its first frame decodes: only the worker's full decode finds the damage
    job = res.json()["job_id"]
    snap = lab["client"].wait_for(lab, lambda s: any(j["id"] == job and j["state"] == "dlq" for j in s["jobs"]))
    dead = next(j for j in snap["jobs"] if j["id"] == job)
    lab["seen"]["truncated-faststart-mp4"] = f"202, then dead-lettered: {dead['dlq_reason']}"
    assert dead["dlq_reason"].startswith("non_retryable: invalid video: ffmpeg exit"), dead["dlq_reason"]
    assert len(dead["attempts"]) == 1, "a non-retryable failure is not retried"


# Names that try to escape the upload folder or confuse a reader: the name is never used for the path.
NAMES = [
    "../../etc/passwd.mp4",
    "..\\..\\boot.ini.mp4",
    "/etc/cron.d/evil.mp4",
    "clip\x00.sh.mp4",
    "\u202egpj.exe.mp4",
    "видео 🎬 $(rm -rf ~).mp4",
    "a" * 1000 + ".mp4",
]
ACCEPTED = [(f"name:{n[:24]!r}", n, "good", "video/mp4") for n in NAMES] + [
    ("real-clip-sent-as-text/plain", "clip.txt", "good", "text/plain"),
    ("header-declares-30000x30000", "liar.mp4", "liar", "application/octet-stream"),
]


def test_real_clips_under_hostile_names_and_wrong_types_are_judged_by_their_bytes(lab, files, stack):
    jobs = {}
    for case_id, name, data, ctype in ACCEPTED:
        res = upload(lab, name, files[data], ctype)
        assert res.status == 202, (case_id, res.body)
        jobs[res.json()["job_id"]] = case_id
    snap = lab["client"].wait_for(
        lab, lambda s: all(j["state"] == "done" for j in s["jobs"] if j["id"] in jobs), timeout=120
    )
    for j in snap["jobs"]:
        if j["id"] in jobs:
            assert set(j["outputs"]) == {"240p", "144p"}, jobs[j["id"]]
            lab["seen"][jobs[j["id"]]] = "202, transcoded (stored as uploads/<random>.bin; the name is not used)"
    stored = blobs.names(redis.Redis.from_url(stack.redis_url), lab["lab_id"], "uploads/")  # blobs in the server
    assert stored and all(re.fullmatch(r"uploads/[0-9a-f]{12}\.bin", n) for n in stored), "stored under our names"
    escaped = [p for p in stack.var_dir.parent.rglob("*") if re.search(r"passwd|boot\.ini|evil|\.exe|видео", p.name)]
    assert escaped == []


def test_after_all_of_it_a_good_clip_completes_and_no_worker_died(lab, files):
    res = upload(lab, "good.mp4", files["good"])
    assert res.status == 202
    job = res.json()["job_id"]
    snap = lab["client"].wait_for(lab, lambda s: any(j["id"] == job and j["state"] == "done" for j in s["jobs"]))
    assert {w["id"]: w["pid"] for w in snap["workers"]} == lab["pids"], "the same worker processes, alive"
    assert all(w["state"] in ("idle", "busy") for w in snap["workers"])
    types = {e["type"] for e in lab["client"].events(lab)}
    assert not types & {"worker.died", "worker.killed", "job.crashed"}
    dead = [case for case, what in lab["seen"].items() if "dead-lettered" in what]  # (run on this lab so far)
    assert snap["counts"]["dlq"] == len(dead), dead  # only the truncated faststart file, if its test ran


@pytest.mark.parametrize("kind", ["hls", "concat"])
def test_ffmpeg_itself_refuses_playlists_that_reach_for_local_files(tmp_path, files, kind):
    """Defence behind the byte sniff: were a playlist ever handed to ffmpeg, it would open nothing."""
    listing = tmp_path / f"list.{'m3u8' if kind == 'hls' else 'ffconcat'}"
    listing.write_bytes(resolve(files, kind))
    for check in (media.probe, media.check_upload):
        with pytest.raises(media.InvalidMedia, match="not on whitelist"):
            check(listing)
    # the threat is real: without the whitelists, a playlist naming only a local file makes ffmpeg read it
    only_local = tmp_path / "local.m3u8"
    only_local.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:4,\n{clip_path()}\n#EXT-X-ENDLIST\n")
    unsafe = subprocess.run(
        [media.ffmpeg(), "-v", "verbose", "-i", str(only_local), "-frames:v", "1", "-f", "null", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"Opening '{clip_path()}' for reading" in unsafe.stderr
    with pytest.raises(media.InvalidMedia, match="not on whitelist"):
        media.probe(only_local)


@pytest.mark.timeout(60)  # a probe that never gives up fails here with a traceback, not by a stopwatch
def test_an_ffmpeg_that_hangs_is_stopped_by_its_time_limit(tmp_path):
    """A FIFO nobody writes to makes ffmpeg wait forever on its input: the decode check gives up."""
    fifo = tmp_path / "stuck.mp4"
    os.mkfifo(fifo)
    with pytest.raises(media.InvalidMedia, match="longer than 1 s"):
        media.probe(fifo, timeout=1)
    assert not processes_mentioning(str(fifo)), "the timed-out ffmpeg was killed"


def test_a_killed_work_horse_takes_its_ffmpeg_with_it(tmp_path):
    """What SIGKILL on a busy worker does to the transcode it started: no orphan keeps running."""
    fifo = tmp_path / "stuck.mp4"
    os.mkfifo(fifo)
    script = (
        "import sys, time; from pathlib import Path; from core import media; "
        "p = media.start_transcode(Path(sys.argv[1]), Path(sys.argv[2]), 144); print(p.pid, flush=True); "
        "time.sleep(600)"
    )
    horse = subprocess.Popen(
        [sys.executable, "-c", script, str(fifo), str(tmp_path / "out.mp4")], stdout=subprocess.PIPE, text=True
    )
    sandbox_pid = int(readline_within(horse, 60, "the stand-in horse's sandbox pid"))
    assert any(line.startswith(f"{sandbox_pid}:") for line in processes_mentioning(str(fifo)))
    # a busy worker's transcode: ffmpeg itself up (blocked on the fifo), not bwrap still setting up. A kill in
    # bwrap's first milliseconds can beat its child's PR_SET_PDEATHSIG and leave that child behind
    # (containers/bubblewrap#633): a race of bwrap's own, not what this test is about.
    deadline = time.monotonic() + 60
    while not any(line.split(": ", 1)[1].startswith(media.ffmpeg()) for line in processes_mentioning(str(fifo))):
        assert time.monotonic() < deadline, f"ffmpeg never started: {processes_mentioning(str(fifo))}"
        time.sleep(0.05)
    horse.kill()
    horse.wait()
    deadline = time.monotonic() + 30  # how long to look before calling it an orphan, not a timing claim
    while processes_mentioning(str(fifo)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = processes_mentioning(str(fifo))
    for line in left:  # stop what this test started (bwrap, or the ffmpeg inside it), then fail
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    assert not left, "ffmpeg outlived the process that started it"
