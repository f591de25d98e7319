"""Chapter 5, Idempotency: the client-side Idempotency-Key, on the real API.

TODO, provable once issue 18 lands (not skipped tests):
- Try this 1–3 / Check yourself 2: VT below the job with guard `claim` — one file per rendition under
  transcoded/{job_id}/, one email in the outbox, `duplicates_blocked` counting the refused copies; with
  the output-path and notified guards off, files and emails follow the attempt count.
- Check yourself 3–5 are reasoning questions (dedup window sizing, fail open/closed, why a separate
  flag) — model rows.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lesson


def test_try4_check1_same_idempotency_key_same_job_new_key_new_job(api, measured):
    lab = api.lab("ch5", speed=200, workers=0)
    path = f"/api/labs/{lab['lab_id']}/jobs"

    def send(key: str):
        res = api.call("POST", path, {"sample": "bigbuckbunny"}, lab["token"], headers={"Idempotency-Key": key})
        assert res.status == 202, res.body
        return res.json()["job_id"]
    first = send("upload-9931")
    again = send("upload-9931")
    other = send("upload-9932")
    assert again == first and other != first
    assert api.snapshot(lab)["counts"]["queued"] == 2  # the resend did not grow the queue
    measured.update(first=first, resend=again, new_key=other, queued=2)
