"""challenge: what running a learner's handler in the sandbox adds to each attempt (core/challenges/box.py).

The same handler (one ctx call — a log line — then return) run three ways, alternating so a busy moment of the
shared box falls on each: *plain*, its code compiled and called in this process with a ctx that answers the same
call in memory — a plain attempt's handler step; *sandboxed, started ahead*, as a work horse runs it: on a runner
(bwrap, setpriv, prlimit, the interpreter with `-I -S`, runner.py imported) that this process started LEAD_S
earlier, as a worker parent starts the next horse's while the last attempt runs (`box.AHEAD`), then the JSON lines
over its pipes and the wait for its exit; and *sandboxed, started for it*, the runner started by the attempt
itself (what every attempt paid before runners were started ahead, and what the first attempt on a worker still
pays). Beside each sandboxed row, real time to the handler's first message. RATIO = median started ahead ÷ median
plain, in this run; `added_ms` is the per-attempt overhead the issue bounds at 50 ms.

Then one whole run of chapter 5's reference handler at the lab's default speed (20×): real seconds from the POST
to the verdict, and from the run's last job event (its last ack or dead letter, `t_real`) to the moment a poll
every 50 ms first saw the verdict. Last, every challenge's reference on a run of TWENTY jobs (its workload repeated,
each job's fault with each repeat) at 20×: real seconds to the verdict against the run's floor, the simulated
seconds it spanned over the speed (what the clock allows however fast the box).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from typing import Any

import chapters
from bench.common import Bench, median, report, rnd
from core import clock
from core.challenges import box
from core.challenges import run as runs

NAME = "challenge"
RUNS = 40
LEAD_S = 1.0  # real seconds a runner is started ahead of its attempt (a challenge attempt on a worker lasts longer)
AHEAD, COLD = "sandboxed, started ahead", "sandboxed, started for it"
CODE = "def handle(ctx):\n    ctx.log('attempt', ctx.job.attempt)\n"
JOB = {"id": "1", "attempt": 1, "idempotency_key": "k", "input": {}}


class _Plain:
    """The in-process ctx of a plain attempt: the same call, answered in memory."""

    class job:  # noqa: N801 - the attribute a handler reads
        attempt = 1

    def __init__(self):
        self.lines: list[str] = []

    def log(self, *parts) -> None:
        self.lines.append(" ".join(map(str, parts)))


def plain() -> float:
    t0 = time.perf_counter()
    scope: dict = {}
    exec(compile(CODE, "handler.py", "exec"), scope)  # noqa: S102 - the benchmark's own fixed code
    scope["handle"](_Plain())
    return time.perf_counter() - t0


def sandboxed(first: list[float], ahead: bool) -> float:
    if ahead:
        box.AHEAD.start()
        time.sleep(LEAD_S)
    t0 = time.perf_counter()
    out = box.HandlerBox(CODE, JOB).run(lambda op, args: None)
    real = time.perf_counter() - t0
    if out.kind != "ack":
        raise RuntimeError(f"the handler did not ack: {out}")
    first.append(out.start_ms / 1000)
    return real


def whole_run(b: Bench, speed: float = 20.0) -> dict:
    """The ch5 reference, run end to end on the stack: real seconds to the verdict and the verdict's lag."""
    lab = b.lab("ch5", speed)
    b.api.workers_ready(lab, 2)
    path = f"/api/labs/{lab['lab_id']}/challenge"
    t0 = time.time()
    code = chapters.CHALLENGES["effectively-once"]["reference"]
    b.call("POST", path, {"challenge": "effectively-once", "code": code}, lab["token"])
    while (verdict := b.call("GET", path, token=lab["token"]))["state"] not in ("checked", "error"):
        time.sleep(0.05)
    seen = time.time()
    events = b.call("GET", f"/api/labs/{lab['lab_id']}/events?after=0", token=lab["token"])["events"]
    ends = ("job.succeeded", "job.dead_lettered", "job.duplicate_completed")
    last = max(e["t_real"] for e in events if e["type"] in ends and e.get("job_id") in verdict["jobs"])
    b.delete_lab(lab)
    return {
        "jobs": len(verdict["jobs"]),
        "passed": verdict.get("passed"),
        "run_s": rnd(seen - t0, 1),
        "verdict_lag_s": rnd(seen - last, 2),
        "speed": speed,
    }


TWENTY = 20  # jobs in the timed run


def scaled(spec: dict[str, Any], jobs: int = TWENTY) -> dict[str, Any]:
    """`spec` with its workload repeated to `jobs` jobs, each job's fault repeated with it (a fault named by a key,
    not a job, stays once) and its deadline stretched by the repeats. A scheduled one (its replicas fire its jobs)
    runs more ticks instead, all replicas up after its plan: at least `jobs` firings, its invariants counted to
    the new last tick."""
    if "schedule" in spec:
        ticks = int(spec["schedule"]["ticks"])
        more = ticks + math.ceil(jobs / int(spec["settings"]["scheduler_replicas"])) - 1
        return {
            **spec,
            "schedule": {**spec["schedule"], "ticks": more},
            "invariants": [i.replace(f":{ticks}", f":{more}") for i in spec["invariants"]],
        }
    n = len(spec["workload"])
    repeats = math.ceil(jobs / n)
    faults = [f for f in spec.get("faults", []) if "job" not in f]
    faults += [
        {**f, "job": f["job"] + k * n}
        for k in range(repeats)
        for f in spec.get("faults", [])
        if "job" in f and f["job"] + k * n <= jobs
    ]
    deadline = spec.get("deadline_s", runs.DEADLINE_S) * repeats
    return {
        **spec,
        "workload": [spec["workload"][i % n] for i in range(jobs)],
        "faults": faults,
        "deadline_s": deadline,
    }


def twenty_jobs(b: Bench, challenge_id: str, speed: float = 20.0) -> dict:
    """The challenge's reference on a TWENTY-job run, started through the run's own start (the web's POST takes a
    chapter's workload as it stands), checked as a GET of the verdict checks it."""
    spec = scaled(chapters.CHALLENGES[challenge_id])
    preset = f"ch{spec['chapter']}"
    lab = b.lab(preset, speed)
    lid = lab["lab_id"]
    b.call("PATCH", f"/api/labs/{lid}/settings", spec["settings"], lab["token"])
    b.api.workers_ready(lab, int({**chapters.settings_for(preset), **spec["settings"]}["workers"]))
    t0 = time.time()
    started = clock.now(b.r, lid)
    runs.start(b.r, b.rb, lid, challenge_id, spec, spec["reference"])
    while (verdict := runs.verdict(b.r, lid, spec))["state"] not in ("checked", "error"):
        if time.time() - t0 > 900:
            raise RuntimeError(f"{challenge_id}: no verdict after 900 s")
        time.sleep(0.05)
    real = time.time() - t0
    span = clock.now(b.r, lid) - started
    b.delete_lab(lab)
    return {
        "challenge": challenge_id,
        "jobs": len(verdict["jobs"]),
        "passed": verdict.get("passed"),
        "error": verdict.get("error", ""),
        "run_s": rnd(real, 1),
        "floor_s": rnd(span / speed, 1),
        "ratio": rnd(real / max(span / speed, 1e-9), 2),
        "broken": [i.get("invariant", i.get("name")) for i in verdict.get("invariants", []) if not i["held"]],
    }


def run(b: Bench) -> dict:
    why = box.confined()
    if why:
        raise RuntimeError(f"no sandbox on this host ({why}): challenges are off, nothing to measure")
    real: dict[str, list[float]] = {
        "plain": [],
        AHEAD: [],
        f"{AHEAD}, to first message": [],
        COLD: [],
        f"{COLD}, to first message": [],
    }
    for _ in range(RUNS):
        real["plain"].append(plain())
        real[AHEAD].append(sandboxed(real[f"{AHEAD}, to first message"], ahead=True))
        real[COLD].append(sandboxed(real[f"{COLD}, to first message"], ahead=False))
    rows = [
        {
            "what": what,
            "runs": RUNS,
            "median_ms": rnd(median(v) * 1000, 2),
            "min_ms": rnd(min(v) * 1000, 2),
            "max_ms": rnd(max(v) * 1000, 2),
        }
        for what, v in real.items()
    ]
    by = {row["what"]: row for row in rows}
    for what in (AHEAD, COLD):
        by[what]["added_ms"] = rnd(by[what]["median_ms"] - by["plain"]["median_ms"], 1)
    added, cold = by[AHEAD]["added_ms"], by[COLD]["added_ms"]
    ratio = rnd(by[AHEAD]["median_ms"] / max(by["plain"]["median_ms"], 1e-3), 0)
    whole = whole_run(b)
    twenty = [twenty_jobs(b, cid) for cid in chapters.CHALLENGES]
    return report(
        NAME,
        "the sandbox's price per handler attempt",
        ["what", "runs", "median_ms", "min_ms", "max_ms", "added_ms"],
        rows,
        {
            "label": "sandboxed (runner started ahead) ÷ plain handler step (median, start to exit)",
            "value": ratio,
            "baseline": "the same handler called in process, alternating with it in this run",
            "also": f"+{added} ms per attempt (+{cold} ms with the runner started for it)",
        },
        {"runs": RUNS, "lead_s": LEAD_S, "limits": asdict(box.LIMITS), "turn_s": box.TURN_S, "idle_s": box.IDLE_S},
        notes=[
            "added_ms = median sandboxed − median plain (real time, one ctx call each)",
            f"started ahead: {LEAD_S:g} s before its attempt; the runner's own start is the 'started for it, to first "
            "message' row",
            f"a whole ch5 run ({whole['jobs']} jobs, its faults, the reference handler) at {whole['speed']:g}×: "
            f"{whole['run_s']} s from POST to verdict, verdict {whole['verdict_lag_s']} s after the last job's event "
            f"(passed: {whole['passed']})",
            *(
                f"{t['challenge']}, {t['jobs']} jobs at 20x: {t['run_s']} s to the verdict, floor {t['floor_s']} s "
                f"(x{t['ratio']}; passed: {t['passed']})"
                for t in twenty
            ),
        ],
        extra={"whole_run": whole, "twenty_jobs": twenty},
    )
