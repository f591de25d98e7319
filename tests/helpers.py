"""Small helpers the integration and lesson tests share: events by type, a job enqueued, chapter 7's
schedule read, changed and waited on. All of them go through the public HTTP contract."""

from __future__ import annotations

import time
from collections.abc import Callable


def types(events: list[dict], t: str) -> list[dict]:
    return [e for e in events if e["type"] == t]


def enqueue(api, lab: dict, **body) -> str:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", body, lab["token"])
    assert res.status == 202, res.body
    return res.json()["job_id"]


def sched(api, lab: dict) -> dict:
    res = api.call("GET", f"/api/labs/{lab['lab_id']}/schedule", token=lab["token"])
    assert res.status == 200, res.body
    return res.json()


def control(api, lab: dict, **body) -> dict:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/schedule", body, lab["token"])
    assert res.status == 200, res.body
    return res.json()


def wait_sched(api, lab: dict, predicate: Callable[[dict], bool], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    rep = sched(api, lab)
    while not predicate(rep):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met: totals={rep['totals']} ticks={rep['ticks'][-5:]} "
                                 f"replicas={rep['replicas']}")
        time.sleep(0.1)
        rep = sched(api, lab)
    return rep


def unfold(page, name: str, root: str = "#lab-widget") -> None:
    """Open one of the widget's folded panels (history, jobs, dlq, log, export) by its heading, as a
    learner would; one already open stays open."""
    from playwright.sync_api import expect

    fold = page.locator(f"{root} details[data-fold='{name}']")
    if fold.get_attribute("open") is None:
        fold.locator("summary").click()
    expect(fold).to_have_attribute("open", "")
