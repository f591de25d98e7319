"""GET /api/labs/{lab}/jobs/{job}?include=history: a job's internals folded from the real event stream."""

import os
import select
import signal
import time

import pytest
import redis

from runtime.harness.stack import Stack
from tests.integration.test_delivery import busy_worker, enqueue, kill, types


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
        got = api.call(
            "GET", f"/api/labs/{lab['lab_id']}/jobs/{job}/outputs/{name.rsplit('/', 1)[1]}", token=lab["token"]
        )
        assert got.status == 200 and len(got.body) > 0, (name, got.status)
    assert h["cas_refused"] == [] and h["retry_delays"] == []


def test_an_unknown_include_is_a_clear_422(api):
    lab = api.lab("ch1")
    job = enqueue(api, lab)
    res = api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job}?include=everything", token=lab["token"])
    assert res.status == 422 and b"history" in res.body


@pytest.fixture
def spare_stack(redis_server, tmp_path_factory):
    """A stack of this test's own, on its own database: on the session's shared stack another test's labs
    may take the spares between the check that two are ready and this lab's start."""
    db = redis_server.url.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(db).flushdb()
    with Stack("spares", root=tmp_path_factory.mktemp("spares"), redis_url=db) as s:
        client = s.api()
        yield s, client
        client.delete_created()


def test_a_labs_workers_and_a_killed_workers_replacement_come_from_pre_started_processes(spare_stack):
    """workers/spare.py: a lab's workers are processes started before the lab was asked for (Python, RQ and
    the job code loaded), which then run as its `rq worker`; so is a killed worker's replacement; and the
    host tops its spares back up."""
    from core.procs import processes_matching, server_tag, started_at, wait

    stack, api = spare_stack

    def spares() -> dict[int, str]:
        return processes_matching(f"workers.spare --server {server_tag(stack.redis_url)} ")

    wait(lambda: len(spares()) >= 2, 30, "two spare workers")
    asked = time.time()
    lab = api.lab("ch1", speed=200, vt_seconds=1200, job_duration=60, workers=2, respawn_delay=10)
    api.workers_ready(lab, 2)
    rows = api.snapshot(lab)["workers"]
    assert all(0 < started_at(w["pid"]) < asked for w in rows), rows  # nothing was started for this lab
    titles = processes_matching(f"lab-{lab['lab_id']}")
    assert all(titles.get(w["pid"], "").startswith("rq worker --name") for w in rows), titles
    job = enqueue(api, lab)
    victim = busy_worker(api, lab, job)
    wait(lambda: spares() or None, 30, "a spare to be ready for the respawn")
    killed_at = time.time()
    kill(api, lab, victim["id"])
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1)
    replacement = next(w for w in api.snapshot(lab)["workers"] if w["id"] == victim["id"])
    assert replacement["pid"] != victim["pid"] and 0 < started_at(replacement["pid"]) < killed_at
    wait(lambda: len(spares()) >= 2, 30, "the host to top its spares back up")


def test_spares_are_forked_by_the_hosts_zygote_and_a_forked_worker_that_dies_on_its_own_is_replaced(spare_stack):
    """workers/zygote.py: every spare is a child of the host's one zygote (a fork of the loaded job code, not an
    interpreter of its own); a lab's worker made from one and killed from outside the pool (not by *kill
    worker*) is seen dead though it is not the supervisor's child, and a new one takes its place."""
    from core.procs import cmdline, ppid, processes_matching, server_tag, wait

    stack, api = spare_stack
    tag = server_tag(stack.redis_url)
    wait(lambda: len(processes_matching(f"workers.spare --server {tag} ")) >= 2, 30, "two spare workers")
    zygotes = processes_matching(f"workers.zygote --server {tag} ")
    assert len(zygotes) == 1, zygotes
    spares = processes_matching(f"workers.spare --server {tag} ")
    assert {ppid(pid) for pid in spares} == set(zygotes), (spares, zygotes)
    lab = api.lab("ch1", speed=200, workers=1, respawn_delay=10)
    api.workers_ready(lab, 1)
    (worker,) = api.snapshot(lab)["workers"]
    assert ppid(worker["pid"]) in zygotes and "rq worker" in cmdline(worker["pid"])
    os.kill(worker["pid"], signal.SIGKILL)
    api.wait_for(
        lab,
        lambda s: any(w["state"] == "idle" and w["pid"] not in (None, worker["pid"]) for w in s["workers"]),
        what="the dead worker replaced",
    )
    assert "worker.died" in {e["type"] for e in api.events(lab)}


def test_a_zygote_that_died_is_heard_once_and_then_wakes_no_wait(redis_server, tmp_path):
    """Its exit pipe's end of file is readable for good: taken as one exit (its spares and workers died with it),
    then closed, so the supervisor's wait (which selects on `exits`) does not return at once ever after."""
    from core.config import Config
    from core.procs import wait
    from workers.process import lab_env
    from workers.zygote import Zygote

    zygote = Zygote(["--server", "t-dead"], lab_env(Config(redis_url=redis_server.url, var_dir=tmp_path)), None)
    try:
        fd = zygote.exits
        assert fd is not None and not zygote.exited(), "a live zygote with no exits reported one"
        zygote.proc.kill()
        zygote.proc.wait()
        wait(lambda: select.select([fd], [], [], 0)[0], 10, "the dead zygote's pipe never became readable")
        assert zygote.exited(), "the zygote's death was not heard"
        assert zygote.exits is None, "the dead zygote's pipe is still there to wake every wait"
        assert not zygote.exited()
    finally:
        zygote.stop()
