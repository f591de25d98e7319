"""An event's size is bounded whatever a client sends, so the count cap bounds a stream's bytes."""

from __future__ import annotations

import json

from core import stream


def test_a_long_string_is_cut_and_the_event_says_so():
    url = "http://127.0.0.1:9/" + "a" * 5000
    raw = stream.encode("webhook.registered", 1.0, target=url)
    ev = json.loads(raw)
    assert len(raw.encode()) <= stream.EVENT_MAX_BYTES
    assert ev["truncated"] is True and ev["data"]["target"].startswith("http://127.0.0.1:9/aaa")
    assert len(ev["data"]["target"]) < len(url)


def test_many_fields_cannot_pass_the_cap_and_small_events_are_untouched():
    raw = stream.encode("settings.changed", 1.0, job_id="j1", changes={f"k{i}": "v" * 150 for i in range(40)})
    assert len(raw.encode()) <= stream.EVENT_MAX_BYTES and json.loads(raw)["job_id"] == "j1"
    small = json.loads(stream.encode("job.enqueued", 2.0, job_id="j2", attempt=1, video="clip"))
    assert "truncated" not in small and small["data"] == {"video": "clip"}
