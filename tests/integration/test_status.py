"""Chapter 3's status path against the real stack: conditional GETs, long-polls that wake on the event
stream, the cap on held requests, and a late redelivery refused by the state machine's CAS."""

from __future__ import annotations

import threading
import time

import redis

import chapters
from app import create_app, longpoll
from core import registry
from core.config import Config
from core.procs import wait
from tests.helpers import long_polls_held


def status_url(lab: dict, job: dict) -> str:
    return f"/api/labs/{lab['lab_id']}/jobs/{job['job_id']}/status"


def lab_without_workers(api) -> dict:
    """A chapter 3 lab whose preset's workers have all gone: a job stays queued until a test adds one (one
    still draining could claim it, and a held poll would answer before the test's own change)."""
    lab = api.lab("ch3", speed=50, workers=0)
    api.workers_ready(lab, 0)
    return lab


def new_job(api, lab: dict) -> dict:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "carphone_pristine"}, lab["token"])
    assert res.status == 202, res.body
    return res.json()


def long_poll(api, url: str, token: str, tag: str, wait: float, out: dict) -> threading.Thread:
    def run():
        started = time.monotonic()
        out["res"] = api.call(
            "GET", f"{url}?wait={wait}&client=long", token=token, headers={"If-None-Match": tag}, timeout=wait + 20
        )
        out["held_s"] = time.monotonic() - started

    t = threading.Thread(target=run)
    t.start()
    return t


def test_an_unchanged_status_answers_304_and_a_change_answers_200_with_a_new_etag(api):
    lab = lab_without_workers(api)
    job = new_job(api, lab)
    first = api.call("GET", status_url(lab, job) + "?client=etag", token=lab["token"])
    assert first.status == 200 and first.json()["status"] == "queued"
    assert abs(float(first.headers["Lab-Server-Time"]) - time.time()) < 60, "the server's clock, for the page"
    tag = first.headers["ETag"]
    again = api.call("GET", status_url(lab, job) + "?client=etag", token=lab["token"], headers={"If-None-Match": tag})
    assert again.status == 304 and again.body == b"" and again.headers["ETag"] == tag

    api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": 1}, lab["token"])
    api.wait_for(lab, lambda s: s["counts"]["running"] + s["counts"]["done"] == 1)
    changed = api.call("GET", status_url(lab, job) + "?client=etag", token=lab["token"], headers={"If-None-Match": tag})
    assert changed.status == 200 and changed.headers["ETag"] != tag
    assert changed.json()["status"] in ("running", "done")

    load = api.call("GET", f"/api/labs/{lab['lab_id']}/status-load", token=lab["token"]).json()
    assert load["clients"]["etag"]["requests"] == 3 and load["clients"]["etag"]["not_modified"] == 1


def test_a_long_poll_is_held_until_the_job_changes_then_answers_at_once(api, r):
    lab = lab_without_workers(api)
    job = new_job(api, lab)
    tag = api.call("GET", status_url(lab, job), token=lab["token"]).headers["ETag"]
    out: dict = {}
    t = long_poll(api, status_url(lab, job), lab["token"], tag, 20, out)
    long_polls_held(api, lab, 1, polls=[t])
    wait(
        lambda: [c for c in r.client_list() if c["cmd"] == "xread" and "b" in c["flags"]],
        10,
        "the held request to wait in a blocking XREAD on the event stream, not a sleep loop",
    )
    api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": 1}, lab["token"])
    t.join(25)
    res = out["res"]
    assert res.status == 200 and res.headers["Long-Poll"] == "changed"
    assert res.json()["status"] != "queued" and res.headers["ETag"] != tag
    assert out["held_s"] < 20, "it woke on the change, not at the end of its window"


def test_a_long_poll_with_no_change_times_out_with_304(api):
    lab = lab_without_workers(api)
    job = new_job(api, lab)
    tag = api.call("GET", status_url(lab, job), token=lab["token"]).headers["ETag"]
    out: dict = {}
    long_poll(api, status_url(lab, job), lab["token"], tag, 7, out).join(40)
    res = out["res"]
    assert res.status == 304 and res.headers["Long-Poll"] == "timeout" and res.headers["ETag"] == tag
    assert out["held_s"] >= 6.9, "the server held the request for its whole window (past the client's 5 s read timeout)"


def test_the_full_job_resource_long_polls_on_the_event_stream_too(api):
    """GET …/jobs/{job}?wait=N answers when the job changes, or after N s with 304: never at once."""
    lab = lab_without_workers(api)
    job = new_job(api, lab)
    tag = api.call("GET", job["status_url"], token=lab["token"]).headers["ETag"]
    out: dict = {}
    long_poll(api, job["status_url"], lab["token"], tag, 2, out).join(30)
    assert out["res"].status == 304 and out["res"].headers["ETag"] == tag, out["res"].status
    assert out["held_s"] >= 1.9, f"nothing changed, yet it answered after {out['held_s']:.2f} s of its 2 s window"

    t = long_poll(api, job["status_url"], lab["token"], tag, 20, out)
    long_polls_held(api, lab, 1, polls=[t])
    api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": 1}, lab["token"])
    t.join(25)
    assert out["res"].status == 200 and out["res"].json()["state"] != "queued"
    assert out["held_s"] < 20, "it woke on the change, not at the end of its window"


def test_one_long_poll_can_watch_several_jobs_and_wakes_when_any_changes(api):
    lab = lab_without_workers(api)
    a, b = new_job(api, lab), new_job(api, lab)
    url = f"/api/labs/{lab['lab_id']}/status?jobs={a['job_id']},{b['job_id']}"
    first = api.call("GET", url, token=lab["token"])
    assert [j["status"] for j in first.json()["jobs"]] == ["queued", "queued"]
    out: dict = {}

    def run():
        out["res"] = api.call(
            "GET", url + "&wait=20", token=lab["token"], headers={"If-None-Match": first.headers["ETag"]}
        )

    t = threading.Thread(target=run)
    t.start()
    long_polls_held(api, lab, 1)
    assert t.is_alive()
    api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": 1}, lab["token"])
    t.join(25)
    assert out["res"].status == 200 and "running" in [j["status"] for j in out["res"].json()["jobs"]]
    assert api.call("GET", f"/api/labs/{lab['lab_id']}/status?jobs=", token=lab["token"]).status == 422
    assert api.call("GET", f"/api/labs/{lab['lab_id']}/status?jobs={a['job_id']},404", token=lab["token"]).status == 404


def test_one_lab_cannot_hold_more_long_polls_than_its_cap(api):
    lab = lab_without_workers(api)
    job = new_job(api, lab)
    tag = api.call("GET", status_url(lab, job), token=lab["token"]).headers["ETag"]
    load_url = f"/api/labs/{lab['lab_id']}/status-load"
    cap = api.call("GET", load_url, token=lab["token"]).json()["long_poll_cap"]
    outs = [{} for _ in range(cap)]
    threads = [long_poll(api, status_url(lab, job), lab["token"], tag, 20, o) for o in outs]
    long_polls_held(api, lab, cap)
    over = api.call("GET", status_url(lab, job) + "?wait=20", token=lab["token"], headers={"If-None-Match": tag})
    assert over.status == 429 and over.json()["error"] == "long_poll_limit" and over.headers["Retry-After"]
    plain = api.call("GET", status_url(lab, job), token=lab["token"], headers={"If-None-Match": tag})
    assert plain.status == 304, "plain polling still works beside a full long-poll budget"
    api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"workers": 1}, lab["token"])
    for t in threads:
        t.join(25)
    assert all(o["res"].status == 200 for o in outs), "every held poll woke on the change"


def test_the_process_wide_cap_answers_503(redis_server):
    app = create_app(Config(redis_url=redis_server.url, long_poll_max=2, long_poll_per_lab=10, testing=True))
    r = redis.Redis.from_url(redis_server.url, decode_responses=True)
    lab = registry.create(r, "ch3", 20, chapters.settings_for("ch3"))
    registry.update_settings(r, lab["lab_id"], {"workers": 0})  # a running supervisor must not move the job
    auth = {"Authorization": f"Bearer {lab['token']}"}
    try:
        with app.test_client() as c:
            made = c.post(f"/api/labs/{lab['lab_id']}/jobs", json={"sample": "carphone_pristine"}, headers=auth)
            url = made.get_json()["status_url"] + "/status"
            tag = c.get(url, headers=auth).headers["ETag"]
        held = []

        def hold():
            with app.test_client() as c:
                held.append(c.get(url + "?wait=4", headers={**auth, "If-None-Match": tag}).status_code)

        threads = [threading.Thread(target=hold) for _ in range(2)]
        for t in threads:
            t.start()
        wait(lambda: longpoll.held_now(lab["lab_id"]) == 2, 20, "both long-polls to be held")
        with app.test_client() as c:
            over = c.get(url + "?wait=4", headers={**auth, "If-None-Match": tag})
        assert over.status_code == 503 and over.get_json()["error"] == "long_poll_capacity"
        for t in threads:
            t.join(20)
        assert held == [304, 304]
    finally:
        registry.teardown(r, lab["lab_id"], app.config["LAB"].var_dir)


def test_one_client_cannot_take_every_long_poll_from_a_bystander(redis_server):
    """One address with labs enough to hold the whole server's budget (before: it held all 4, and a
    bystander got 503 long_poll_capacity) holds only its own share; the bystander's poll is held."""
    # a database no pool watches: on the session's, its pool could start a worker for a lab before the test sets
    # it to none, and a job that runs changes the status the polls are held on
    db = redis_server.url.rsplit("/", 1)[0] + "/6"
    app = create_app(Config(redis_url=db, long_poll_max=4, long_poll_per_lab=2, long_poll_per_client=3, testing=True))
    r = redis.Redis.from_url(db, decode_responses=True)
    r.flushdb()
    labs = [registry.create(r, "ch3", 20, chapters.settings_for("ch3")) for _ in range(3)]
    urls = {}
    try:
        for lab in labs:
            registry.update_settings(r, lab["lab_id"], {"workers": 0})
            auth = {"Authorization": f"Bearer {lab['token']}"}
            with app.test_client() as c:
                made = c.post(f"/api/labs/{lab['lab_id']}/jobs", json={"sample": "carphone_pristine"}, headers=auth)
                url = made.get_json()["status_url"] + "/status"
                urls[lab["lab_id"]] = (url, {**auth, "If-None-Match": c.get(url, headers=auth).headers["ETag"]})
        answers: list[tuple[str, int]] = []

        def hold(lab: dict, addr: str) -> threading.Thread:
            url, headers = urls[lab["lab_id"]]

            def run():
                with app.test_client() as c:
                    res = c.get(url + "?wait=4", headers=headers, environ_base={"REMOTE_ADDR": addr})
                    answers.append((addr, res.status_code))

            t = threading.Thread(target=run)
            t.start()
            return t

        greedy, bystander = "10.9.0.1", "10.9.0.2"
        threads = [hold(labs[0], greedy), hold(labs[0], greedy), hold(labs[1], greedy)]
        wait(lambda: sum(longpoll.held_now(lab["lab_id"]) for lab in labs) == 3, 20, "the greedy client's 3 polls")
        url, headers = urls[labs[1]["lab_id"]]
        with app.test_client() as c:
            over = c.get(url + "?wait=4", headers=headers, environ_base={"REMOTE_ADDR": greedy})
        assert over.status_code == 429 and over.get_json()["error"] == "long_poll_client_limit"
        assert over.headers["Retry-After"]
        threads.append(hold(labs[2], bystander))
        for t in threads:
            t.join(20)
        assert sorted(answers) == [(greedy, 304)] * 3 + [(bystander, 304)], "the bystander's poll was held too"
    finally:
        for lab in labs:
            registry.teardown(r, lab["lab_id"], app.config["LAB"].var_dir)


def test_bad_status_requests_get_clear_4xx(api):
    lab = lab_without_workers(api)
    job = new_job(api, lab)
    url = status_url(lab, job)
    assert api.call("GET", url + "?wait=soon", token=lab["token"]).status == 422
    assert api.call("GET", url + "?wait=-1", token=lab["token"]).status == 422
    assert api.call("GET", url + "?client=spy", token=lab["token"]).status == 422
    assert api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/999/status", token=lab["token"]).status == 404
    assert api.call("GET", url).status == 401
    assert api.call("POST", f"/api/labs/{lab['lab_id']}/jobs/999/late-delivery", {}, lab["token"]).status == 404
    assert (
        api.call("POST", f"/api/labs/{lab['lab_id']}/jobs/{job['job_id']}/late-delivery", {}, lab["view_token"]).status
        == 403
    )


def test_a_late_redelivery_of_a_finished_job_is_refused_by_the_cas(api):
    lab = api.lab("ch3", speed=200, workers=1, job_duration=20)
    job = new_job(api, lab)
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    sent = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs/{job['job_id']}/late-delivery", {}, lab["token"])
    assert sent.status == 202 and sent.json()["state"] == "done"
    snap = api.wait_for(lab, lambda s: s["counts"]["claims_refused"] == 1)
    assert snap["counts"]["done"] == 1 and snap["counts"]["succeeded"] == 1, "the late copy did no work"
    refused = [e for e in api.events(lab) if e["type"] == "job.claim_refused"]
    assert refused[0]["data"]["state"] == "done" and refused[0]["job_id"] == job["job_id"]
    hist = api.call("GET", job["status_url"] + "?include=history", token=lab["token"]).json()["history"]
    assert [c["found"] for c in hist["cas_refused"]] == ["done"]
    assert api.call("GET", status_url(lab, job), token=lab["token"]).json()["status"] == "done"
