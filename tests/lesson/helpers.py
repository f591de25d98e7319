"""Small helpers the chapter files share: events by type, waiting on the event stream, page text."""

from __future__ import annotations

import html
import re
import time

import chapters

# How far a simulated span may stray from the figure it checks, as a fraction of that figure. The clock waits at
# every barrier (a job's end, a lease's deadline, a hand-off in transit), so a busy box delays these events in real
# time, not in simulated time: what is left is a process's loop lag, a few simulated seconds at 200×.
REL = 0.03
# A span that ends with a worker picking a message up: RQ's pick-up runs in real time, outside the barriers (at
# 200× a tenth of the VT's 300 s is 150 real ms of pick-up on a busy box).
HANDOFF_REL = 0.1


def events_of(api, lab: dict, type_: str) -> list[dict]:
    return [e for e in api.events(lab) if e["type"] == type_]


def wait_event(
    api, lab: dict, type_: str, timeout: float = 60, count: int = 1, where=None, by: float | None = None
) -> list[dict]:
    """Wait until `count` events of `type_` (matching `where`) are in the lab's stream; return them.

    `by`: the simulated second on the lab's own clock by which they must be there. Once the clock reads past it
    and they are not, the wait fails at once and says so, instead of sitting out `timeout` real seconds (which
    stays, for a clock that stops). The clock is read before the stream, so an event of the instant is seen."""
    deadline = time.monotonic() + timeout
    while True:
        now = api.snapshot(lab)["clock"]["t"] if by is not None else None
        found = [e for e in events_of(api, lab, type_) if where is None or where(e)]
        if len(found) >= count:
            return found
        last = None if now is None or now <= by else [e["type"] for e in api.events(lab)][-15:]
        if last is not None:
            raise AssertionError(
                f"{count}× {type_} had to happen by t={by:g} s on the lab's clock; it reads "
                f"{now:g} s and {len(found)} came; last events: {last}"
            )
        if time.monotonic() > deadline:
            last = [e["type"] for e in api.events(lab)][-15:]
            raise AssertionError(f"{count}× {type_} not seen; last events: {last}")
        time.sleep(0.05)


def page_text(api, number: int) -> str:
    """A chapter page as plain text (tags dropped, entities decoded, whitespace folded)."""
    res = api.call("GET", f"/chapters/{number}")
    assert res.status == 200
    text = re.sub(r"<[^>]+>", " ", res.body.decode())
    return re.sub(r"\s+", " ", html.unescape(text))


def page_html(api, number: int) -> str:
    res = api.call("GET", f"/chapters/{number}")
    assert res.status == 200
    return res.body.decode()


def num(x: float, digits: int = 0) -> str:
    """The pages' number format (app.filters.num)."""
    return f"{x:,.{digits}f}"


def enqueue(api, lab: dict, **body) -> str:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", body or {"sample": "bigbuckbunny"}, lab["token"])
    assert res.status == 202, res.body
    return res.json()["job_id"]


def patch(api, lab: dict, **settings) -> None:
    res = api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", settings, lab["token"])
    assert res.status == 200, res.body


def fault(api, lab: dict, **body) -> dict:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/faults", body, lab["token"])
    assert res.status == 202, res.body
    return res.json()


def kill(api, lab: dict, worker: str) -> dict:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/workers/{worker}/kill", {}, lab["token"])
    assert res.status == 200, res.body
    return res.json()


def job(api, lab: dict, job_id: str) -> dict:
    return api.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job_id}", token=lab["token"]).json()


def button(preset: str, button_id: str) -> dict:
    """A widget scenario button, as the widget reads it from /api/meta (chapters.BUTTONS)."""
    return next(b for b in chapters.BUTTONS[preset] if b["id"] == button_id)


def press(api, lab: dict, preset: str, button_id: str, **extra_settings) -> list[str]:
    """Click a scenario button as the widget does: its settings, its fault, then its jobs. Returns job ids."""
    b = button(preset, button_id)
    if b.get("settings") or extra_settings:
        patch(api, lab, **{**b.get("settings", {}), **extra_settings})
    out = []
    if b.get("fault"):
        f = fault(api, lab, **b["fault"])
        if f.get("job_id"):
            out.append(f["job_id"])
    for _ in range(b.get("count", 1) if b.get("enqueue") else 0):
        out.append(enqueue(api, lab, **b["enqueue"]))
    return out


def busy_worker(api, lab: dict, job_id: str, timeout: float = 60) -> dict:
    snap = api.wait_for(
        lab,
        lambda s: any(w.get("job_id") == job_id and w["state"] == "busy" for w in s["workers"]),
        timeout=timeout,
        every=0.01,
    )
    return next(w for w in snap["workers"] if w.get("job_id") == job_id)


def settled(s: dict) -> bool:
    return s["counts"]["running"] == 0 and all(w["state"] in ("idle", "dead", "respawning") for w in s["workers"])


def of_type(events: list[dict], type_: str) -> list[dict]:
    return [e for e in events if e["type"] == type_]
