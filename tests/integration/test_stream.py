"""The event stream on the real server: what one append costs (a busy lab appends a dozen a second)."""

from __future__ import annotations

import uuid

import pytest
import redis

from core import stream
from core.keys import key
from tests.helpers import commands_run, requests_sent


@pytest.mark.parametrize(
    ("type_", "commands"),
    [("job.progress", 1), ("job.enqueued", 3)],
    ids=["uncounted: an XADD", "counted: a script, its XADD and its HINCRBY"],
)
def test_an_event_is_its_append_and_its_counter_with_no_doorbell(r, redis_server, type_, commands):
    lab = f"t-stream-{uuid.uuid4().hex[:8]}"
    name = f"t-emit-{uuid.uuid4().hex[:8]}"
    own = redis.Redis.from_url(redis_server.url, decode_responses=True, client_name=name)
    try:
        stream.emit(own, lab, type_, 1.0, job_id="1")  # connected (and named), and the script loaded
        before = commands_run(r, name=name)
        stream.emit(own, lab, type_, 2.0, job_id="1")
        assert commands_run(r, name=name) - before == commands, "an event cost more than its append and its counter"
        assert [e["type"] for e in stream.read_after(r, lab)] == [type_, type_]
        assert (r.hget(key(lab, "counts"), stream.counter(type_)) == "2") == bool(stream.counter(type_))
    finally:
        own.close()
        r.delete(key(lab, "events"), key(lab, "counts"))


def test_events_appended_together_are_one_request_and_bump_each_counter_once(r, redis_server, monkeypatch):
    """An attempt's outputs (two output.written) and a storage step's calls go up in one step: one script, an
    XADD each, and one HINCRBY per counter by how many it counts."""
    lab = f"t-stream-{uuid.uuid4().hex[:8]}"
    name = f"t-emit-{uuid.uuid4().hex[:8]}"
    own = redis.Redis.from_url(redis_server.url, decode_responses=True, client_name=name)
    events = [
        ("output.written", 5.0, {"path": "a"}),
        ("output.written", 5.0, {"path": "b"}),
        ("job.progress", 5.0, {"percent": 10}),
    ]
    try:
        stream.emit(own, lab, "job.enqueued", 1.0, job_id="1")  # connected (and named), and the script loaded
        before, sent = commands_run(r, name=name), requests_sent(own, monkeypatch)
        stream.emit_all(own, lab, events)
        assert sent == ["EVALSHA"], f"the events took more than one request: {sent}"
        assert commands_run(r, name=name) - before == 5, "not one XADD each and one HINCRBY per counter"
        assert [(e["type"], e["data"]) for e in stream.read_after(r, lab)][1:] == [(t, d) for t, _s, d in events]
        assert r.hget(key(lab, "counts"), "outputs_written") == "2"
    finally:
        own.close()
        r.delete(key(lab, "events"), key(lab, "counts"))
