"""WebSocket push: events arrive live; a reconnect with the last id resumes with no gap or repeat."""

import time

import pytest
import websocket

from core import stream
from core.procs import wait
from tests.helpers import commands_run, ws_until


def connect(stack, lab, after="0", origin=None):
    url = stack.url.replace("http", "ws") + f"/ws/labs/{lab['lab_id']}?after={after}&token={lab['token']}"
    return websocket.create_connection(url, timeout=20, origin=origin or stack.url)


def test_events_are_pushed_and_resume_after_the_last_id_without_gap_or_repeat(api, stack):
    lab = api.lab("ch1", speed=200, workers=1)
    ws = connect(stack, lab)
    api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"job_type": "thumbnail", "duration_s": 60}, lab["token"])
    seen = ws_until(ws, lambda evs: any(e["type"] == "job.claimed" for e in evs), what="job.claimed")
    ws.close()
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    ws = connect(stack, lab, after=seen[-1]["id"])
    resumed = ws_until(ws, lambda evs: any(e["type"] == "job.succeeded" for e in evs), what="job.succeeded")
    ws.close()
    all_ids = [e["id"] for e in api.events(lab)]
    got = [e["id"] for e in seen + resumed]
    assert got == all_ids[: len(got)], "gap or repeat across the reconnect"


def test_a_socket_from_a_foreign_origin_is_refused(api, stack):
    lab = api.lab("ch1", speed=20, workers=0)
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(stack, lab, origin="http://evil.example")
    assert e.value.status_code == 403


def test_a_socket_without_a_valid_token_is_refused(api, stack):
    lab = api.lab("ch1", speed=20, workers=0)
    url = stack.url.replace("http", "ws") + f"/ws/labs/{lab['lab_id']}?token=wrong"
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(url, timeout=5, origin=stack.url)
    assert e.value.status_code == 403


def test_a_lab_watched_while_the_hub_waits_on_another_gets_its_own_events_and_only_them(api, stack):
    first, second = api.lab("ch1", speed=200, workers=1), api.lab("ch1", speed=200, workers=1)
    ws_first = connect(stack, first)  # the hub now blocks on the first lab's stream
    ws_second = connect(stack, second)
    try:
        api.call(
            "POST", f"/api/labs/{second['lab_id']}/jobs", {"job_type": "thumbnail", "duration_s": 60}, second["token"]
        )
        seen = ws_until(ws_second, lambda evs: any(e["type"] == "job.claimed" for e in evs), what="job.claimed")
        assert all(e.get("job_id") in (None, "1") for e in seen)
        api.call(
            "POST", f"/api/labs/{first['lab_id']}/jobs", {"job_type": "thumbnail", "duration_s": 60}, first["token"]
        )
        mine = ws_until(ws_first, lambda evs: any(e["type"] == "job.claimed" for e in evs), what="job.claimed")
        ids = {e["id"] for e in api.events(first)}
        assert {e["id"] for e in mine} <= ids, "a socket got another lab's events"
    finally:
        ws_first.close()
        ws_second.close()


def progress(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "job.progress"]


def test_the_hub_gathers_a_burst_of_events_into_few_reads_and_pushes_every_one(api, stack, r):
    """One read names every watched lab's stream, so a read per event cost the server a round trip per event and
    per lab watched; after a read that brought events the hub gathers for HUB_GATHER_S. 300 events written a
    millisecond apart (about 0.3 s or more) reach the socket whole and in order, in a fraction of 300 reads."""
    lab = api.lab("ch1", speed=20, workers=0)
    ws = connect(stack, lab, after=api.snapshot(lab)["last_event_id"])
    try:
        hubs = set()  # the hub's connection: the one blocked in XREAD (this test opens no long-poll)
        wait(lambda: hubs.update(c["id"] for c in r.client_list() if c["cmd"] == "xread") or hubs, 10, "no hub read")
        before = sum(commands_run(r, id=i) for i in hubs)
        sent = []
        for n in range(300):
            stream.append(r, lab["lab_id"], "job.progress", 0.0, job_id="1", worker_id="w1", attempt=1, percent=n)
            sent.append(n)
            time.sleep(0.001)
        burst = ws_until(ws, lambda evs: len(progress(evs)) >= len(sent), what="the burst")
        reads = sum(commands_run(r, id=i) for i in hubs) - before
    finally:
        ws.close()
    assert [e["data"]["percent"] for e in progress(burst)] == sent, "lost, repeated or out of order"
    assert reads < len(sent) / 4, f"the hub read {reads} times for {len(sent)} events"
