"""An honest first claim: a job that arrives while a worker is idle is claimed at the simulated instant it
was enqueued, on a quiet box and beside two CPU hogs. The clock waits for the real hand-off (RQ's pick-up,
the fork of a work horse), as it does between jobs, so no queue wait shows that no queue caused.
"""

from __future__ import annotations

import pytest

import chapters
from tests.lesson.helpers import of_type, wait_event
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
