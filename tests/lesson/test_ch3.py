"""Chapter 3, Status Delivery, on the real API and the running lab: the watch panel's five watchers (real
polling, ETag, long-poll, WebSocket and webhook clients on the endpoints the panel calls), ETag and
long-poll, the claim-time compare-and-swap (a late delivery of a finished job refused; a redelivered copy
backing off; a crashed holder freed by the sweeper or the heartbeat). Times are the lab's simulated event
times.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import pytest

import chapters
from tests.lesson.helpers import REL, busy_worker, enqueue, kill, num, of_type, page_text, settled, wait_event


def job_path(lab: dict, job_id: str) -> str:
    return f"/api/labs/{lab['lab_id']}/jobs/{job_id}"


def test_try2_check2_an_unchanged_job_answers_304_to_its_etag(api, measured):
    lab = api.lab("ch3", speed=200, workers=0)  # nobody will run it: its status cannot change
    job = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "bigbuckbunny"}, lab["token"]).json()
    first = api.call("GET", job_path(lab, job["job_id"]), token=lab["token"])
    tag = first.headers["ETag"]
    again = api.call("GET", job_path(lab, job["job_id"]), token=lab["token"], headers={"If-None-Match": tag})
    assert again.status == 304 and again.body == b""
    measured.update(
        first=first.status, first_bytes=len(first.body), unchanged=again.status, unchanged_bytes=len(again.body)
    )


def test_try1_a_long_poll_returns_when_the_job_changes(api, measured):
    lab = api.lab("ch3", speed=200)
    api.workers_ready(lab, 2)
    lid, tok = lab["lab_id"], lab["token"]
    api.call("POST", f"/api/labs/{lid}/clock", {"action": "pause"}, tok)
    job = api.call("POST", f"/api/labs/{lid}/jobs", {"sample": "bigbuckbunny"}, tok).json()
    tag = api.call("GET", job_path(lab, job["job_id"]), token=tok).headers["ETag"]
    api.call("POST", f"/api/labs/{lid}/clock", {"action": "resume"}, tok)
    held = api.call("GET", job_path(lab, job["job_id"]) + "?wait=25", token=tok, headers={"If-None-Match": tag})
    # a 200 with a new tag: the hold ended because the job changed (a hold that runs out answers 304)
    assert held.status == 200 and held.headers["ETag"] != tag
    measured.update(status=held.status, state=held.json()["state"])


C3 = chapters.derive()["ch3"]
C1 = chapters.derive()["ch1"]
PRESET = chapters.settings_for("ch3")
SPEED = 200


def test_try4_check4_a_late_delivery_of_a_finished_job_is_refused(api, measured):
    lab = api.lab("ch3", speed=SPEED)
    api.workers_ready(lab, PRESET["workers"])
    job_id = enqueue(api, lab)
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs/{job_id}/late-delivery", {}, lab["token"])
    assert res.status == 202, res.body
    refused = wait_event(api, lab, "job.claim_refused", timeout=60)[0]
    assert refused["data"]["state"] == "done"  # done → running refused
    snap = api.snapshot(lab)
    assert snap["counts"]["done"] == 1 and snap["counts"]["claims_refused"] >= 1
    assert len(of_type(api.events(lab), "job.succeeded")) == 1
    measured.update(refused_state=refused["data"]["state"], claims_refused=snap["counts"]["claims_refused"])


def test_try5_check5_a_short_vt_copy_backs_off_and_a_crashed_holder_is_freed(api, measured):
    model = chapters.ch3.lab_model()
    vt = model["short_vt_s"]  # "set the VT to 200 s, below the job's duration"
    assert vt < PRESET["job_duration"] and model["short_vt_copies"] == 1
    # the step's controls are in chapter 3's widget, and the VT the page names is the one set here
    assert {"vt_seconds", "heartbeat"} <= set(chapters.PRESETS["ch3"]["controls"])
    text = page_text(api, 3)
    assert f"Set the VT to {num(vt)} s" in text and f"duplicates blocked {model['short_vt_copies']}" in text
    lab = api.lab("ch3", speed=SPEED, vt_seconds=vt, heartbeat=False)
    api.workers_ready(lab, PRESET["workers"])
    enqueue(api, lab)
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    assert snap["counts"]["duplicates_blocked"] == model["short_vt_copies"], snap["counts"]
    assert len(of_type(api.events(lab), "job.claimed")) == 1
    # kill the holder: every copy backs off until the sweeper puts the record back to queued
    stale = PRESET["stale_after"]
    lab2 = api.lab("ch3", speed=SPEED, vt_seconds=vt, heartbeat=False, respawn_delay=5)
    api.workers_ready(lab2, PRESET["workers"])
    job2 = enqueue(api, lab2)
    kill(api, lab2, busy_worker(api, lab2, job2)["id"])
    api.wait_for(lab2, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=180)
    ev = api.events(lab2)
    claim1, freed = of_type(ev, "job.claimed")[0], of_type(ev, "job.stale_freed")
    assert len(freed) == 1 and "sweeper" in freed[0]["data"]["reason"]
    assert [e for e in of_type(ev, "job.duplicate_blocked") if e["t_sim"] < freed[0]["t_sim"]]
    assert freed[0]["t_sim"] - claim1["t_sim"] == pytest.approx(stale, rel=REL)
    # the heartbeat on: freed one reset window after the crash
    extend = C1["heartbeat_extend_s"]
    lab3 = api.lab("ch3", speed=SPEED, vt_seconds=vt, heartbeat=True, heartbeat_extend=extend, respawn_delay=5)
    api.workers_ready(lab3, PRESET["workers"])
    job3 = enqueue(api, lab3)
    kill(api, lab3, busy_worker(api, lab3, job3)["id"])
    api.wait_for(lab3, lambda s: s["counts"]["done"] == 1 and settled(s), timeout=120)
    ev3 = api.events(lab3)
    kill_t = of_type(ev3, "worker.killed")[0]["t_sim"]
    freed3 = of_type(ev3, "job.stale_freed")[0]
    assert "heartbeat" in freed3["data"]["reason"] and freed3["t_sim"] - kill_t <= extend * (1 + REL)
    measured.update(
        vt_s=vt,
        job_s=PRESET["job_duration"],
        duplicates_blocked=snap["counts"]["duplicates_blocked"],
        sweeper_freed_after_claim_s=round(freed[0]["t_sim"] - claim1["t_sim"], 1),
        stale_after_s=stale,
        heartbeat_freed_after_kill_s=round(freed3["t_sim"] - kill_t, 1),
        extension_s=extend,
    )


def test_check1_halving_the_poll_interval_doubles_requests_and_halves_the_delay(api, measured):
    assert C3["halved_interval_polls_per_s"] == pytest.approx(2 * C3["polls_per_s"])
    text = page_text(api, 3)
    assert f"Requests double to {num(C3['halved_interval_polls_per_s'])} a second" in text
    measured.update(polls_per_s=C3["halved_interval_polls_per_s"], mean_delay_s=C3["halved_interval_mean_delay_s"])


# --- try this 1–3: the watch panel's five watchers, on the endpoints the panel calls --------------------

LM3 = chapters.ch3.lab_model()
FINAL = {"done", "failed", "dead", "lost"}
PANEL_SPEED = 50  # a 300 s job takes seconds of real time: enough polls per job for W/P to mean something
POLL_P = 1.0  # real seconds between a poll's answer and the next poll, as the panel's fetch loops wait


def status_path(lab: dict, job_id: str, client: str) -> str:
    return f"/api/labs/{lab['lab_id']}/jobs/{job_id}/status?client={client}"


def poll_loop(api, lab, job_id: str, client: str, tally: dict, stop) -> None:
    """The panel's polling row (client=poll) or ETag row (client=etag): GET, wait P after the answer, repeat."""
    tag = None
    while not stop.is_set():
        res = api.call(
            "GET",
            status_path(lab, job_id, client),
            token=lab["token"],
            headers={"If-None-Match": tag} if client == "etag" and tag else None,
        )
        tally["requests"] += 1
        tally["not_modified"] += res.status == 304
        if res.status == 200:
            tag = res.headers.get("ETag")
            tally["changed"] += 1
            if res.json()["status"] in FINAL:
                tally["learned"].add(job_id)
                return
        time.sleep(POLL_P)


def long_poll_loop(api, lab, ids: list[str], tally: dict, stop) -> None:
    """The panel's long-poll row: one held request for every watched job (?wait=25), re-sent on each answer."""
    tag, path = None, f"/api/labs/{lab['lab_id']}/status?jobs={','.join(ids)}&client=long"
    while not stop.is_set() and len(tally["learned"]) < len(ids):
        res = api.call(
            "GET",
            path + ("&wait=25" if tag else ""),
            token=lab["token"],
            headers={"If-None-Match": tag} if tag else None,
        )
        tally["requests"] += 1
        tally["not_modified"] += res.status == 304
        if res.status == 200:
            tag = res.headers.get("ETag")
            tally["learned"] |= {j["job_id"] for j in res.json()["jobs"] if j["status"] in FINAL}


def ws_loop(stack, lab, after: str, ids: list[str], tally: dict, stop) -> None:
    """The widget's WebSocket: no requests; completions are pushed."""
    import websocket

    url = stack.url.replace("http", "ws") + f"/ws/labs/{lab['lab_id']}?after={after}&token={lab['token']}"
    ws = websocket.create_connection(url, timeout=5, origin=stack.url)
    try:
        while not stop.is_set() and len(tally["learned"]) < len(ids):
            try:
                ev = json.loads(ws.recv())
            except websocket.WebSocketTimeoutException:
                continue
            tally["pushed"] += 1
            if ev["type"] == "job.succeeded" and ev.get("job_id") in ids:
                tally["learned"].add(ev["job_id"])
    finally:
        ws.close()


def register_hook(api, lab, fails: int) -> None:
    res = api.call("PUT", f"/api/labs/{lab['lab_id']}/webhook", {"url": "builtin", "fail_times": fails}, lab["token"])
    assert res.status == 200, res.body


def watch_round(api, stack, lab, n_jobs: int) -> dict:
    """Press "Upload and watch": upload n jobs, then watch them five ways at once until every watcher knows."""
    after = api.events(lab)[-1]["id"]
    ids = [enqueue(api, lab, sample="carphone_pristine") for _ in range(n_jobs)]
    tallies = {
        m: {"requests": 0, "not_modified": 0, "changed": 0, "pushed": 0, "learned": set()}
        for m in ("poll", "etag", "long", "ws")
    }
    stop = threading.Event()
    threads = [
        threading.Thread(target=poll_loop, args=(api, lab, i, m, tallies[m], stop), daemon=True)
        for i in ids
        for m in ("poll", "etag")
    ]
    threads += [
        threading.Thread(target=long_poll_loop, args=(api, lab, ids, tallies["long"], stop), daemon=True),
        threading.Thread(target=ws_loop, args=(stack, lab, after, ids, tallies["ws"], stop), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        api.wait_for(
            lab,
            lambda s: all(len(t["learned"]) == n_jobs for t in tallies.values()),
            timeout=240,
            what="every watcher learned of every completion",
            every=0.5,
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=40)
    return {"ids": ids, "tallies": tallies}


def lifetimes(events: list[dict], ids: list[str]) -> list[float]:
    """Each job's real time from upload to done (the panel's W: the server's t_real of both events)."""
    enq = {e["job_id"]: e["t_real"] for e in of_type(events, "job.enqueued")}
    done = {e["job_id"]: e["t_real"] for e in of_type(events, "job.succeeded")}
    return [done[i] - enq[i] for i in ids]


def test_try1_3_five_watchers_polling_near_w_over_p_and_a_failing_receiver_gets_one_id_n_plus_1_times(
    api, stack, measured
):
    lab = api.lab("ch3", speed=PANEL_SPEED)
    api.workers_ready(lab, PRESET["workers"])
    register_hook(api, lab, 0)  # the panel registers the built-in receiver when it opens
    # try 1–2: the same jobs watched five ways
    n = PRESET["workers"]
    rnd = watch_round(api, stack, lab, n)
    ids, t = rnd["ids"], rnd["tallies"]
    api.wait_for(lab, lambda s: settled(s), timeout=60)
    ev = api.events(lab)
    W = statistics.fmean(lifetimes(ev, ids))
    per_job = t["poll"]["requests"] / n
    # polling's requests per job near W/P: one per interval while the job is in flight, plus the first and the
    # one that sees `done` (so at most W/P + 2); each answer's own round trip stretches an interval a little
    assert 0.6 * W / POLL_P <= per_job <= W / POLL_P + 2, (per_job, W, POLL_P)
    # the ETag row asks as often, but an unchanged status costs a bodiless 304: only changes are 200s
    assert t["etag"]["requests"] == pytest.approx(t["poll"]["requests"], abs=2 * n)
    assert t["etag"]["not_modified"] >= 1 and t["etag"]["changed"] <= 3 * n  # queued, running, done
    assert t["etag"]["changed"] + t["etag"]["not_modified"] == t["etag"]["requests"]
    # one long-poll for every job: far fewer requests; the WebSocket makes none
    assert t["long"]["requests"] < t["poll"]["requests"]
    assert t["ws"]["learned"] == set(ids) and t["ws"]["pushed"] > 0
    # the server counted the same requests the clients made (GET .../status-load, the panel's tally line)
    load = api.call("GET", f"/api/labs/{lab['lab_id']}/status-load", token=lab["token"]).json()["clients"]
    assert {m: load[m]["requests"] for m in ("poll", "etag", "long")} == {
        m: t[m]["requests"] for m in ("poll", "etag", "long")
    }
    assert load["etag"]["not_modified"] == t["etag"]["not_modified"]
    # the webhook row: one signed POST per completion, delivered once each
    api.wait_for(lab, lambda s: len(of_type(api.events(lab), "webhook.delivered")) >= n, timeout=60, every=0.5)
    received = [e for e in of_type(api.events(lab), "webhook.received") if e["job_id"] in ids]
    assert sorted(e["job_id"] for e in received) == sorted(ids) and all(e["data"]["status"] == 200 for e in received)

    # try 3: the receiver fails the next N deliveries; watch one job again
    fails = LM3["receiver_fails"]
    register_hook(api, lab, fails)
    job3 = watch_round(api, stack, lab, 1)["ids"][0]
    api.wait_for(
        lab,
        lambda s: any(e["job_id"] == job3 for e in of_type(api.events(lab), "webhook.delivered")),
        timeout=120,
        what="the failing receiver's webhook delivered in the end",
        every=0.5,
    )
    ev = api.events(lab)
    got = [e for e in of_type(ev, "webhook.received") if e["job_id"] == job3]
    assert len(got) == LM3["webhook_arrivals"]  # N + 1 arrivals …
    assert len({e["data"]["msg"] for e in got}) == 1  # … of the same webhook-id
    assert [e["data"]["status"] for e in got] == [500] * fails + [200]
    assert [e["data"]["duplicate"] for e in got] == [False] * len(got)  # the receiver accepted it once
    assert len([e for e in of_type(ev, "webhook.delivered") if e["job_id"] == job3]) == 1
    retries = [e for e in of_type(ev, "webhook.attempted") if e["job_id"] == job3]
    assert len(retries) == fails
    for k, (r, window) in enumerate(zip(retries, LM3["jitter_windows_s"], strict=True)):
        assert 0 <= r["data"]["delay"] <= window  # full jitter: uniform in [0, base·2^(n−1)]
        assert got[k + 1]["t_sim"] - r["t_sim"] >= r["data"]["delay"] - 0.001  # the retry waited its delay
    text = page_text(api, 3)  # the step as the page gives it
    assert f"fail the next {fails} deliveries" in text and f"arrives {LM3['webhook_arrivals']} times" in text
    measured.update(
        jobs=n,
        poll_interval_s=POLL_P,
        mean_lifetime_real_s=round(W, 2),
        w_over_p=round(W / POLL_P, 2),
        poll_requests_per_job=round(per_job, 2),
        etag_requests=t["etag"]["requests"],
        etag_304=t["etag"]["not_modified"],
        long_poll_requests=t["long"]["requests"],
        ws_pushed=t["ws"]["pushed"],
        receiver_fails=fails,
        webhook_id_arrivals=len(got),
        answers=[e["data"]["status"] for e in got],
        retry_delays_s=[r["data"]["delay"] for r in retries],
    )
