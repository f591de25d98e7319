"""Small helpers the integration and lesson tests share: events by type, a job enqueued, chapter 7's
schedule read, changed and waited on. All of them go through the public HTTP contract."""

from __future__ import annotations

import json
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


def page_lab(page, preset: str) -> dict | None:
    """The lab a chapter page opened for its preset (kept in its sessionStorage), as {lab_id, token}."""
    saved = page.evaluate(f"sessionStorage.getItem('awl:lab:{preset}')")
    return {"lab_id": json.loads(saved)["id"], "token": json.loads(saved)["token"]} if saved else None


def delete_page_labs(page, api, presets: list[str]) -> None:
    """Delete the labs a browser test's pages opened (workers, keys and files)."""
    for preset in presets:
        lab = page_lab(page, preset)
        if lab:
            api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])
