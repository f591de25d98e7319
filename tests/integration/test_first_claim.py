"""An honest first claim: a job that arrives while a worker is idle is claimed at the simulated instant it
was enqueued, on a quiet box and beside two CPU hogs. The clock waits for the real hand-off (RQ's pick-up,
the fork of a work horse), as it does between jobs, so no queue wait shows that no queue caused. A job that
waits for a worker to respawn is claimed the instant that worker started: its start-up takes no simulated time.
"""

from __future__ import annotations

import pytest

import chapters
from tests.lesson.helpers import enqueue, kill, of_type, wait_event
from tests.lesson.races import claim_lags, cpu_hogs

SPEED = 100  # the figure; at 100× a real second of hand-off would be 100 simulated seconds
CHAPTERS = [p for p in (f"ch{n}" for n in range(9)) if chapters.settings_for(p)["workers"] > 0]


def idle_workers(snap: dict, n: int) -> bool:
    return sum(w["state"] == "idle" and bool(w.get("pid")) for w in snap["workers"]) == n


@pytest.mark.parametrize("hogs", [0, 2], ids=["quiet", "two-cpu-hogs"])
@pytest.mark.parametrize("preset", CHAPTERS)
def test_a_job_sent_to_an_idle_worker_is_claimed_the_instant_it_was_enqueued(api, preset, hogs):
    n = chapters.settings_for(preset)["workers"]
    lab = api.lab(preset, speed=SPEED)
    api.workers_ready(lab, n)
    api.wait_for(lab, lambda s: idle_workers(s, n), what=f"{n} idle workers")
    with cpu_hogs(hogs):
        res = api.enqueue(lab, {"sample": "bigbuckbunny"})
        assert res.status == 202, res.body
        wait_event(api, lab, "job.claimed")
    ev = api.events(lab)
    (lag,) = claim_lags(ev)
    claimed = of_type(ev, "job.claimed")[0]
    assert lag <= 1, (
        f"{preset}: an idle worker claimed the job {lag:.1f} simulated s after it was enqueued "
        f"(at t = {claimed['t_sim']})"
    )


def test_a_job_waiting_for_a_respawn_is_claimed_the_instant_the_worker_started(api):
    """A worker's start (an interpreter, its imports, RQ's registration and first round trips) is real seconds
    beside two CPU hogs, hundreds of simulated seconds at 100×: the clock holds at the respawn until the new
    worker is first idle and has the waiting job in hand."""
    lab = api.lab("ch1", speed=SPEED, workers=1, respawn_delay=5)
    api.workers_ready(lab, 1)
    (worker,) = api.snapshot(lab)["workers"]
    with cpu_hogs(2):
        kill(api, lab, worker["id"])
        enqueue(api, lab)
        wait_event(api, lab, "job.claimed")
    ev = api.events(lab)
    started = of_type(ev, "worker.started")[-1]
    claimed = of_type(ev, "job.claimed")[0]
    assert started["t_sim"] >= round(of_type(ev, "worker.killed")[0]["t_sim"] + 5, 3)  # the respawn, not the first
    gap = claimed["t_sim"] - started["t_sim"]
    assert gap <= 1, f"the job was claimed {gap:.1f} simulated s after its worker respawned (at t = {started['t_sim']})"


def test_a_job_sent_as_its_lab_opens_is_claimed_at_the_labs_first_moment(api):
    """A new lab's workers start in real time (the supervisor's next pass, then an interpreter each), which beside
    two CPU hogs is tens of real milliseconds, tens of simulated seconds at 1000×: the clock holds at the lab's first
    moment until its first pass has started them, so a job sent as the page opens finds them started at t = 0."""
    with cpu_hogs(2):
        lab = api.lab("ch1", speed=1000)
        enqueue(api, lab)
        wait_event(api, lab, "job.claimed")
    ev = api.events(lab)
    late = [e["t_sim"] for e in of_type(ev, "worker.started") if e["t_sim"] > 1]
    assert not late, f"workers started at t = {late}: the clock ran before the lab's first pass"
    (lag,) = claim_lags(ev)
    assert lag <= 1 and of_type(ev, "job.claimed")[0]["t_sim"] <= 1, f"claimed {lag:.1f} simulated s after its enqueue"
