"""The event stream on the real server: what one append costs (a busy lab appends a dozen a second)."""

from __future__ import annotations

import uuid

import pytest
import redis

from core import stream
from core.keys import key

pytestmark = pytest.mark.integration


def _commands_of(r: redis.Redis, name: str) -> int:
    """Commands the server has run for every connection named `name` so far (its own count, `tot-cmds`)."""
    return sum(int(c["tot-cmds"]) for c in r.client_list() if c.get("name") == name)


@pytest.mark.parametrize(("type_", "commands"), [("job.progress", 1), ("job.enqueued", 4)],
                         ids=["uncounted: an XADD", "counted: MULTI, XADD, HINCRBY, EXEC"])
def test_an_event_is_its_append_and_its_counter_with_no_doorbell(r, redis_server, type_, commands):
    lab = f"t-stream-{uuid.uuid4().hex[:8]}"
    name = f"t-emit-{uuid.uuid4().hex[:8]}"
    own = redis.Redis.from_url(redis_server.url, decode_responses=True, client_name=name)
    try:
        own.ping()  # connected (and named) before the count starts
        before = _commands_of(r, name)
        stream.emit(own, lab, type_, 1.0, job_id="1")
        assert _commands_of(r, name) - before == commands, "an event cost more than its append and its counter"
        assert [e["type"] for e in stream.read_after(r, lab)] == [type_]
        assert (r.hget(key(lab, "counts"), stream.counter(type_)) == "1") == bool(stream.counter(type_))
    finally:
        own.close()
        r.delete(key(lab, "events"), key(lab, "counts"))
