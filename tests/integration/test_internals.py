"""GET /api/labs/{lab}/jobs/{job}?include=history: a job's internals folded from the real event stream."""

import pytest

from tests.integration.test_delivery import busy_worker, enqueue, kill, types

pytestmark = pytest.mark.integration


def test_history_shows_each_attempt_with_its_fence_lease_and_the_files_written(api):
    lab = api.lab("ch1", speed=200, vt_seconds=1200, job_duration=600, workers=2, respawn_delay=10)
    api.workers_ready(lab, 2)
    job = enqueue(api, lab)
    w = busy_worker(api, lab, job)
    kill(api, lab, w["id"])
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    res = api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job}?include=history", token=lab["token"])
    assert res.status == 200, res.body
    body = res.json()
    assert body["state"] == "done" and body["payload"]["job_id"] == job  # the plain contract is kept
    h = body["history"]
    first, second = h["attempts"]
    claimed = types(api.events(lab), "job.claimed")[0]
    assert (first["fence"], first["worker"], first["outcome"]) == (1, w["id"], "lease expired")
    assert first["lease_deadline"] == pytest.approx(claimed["t_sim"] + 1200, abs=1)
    assert first["end"] >= first["lease_deadline"] - 1e-3  # event times are rounded to the ms, deadlines are not
    assert (second["fence"], second["outcome"]) == (2, "succeeded") and second["worker"] != w["id"]
    # outputs are blobs now: the history names each by its blob name, and the job serves every one
    assert sorted(h["output_files"]) == [f"transcoded/{job}/144p.mp4", f"transcoded/{job}/240p.mp4"]
    for name in h["output_files"]:
        got = api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job}/outputs/{name.rsplit('/', 1)[1]}",
                       token=lab["token"])
        assert got.status == 200 and len(got.body) > 0, (name, got.status)
    assert h["cas_refused"] == [] and h["retry_delays"] == []


def test_an_unknown_include_is_a_clear_422(api):
    lab = api.lab("ch1")
    job = enqueue(api, lab)
    res = api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job}?include=everything", token=lab["token"])
    assert res.status == 422 and b"history" in res.body
