"""Running a race (RACES in a chapter home) through its public API, as its page does, and reading what each lane did.

Also the loaded box the honest clock is judged on: `cpu_hogs` runs busy-loop processes beside the lab.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

from runtime.harness.client import WaitTimeout

BUSY_LOOP = "while True: pass"


@contextlib.contextmanager
def cpu_hogs(n: int = 2) -> Iterator[list[subprocess.Popen]]:
    """`n` processes spinning on a core each for as long as the block runs (a loaded box); stopped after."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def open_race(api, race_id: str, speed: float) -> dict:
    """Open a race (201) and wait until every lane's workers are up (`ready`); the lanes are held at t = 0."""
    res = api.call("POST", "/api/races", {"race": race_id, "speed": speed})
    assert res.status == 201, res.body
    race = res.json()
    api.created += [lane_lab(lane) for lane in race["labs"]]  # deleted after the test, like a lab
    deadline = time.monotonic() + 90
    while not api.ok("GET", f"/api/races/{race['race_id']}")["ready"]:
        if time.monotonic() > deadline:
            raise WaitTimeout(f"race {race_id}: the lanes' workers never all came up")
        time.sleep(0.1)
    return race


def start(api, race: dict) -> dict:
    res = api.call("POST", f"/api/races/{race['race_id']}/start", {}, token=race["token"])
    assert res.status == 200, res.body
    return res.json()


def run(api, race: dict, done, timeout: float = 240) -> list[float]:
    """Start the race and poll its status until `done(status)`; returns the spread of the lanes' clocks at
    each poll while they ran, relative to the furthest lane ((max − min) / max, one status read gives every
    lane's clock at the same real moment)."""
    start(api, race)
    spreads: list[float] = []
    deadline = time.monotonic() + timeout
    while True:
        st = api.ok("GET", f"/api/races/{race['race_id']}")
        ts = [lab["clock"]["t_raw"] for lab in st["labs"]]
        if max(ts) >= 10:  # past the first moments, where a hundredth of a second is already 1 %
            spreads.append((max(ts) - min(ts)) / max(ts))
        if done(st):
            return spreads
        if time.monotonic() > deadline:
            raise WaitTimeout(
                f"race {st['race']['id']} did not finish within {timeout:.0f} s: "
                f"{[lab['counts'] for lab in st['labs']]}"
            )
        time.sleep(0.05)


def lane_lab(lane: dict) -> dict:
    """A lane as the lab helpers take it (id and owner token)."""
    return {"lab_id": lane["lab_id"], "token": lane["token"]}


def overlapping_runs(attempts: list[dict]) -> int:
    """Pairs of a job's attempts that ran at the same simulated time (one started before the other ended)."""
    ran = [a for a in attempts if a.get("start") is not None and a.get("end") is not None and a["end"] > a["start"]]
    return sum(1 for i, a in enumerate(ran) for b in ran[i + 1 :] if a["start"] < b["end"] and b["start"] < a["end"])


def claim_lags(events: list[dict]) -> list[float]:
    """Per delivery sent to an idle worker at the race's start: simulated seconds from enqueue to first claim."""
    enqueued = {e["job_id"]: e["t_sim"] for e in events if e["type"] == "job.enqueued"}
    first: dict[str, float] = {}
    for e in events:
        if e["type"] in ("job.claimed", "job.duplicate_blocked") and e["job_id"] not in first:
            first[e["job_id"]] = e["t_sim"]
    return [first[j] - t for j, t in enqueued.items() if j in first]
