"""Chapter 5 on the running app: Idempotency-Key (replay, 409 in progress, 422, fail open/closed)
and the handler guards under real redelivery (real RQ workers, real ffmpeg, the lab's outbox)."""

import http.client
import os
import signal
import threading
import time
import urllib.parse
import uuid

import pytest
import redis

from core import blobs, media, registry
from core.procs import children
from runtime.harness.stack import Stack


def jobs_path(lab):
    return f"/api/labs/{lab['lab_id']}/jobs"


def multipart(clip: bytes, boundary: str = "lab-boundary") -> tuple[bytes, str]:
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="job_type"\r\n\r\ntranscode\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="clip.mp4"\r\n'
            "Content-Type: video/mp4\r\n\r\n"
        ).encode()
        + clip
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def test_a_resend_while_the_first_upload_is_still_arriving_gets_409_then_the_replay(api, stack):
    lab = api.lab("ch5", speed=20, workers=0)
    body, ctype = multipart(media.sample_clip("carphone_pristine").read_bytes())
    headers = {"Content-Type": ctype, "Authorization": f"Bearer {lab['token']}", "Idempotency-Key": "upload-1"}
    url = urllib.parse.urlsplit(stack.url)
    first = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    first.putrequest("POST", jobs_path(lab))
    for name, value in {**headers, "Content-Length": str(len(body))}.items():
        first.putheader(name, value)
    first.endheaders()
    first.send(body[: len(body) // 2])  # the first request is now genuinely in progress: half uploaded
    status = f"/api/labs/{lab['lab_id']}/idempotency"
    deadline = time.monotonic() + 20
    while api.call("GET", status, token=lab["token"]).json()["keys_held"] < 1:
        assert time.monotonic() < deadline, "the first request never claimed its key"
        time.sleep(0.02)
    resend = api.call("POST", jobs_path(lab), raw=body, headers=headers)
    assert resend.status == 409 and resend.json()["error"] == "request_in_progress"
    first.send(body[len(body) // 2 :])
    done = first.getresponse()
    assert done.status == 202
    job_id = __import__("json").loads(done.read())["job_id"]
    again = api.call("POST", jobs_path(lab), raw=body, headers=headers)
    assert again.status == 202 and again.headers.get("Idempotent-Replayed") == "true"
    assert again.json()["job_id"] == job_id
    counts = api.snapshot(lab)["counts"]
    assert counts["enqueued"] == 1 and counts["idem_conflicts"] == 1 and counts["idem_replayed"] == 1


def test_keys_are_kept_for_the_models_window_with_their_memory_shown(api):
    lab = api.lab("ch5", speed=20, workers=0)
    for i in range(3):
        assert (
            api.call(
                "POST", jobs_path(lab), {"sample": "bikes"}, lab["token"], headers={"Idempotency-Key": f"k{i}"}
            ).status
            == 202
        )
    st = api.call("GET", f"/api/labs/{lab['lab_id']}/idempotency", token=lab["token"]).json()
    # lesson ch5: VT 1,200 s + p99 900 s = 2,100 s worst gap, rounded up to a 1 h window; 36 MB
    assert st["worst_case_duplicate_gap_s"] == 2100 and st["window_s"] == 3600
    assert st["model_key_store_mb"] == pytest.approx(36)
    assert st["keys_held"] == 3 and st["keys_held_bytes"] > 0
    # past the window on the lab's clock, the same key is a new operation
    api.call("POST", f"/api/labs/{lab['lab_id']}/clock", {"action": "step", "seconds": 3601}, lab["token"])
    late = api.call("POST", jobs_path(lab), {"sample": "bikes"}, lab["token"], headers={"Idempotency-Key": "k0"})
    assert late.status == 202 and "Idempotent-Replayed" not in late.headers
    assert api.snapshot(lab)["counts"]["enqueued"] == 4


def test_an_invalid_body_frees_its_key_so_the_corrected_request_goes_through(api):
    lab = api.lab("ch5", speed=20, workers=0)
    key = {"Idempotency-Key": "fix-me"}
    assert api.call("POST", jobs_path(lab), {"sample": "nope"}, lab["token"], headers=key).status == 422
    assert api.call("POST", jobs_path(lab), {"sample": "bikes"}, lab["token"], headers=key).status == 202


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_dedup_store_down_fails_open_with_a_duplicate_or_closed_with_a_refusal(api, mode):
    lab = api.lab("ch5", speed=20, workers=0, dedup_fail_mode=mode)
    fault = api.call(
        "POST", f"/api/labs/{lab['lab_id']}/faults", {"type": "dedup_outage", "duration_s": 3600}, lab["token"]
    )
    assert fault.status == 202
    key = {"Idempotency-Key": "during-outage"}
    a = api.call("POST", jobs_path(lab), {"sample": "bikes"}, lab["token"], headers=key)
    b = api.call("POST", jobs_path(lab), {"sample": "bikes"}, lab["token"], headers=key)
    counts = api.snapshot(lab)["counts"]
    if mode == "open":
        assert a.status == b.status == 202 and a.headers.get("Idempotency-Checked") == "false"
        assert a.json()["job_id"] != b.json()["job_id"]  # the cost of failing open: a duplicate job
        assert counts["enqueued"] == 2 and counts["idem_unchecked"] == 2
    else:
        assert a.status == b.status == 503 and a.json()["error"] == "dedup_store_unavailable"
        assert a.headers.get("Retry-After")  # the cost of failing closed: refused requests, no job
        assert counts["enqueued"] == 0 and counts["idem_refused"] == 2


def outbox(api, lab):
    return api.call("GET", f"/api/labs/{lab['lab_id']}/outbox", token=lab["token"]).json()["emails"]


def test_the_notified_flag_is_per_job_so_two_jobs_in_one_lab_send_two_emails(api):
    """The once-only flag guards one job's email: a second job in the same lab is not a duplicate of the first."""
    lab = api.lab("ch5", speed=200, workers=2, job_duration=30, notify_guard=True)
    api.workers_ready(lab, 2)
    jobs = [
        api.call("POST", jobs_path(lab), {"sample": "carphone_pristine"}, lab["token"]).json()["job_id"]
        for _ in range(2)
    ]
    # each finisher decides its email after its completion: wait for both decisions, sent or suppressed
    snap = api.wait_for(
        lab,
        lambda s: s["counts"]["done"] == 2 and s["counts"]["emails_sent"] + s["counts"]["emails_suppressed"] == 2,
        timeout=90,
    )
    mailed = sorted(e["job_id"] for e in outbox(api, lab))
    assert mailed == sorted(jobs), (
        f"two jobs finished once each; the outbox mailed {mailed} (suppressed {snap['counts']['emails_suppressed']})"
    )


@pytest.mark.parametrize("guards", [False, True])
def test_the_handler_runs_twice_under_redelivery_and_the_guards_decide_the_emails(api, stack, guards):
    # VT 300 s, job 400 s, no heartbeat: attempt 1's lease runs out mid-job and another worker
    # runs the handler again (the lesson's collision); guard off so both handlers reach the email.
    lab = api.lab(
        "ch5",
        speed=200,
        workers=2,
        vt_seconds=300,
        job_duration=400,
        heartbeat=False,
        max_attempts=2,
        retry_policy="none",
        guard="off",
        idempotent_outputs=guards,
        notify_guard=guards,
    )
    api.workers_ready(lab, 2)
    res = api.call("POST", jobs_path(lab), {"sample": "carphone_pristine"}, lab["token"])
    job_id = res.json()["job_id"]
    snap = api.wait_for(
        lab,
        lambda s: (
            s["counts"]["succeeded"] + s["counts"]["duplicate_completions"] >= 2
            and s["counts"]["running"] == 0
            and s["counts"]["queued"] == 0
            # each handler run's email step comes after its completion, a round trip later: both decided
            and s["counts"]["emails_sent"] + s["counts"]["emails_suppressed"] >= 2
        ),
        timeout=90,
    )
    counts = snap["counts"]
    emails = [e for e in outbox(api, lab) if e["job_id"] == job_id]
    r = redis.Redis.from_url(stack.redis_url)  # outputs are blobs in the server (core/blobs.py)
    files = sorted(
        n.rsplit("/", 1)[1] for n in blobs.names(r, lab["lab_id"], f"transcoded/{job_id}/") if n.endswith(".mp4")
    )
    print(
        f"guards={guards}: handler runs={counts['succeeded'] + counts['duplicate_completions']} "
        f"emails={len(emails)} suppressed={counts['emails_suppressed']} outputs={counts['outputs_written']} "
        f"files={files}"
    )
    if guards:
        assert len(emails) == 1 and counts["emails_suppressed"] >= 1
        assert files == ["144p.mp4", "240p.mp4"]
    else:
        assert len(emails) >= 2 and counts["emails_suppressed"] == 0
        assert len(files) >= 4


def test_a_web_worker_killed_with_job_posts_in_flight_makes_no_job_nobody_sent(tmp_path):
    """Issue 39: a gunicorn worker killed with 24 job POSTs in flight dropped 28 connections, and 6 of those
    had made a job; a client that resent them without a key made them twice. The widget resends under the
    same Idempotency-Key (static/js/widget/lab.js postJob), so whatever the kill cut, each key makes exactly one
    job and every key is answered 202 with it."""
    with Stack("idemkill", root=tmp_path / "stack") as s:
        sapi = s.api(offline_ok=True, timeout=10)
        lab = sapi.lab("ch5", speed=20, workers=0)
        keys = [uuid.uuid4().hex for _ in range(24)]
        final: dict[str, int] = {}
        dropped: list[str] = []  # keys whose POST lost its connection at least once

        def send(k: str) -> None:  # as postJob does: resend on a lost answer or 409 in progress, same key
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                res = sapi.call(
                    "POST",
                    jobs_path(lab),
                    {"sample": "carphone_pristine"},
                    lab["token"],
                    headers={"Idempotency-Key": k},
                )
                final[k] = res.status
                if res.status == 0:
                    dropped.append(k)
                if res.status not in (0, 409, 502, 503):
                    return
                time.sleep(0.3)

        threads = [threading.Thread(target=send, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        time.sleep(0.05)
        for pid in children(s.web.pid):  # the worker, mid-requests; the master forks a new one
            os.kill(pid, signal.SIGKILL)
        for t in threads:
            t.join(90)
        r = redis.Redis.from_url(s.redis_url, decode_responses=True)
        made = [j["payload"]["idempotency_key"] for j in registry.list_jobs(r, lab["lab_id"], 1000)]
        assert len(made) == len(set(made)), "one key made two jobs"
        assert set(made) <= set(keys), "a job no request asked for"
        answered = {k for k, st in final.items() if st == 202}
        # a key claimed by the killed worker is taken over once its heartbeat lapses, not held (409) for the
        # window: every resend gets its answer
        assert answered == set(keys) == set(made), final
        assert dropped, "the kill cut no request: nothing was tested"
