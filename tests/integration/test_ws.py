"""WebSocket push: events arrive live; a reconnect with the last id resumes with no gap or repeat."""


import pytest
import websocket

from tests.helpers import ws_until

pytestmark = pytest.mark.integration


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
