"""Drill: one lab floods at every limit it has; a learner's lab keeps ≥ 80 % of its quiet-box throughput.

The flooding lab is legal-settings hostile: 8 workers at 1000×, VT 10 s, chapter 6 tier jobs up to its batch
budget (LAB_BATCH_JOBS), late deliveries up to LAB_LATE_DELIVERIES, chapter 2's load generator at its top rate
(capped at LAB_JOB_RATE real jobs/s). Two other labs are kept busy by a closed loop and their jobs done per
real second measured alone, then beside the flood, in the same run; the limits are the stack's defaults
(core.config), not the harness's unlimited ones.

- `learner`: a lab as a student runs it (the default preset and speed, 3 workers, 120 s transcodes): its real
  work is a fraction of each job's paced time. The invariant is about it.
- `saturating`: 2 workers on 30 s jobs at 100×, so real ffmpeg alone keeps both cores busy. Labs share the
  CPU equally (core.config LAB_NICE: a lab's processes together weigh as one), so beside a flood that also
  wants every core it gets about half: reported, not held to 80 %.
"""

from __future__ import annotations

import threading
import time

from chaos.common import Result, workers_registered
from core.config import Config
from core.procs import wait
from runtime.harness.client import Api
from runtime.harness.drill import drill_client
from runtime.harness.stack import Stack

NAME = "flood"
INVARIANT = "with one lab flooding at its limits, a learner's lab keeps ≥ 80 % of its quiet-box throughput"
DEFAULTS = Config()
LIMITS = {
    "RATE_LABS": str(DEFAULTS.rate_labs),
    "MAX_CLIENT_LABS": str(DEFAULTS.max_client_labs),
    "LAB_BATCH_JOBS": str(DEFAULTS.lab_batch_jobs),
    "LAB_LATE_DELIVERIES": str(DEFAULTS.lab_late_deliveries),
    "LAB_JOB_RATE": str(DEFAULTS.lab_job_rate),
    "MAX_WORKERS": str(DEFAULTS.max_workers),
}

QUIET = {
    "learner": ({"preset": "ch8", "speed": DEFAULTS.speed, "workers": 3, "job_duration": 120}, 6),
    "saturating": ({"preset": "ch8", "speed": 100, "workers": 2, "job_duration": 30, "vt_seconds": 600}, 4),
}
"""name → (the lab's settings, jobs kept queued or running)."""


def throughput(api: Api, lab: dict, seconds: float, in_flight: int = 4, clock: dict | None = None) -> float:
    """Jobs done per real second over `seconds`, keeping `in_flight` jobs queued or running. `clock`, if
    given, gets the simulated seconds the lab's clock ran per real second meanwhile (its asked speed
    unless real work held it back)."""
    first = api.snapshot(lab)
    start, sim0 = first["counts"]["done"], first["clock"]["t_raw"]
    t0 = time.monotonic()
    sent = done = start
    while time.monotonic() - t0 < seconds:
        done = api.snapshot(lab)["counts"]["done"]
        while sent - done < in_flight:
            if api.enqueue(lab, {"sample": "carphone_pristine"}).status == 202:
                sent += 1
        time.sleep(0.1)
    last = api.snapshot(lab)
    elapsed = time.monotonic() - t0
    if clock is not None:
        clock["rate"] = (last["clock"]["t_raw"] - sim0) / elapsed
    return (last["counts"]["done"] - start) / elapsed


def run(seconds: float = 40.0) -> Result:
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    with Stack(NAME, env=LIMITS, logs=True) as stack:
        api, r = drill_client(stack), stack.redis_client()
        labs = {}
        for name, (settings, _) in QUIET.items():
            preset, rest = settings["preset"], {k: v for k, v in settings.items() if k != "preset"}
            labs[name] = api.lab(preset, **rest)
            wait(lambda lab=labs[name], n=rest["workers"]: workers_registered(r, lab) >= n, 60, f"{name}'s workers")
        alone: dict[str, float] = {}
        clocks: dict[str, dict] = {}
        for name, lab in labs.items():
            throughput(api, lab, 8, QUIET[name][1])  # warm-up: first decodes, probe caches
            alone[name] = throughput(api, lab, seconds, QUIET[name][1], clocks.setdefault(f"{name}_alone", {}))

        flood = api.lab("ch6", speed=1000, workers=8, vt_seconds=10)
        wait(lambda: workers_registered(r, flood) >= 8, 60, "the flooding lab's workers")
        refused: dict[str, int] = {}
        stop = threading.Event()

        def flood_it() -> None:
            lab_path = f"/api/labs/{flood['lab_id']}"
            api.call("POST", f"{lab_path}/loadgen", {"action": "start", "rate": 5}, flood["token"])
            while not stop.is_set():
                for path, body in (
                    (f"{lab_path}/fairness/jobs", {"tier": "free", "count": 500}),
                    (f"{lab_path}/fairness/noisy-neighbour", {"burst": 500, "others": 50}),
                    (f"{lab_path}/jobs/1/late-delivery", {}),
                    ("/api/labs", {"preset": "ch8"}),
                ):
                    reply = api.call("POST", path, body, flood["token"] if "late" in path or "fair" in path else None)
                    if reply.status == 429:
                        refused[path.rsplit("/", 1)[-1]] = refused.get(path.rsplit("/", 1)[-1], 0) + 1
                    elif reply.status == 201 and path == "/api/labs":
                        pass  # counted against the client's concurrency limit; left to its idle expiry
                time.sleep(0.05)

        flooder = threading.Thread(target=flood_it, daemon=True)
        flooder.start()
        time.sleep(5)
        beside = {
            name: throughput(api, lab, seconds, QUIET[name][1], clocks.setdefault(f"{name}_beside", {}))
            for name, lab in labs.items()
        }
        stop.set()
        flooder.join(10)
        ratio = {name: beside[name] / alone[name] if alone[name] else 0.0 for name in labs}
        res.check(
            ratio["learner"] >= 0.8,
            f"the learner's lab kept {ratio['learner']:.0%} of its quiet-box throughput (< 80 %)",
        )
        res.check(bool(refused), "the flood was never refused: no per-lab or per-client limit held")
        snap = api.snapshot(flood)
        res.counts = {
            **{
                f"{name}_{k}": round(v[name], 3)
                for name in labs
                for k, v in (("alone_jobs_per_s", alone), ("beside_flood_jobs_per_s", beside), ("ratio", ratio))
            },
            **{f"{k}_clock_x": round(v["rate"], 1) for k, v in clocks.items()},
            "flood_done": snap["counts"]["done"],
            **{f"refused_{k}": v for k, v in refused.items()},
        }
        r.close()
    res.seconds = time.monotonic() - t0
    return res
