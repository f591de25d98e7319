"""Branching a run (app/branch_seed.py): a new lab seeded from one moment of another lab's event stream.

Real stack: the parent's jobs run on real rq workers; the branch's seeded jobs must run too.
"""

import pytest

from tests.integration.test_delivery import enqueue, types


def branch(api, parent, at_event, token=None, **body):
    return api.call(
        "POST", "/api/labs", {"branch_of": parent["lab_id"], "at_event": at_event, **body}, token or parent["token"]
    )


@pytest.fixture
def parent(api):
    """One worker: job 1 (short) finishes, then job 2 is claimed while job 3 waits behind it."""
    lab = api.lab("ch1", speed=200, workers=1, vt_seconds=300, job_duration=600)
    api.workers_ready(lab, 1)
    enqueue(api, lab, sample="bigbuckbunny", job_type="thumbnail", duration_s=30)
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    enqueue(api, lab, sample="bikes", duration_s=600)
    enqueue(api, lab, sample="carphone_pristine", duration_s=900)
    api.wait_for(lab, lambda s: any(w.get("job_id") == "2" for w in s["workers"]), every=0.02)
    return lab


def test_a_branch_starts_from_the_moments_unfinished_jobs_with_the_changed_settings_and_runs_them(api, parent):
    events = api.events(parent)
    claim2 = next(e for e in types(events, "job.claimed") if e["job_id"] == "2")
    res = branch(api, parent, claim2["id"], settings={"vt_seconds": 1200})
    assert res.status == 201, res.body
    child = res.json()
    api.created.append(child)
    info = child["branch"]
    assert (info["parent"], info["at_event"], info["changes"]) == (parent["lab_id"], claim2["id"], {"vt_seconds": 1200})
    # at that moment job 1 was done, job 2 running and job 3 queued: 2 and 3 come again, as new jobs 1 and 2
    assert [(s["parent_job_id"], s["job_id"], s["was"]) for s in info["seeded"]] == [
        ("2", "1", "running"),
        ("3", "2", "queued"),
    ]
    snap = api.snapshot(child)
    assert snap["settings"]["vt_seconds"] == 1200
    assert snap["settings"]["job_duration"] == 600 and snap["settings"]["workers"] == 1  # the parent's, then
    assert api.snapshot(parent)["settings"]["vt_seconds"] == 300  # the parent is untouched
    jobs = {j["id"]: j["payload"] for j in snap["jobs"]}
    assert (jobs["1"]["video_id"], jobs["1"]["duration_s"]) == ("bikes", 600)
    assert (jobs["2"]["video_id"], jobs["2"]["duration_s"]) == ("carphone_pristine", 900)
    assert jobs["1"]["resolutions"] == ["240p", "144p"]
    assert snap["clock"]["t"] >= claim2["t_sim"]  # one time axis: the branch's clock starts at the moment
    remembered = api.call("GET", f"/api/labs/{child['lab_id']}/branch", token=child["token"]).json()["branch"]
    assert remembered["parent"] == parent["lab_id"] and remembered["at_t"] == claim2["t_sim"]
    branched = types(api.events(child), "lab.branched")
    assert len(branched) == 1 and branched[0]["data"]["jobs"] == 2
    # the seeded jobs really run on the branch's own workers; its clock was held until they were up
    api.wait_for(child, lambda s: s["counts"]["done"] == 2, timeout=90)
    resumed = types(api.events(child), "clock.resumed")
    assert len(resumed) == 1 and resumed[0]["t_sim"] == pytest.approx(claim2["t_sim"], abs=1)


def test_branching_at_an_earlier_event_seeds_only_what_existed_then_and_a_view_token_may_branch(api, parent):
    events = api.events(parent)
    enq1 = next(e for e in types(events, "job.enqueued") if e["job_id"] == "1")
    res = branch(api, parent, enq1["id"], token=parent["view_token"], settings={})
    assert res.status == 201, res.body
    child = res.json()
    api.created.append(child)
    assert [(s["parent_job_id"], s["was"]) for s in child["branch"]["seeded"]] == [("1", "queued")]
    assert api.snapshot(child)["jobs"][0]["payload"]["job_type"] == "thumbnail"


def test_bad_branch_requests_are_clear_4xx_and_create_no_lab(api, parent, r):
    before = r.scard("labs")
    enq = types(api.events(parent), "job.enqueued")[0]["id"]
    post = lambda body, token=parent["token"]: api.call("POST", "/api/labs", body, token)  # noqa: E731
    cases = [
        (branch(api, parent, enq, settings={"vt_seconds": 5}), 422, b"vt_seconds"),
        (branch(api, parent, enq, settings={"nope": 1}), 422, b"unknown setting"),
        (branch(api, parent, enq, settings="fast"), 422, b"settings"),
        (branch(api, parent, "not-an-id"), 422, b"at_event"),
        (branch(api, parent, "1-0"), 422, b"unknown_event"),
        (branch(api, parent, None), 422, b"at_event"),
        (post({"branch_of": "nosuchlab", "at_event": enq}), 404, b"unknown_lab"),
        (post({"branch_of": 7, "at_event": enq}), 422, b"branch_of"),
        (post({"branch_of": parent["lab_id"], "at_event": enq}, None), 401, b"missing_token"),
        (branch(api, parent, enq, token="wrong"), 403, b"forbidden"),
    ]
    for res, status, text in cases:
        assert (res.status, text in res.body) == (status, True), res.body
    assert r.scard("labs") == before
