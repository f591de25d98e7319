"""redelivery: how late past its lease deadline a killed worker's job becomes visible again.

Ack late, heartbeat on, a short lease (0.5 real s at each speed). Each sample: enqueue a job,
wait until a worker is busy with it (its work-horse pid known), SIGKILL that worker through
`POST /api/labs/{lab}/workers/{id}/kill`, then wait for `job.redelivered`. Its `data.late_ms`
is the reaper's own figure (real ms between the lease deadline and the scan that saw it
expired); `check_*` recomputes it from event timestamps alone (the claim's t_real plus the
lease in real time, against the redelivery's t_real) as a cross-check.

Two modes per speed:
- busy:  samples back to back (the previous job's redelivered attempt is still running and the
         killed worker respawns inside the next sample's lease window): other clients keep the
         server's event loop awake;
- quiet: each sample starts from an idle lab and the respawn comes after the window, so between
         the kill and the deadline only the supervisor talks to the server — the classroom
         demo's case (one upload, one kill).
The baseline is the reaper's scan interval, `workers.supervisor.LOOP_S`, and next to it what a
`BLPOP` with that timeout really takes on this server when nothing else is happening.
Finally every job must finish: none lost, none left behind.
"""

from __future__ import annotations

import time

from bench.common import Bench, median, pct, report, rnd, wait
from workers.supervisor import LOOP_S

NAME = "redelivery"
SPEEDS = (20, 200)
SAMPLES = {"busy": 20, "quiet": 8}
LEASE_REAL_S = 0.5  # vt_seconds = this × speed (≥ 10, the schema's minimum)
JOB_REAL_S = {"busy": 1.0, "quiet": 0.6}  # length of the redelivered attempt, real seconds
STARTUP_S = 1.2  # quiet mode: real seconds allowed for a respawned rq worker to settle


def blpop_period(b: Bench, n: int = 10) -> list[float]:
    """Real ms a BLPOP with the reaper's timeout takes on this server (nothing to pop)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        b.r.blpop("bench:nothing", timeout=LOOP_S)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def sample_speed(b: Bench, speed: float, mode: str) -> tuple[dict, list[dict]]:
    vt = max(10.0, LEASE_REAL_S * speed)
    n_workers = 3 if mode == "busy" else 2
    respawn = 0 if mode == "busy" else 1.0 * speed  # quiet: respawn 1 real s after the kill
    settings = {"workers": n_workers, "ack_mode": "late", "vt_seconds": vt, "heartbeat": True,
                "heartbeat_interval": max(5.0, vt / 4), "heartbeat_extend": vt, "respawn_delay": respawn,
                "max_attempts": 5, "max_receives": 5, "retry_policy": "none", "guard": "fence"}
    lab = b.lab("ch1-heartbeat", speed=speed, **settings)
    samples: list[dict] = []
    errors: list[str] = []
    idle_blpop: list[float] = []
    raced = 0

    def idle() -> bool:
        s = b.states(lab)
        rows = b.worker_rows(lab)
        return (s.get("queued", 0) + s.get("running", 0) == 0 and len(rows) == n_workers
                and all(w.get("state") == "idle" and w.get("pid") for w in rows))
    try:
        b.workers_ready(lab, n_workers)
        for i in range(SAMPLES[mode]):
            if mode == "quiet":
                wait(idle, 30, "the lab did not come back to idle", every=0.05)
                # the respawned `rq worker` needs ~1 s to start and block in its dequeue (its
                # stale predecessor stays in RQ's worker set, so registration is no signal)
                started = [e["t_real"] for e in b.events(lab) if e["type"] == "worker.started"]
                time.sleep(max(0.3, max(started) + STARTUP_S - time.time()))
                if i < 3:
                    idle_blpop += blpop_period(b, 4)
            after = b.last_event_id(lab)
            job_id = b.enqueue(lab, {"job_type": "thumbnail", "duration_s": JOB_REAL_S[mode] * speed})
            row: dict = {}

            def busy(job_id=job_id, row=row) -> bool:
                for w in b.worker_rows(lab):
                    if w.get("job_id") == job_id and w.get("state") == "busy" and w.get("horse_pid"):
                        row.update(w)
                        return True
                return False
            try:
                wait(busy, 15, f"job {job_id} was never picked up", every=0.005)
            except TimeoutError as e:
                errors.append(str(e))
                continue
            t_kill = time.time()
            killed = b.kill(lab, row["id"])
            if killed.get("job_id") != job_id:
                errors.append(f"sample {i}: killed {row['id']} but it held {killed.get('job_id')}")
            try:
                claimed, after2 = b.wait_event(lab, after, lambda e, j=job_id: e["type"] == "job.claimed"
                                               and e.get("job_id") == j and e.get("attempt") == 1, 10)
                redelivered, _ = b.wait_event(
                    lab, after2, lambda e, j=job_id: e.get("job_id") == j and (
                        e["type"] == "job.redelivered" or (e["type"] == "job.succeeded" and e["attempt"] == 1)),
                    10 + 2 * vt / speed)
                if redelivered["type"] == "job.succeeded":
                    raced += 1  # attempt 1 finished before the kill landed: not a sample
                    continue
            except TimeoutError as e:
                trail = [(ev["type"], ev.get("attempt"), ev.get("worker_id"), round(ev["t_real"] - t_kill, 3))
                         for ev in b.events(lab) if ev.get("job_id") == job_id
                         or ev["type"].startswith("worker.")][-25:]
                rec = b.r.hgetall(f"lab:{lab['lab_id']}:job:{job_id}")
                errors.append({"sample": i, "job_id": job_id, "error": str(e), "killed": killed,
                               "job": {k: v for k, v in rec.items() if k != "payload"},
                               "lease": b.r.zscore(f"lab:{lab['lab_id']}:leases", job_id),
                               "trail (type, attempt, worker, s after kill)": trail})
                print(f"  ! {mode}@{speed} sample {i}: {errors[-1]}", flush=True)
                continue
            deadline_sim = claimed["data"]["lease_deadline"]
            deadline_real = claimed["t_real"] + (deadline_sim - claimed["t_sim"]) / speed
            samples.append({
                "job_id": job_id, "worker": row["id"], "late_ms": redelivered["data"]["late_ms"],
                "late_ms_check": round((redelivered["t_real"] - deadline_real) * 1000, 1),
                "kill_before_deadline_ms": round((deadline_real - t_kill) * 1000, 1),
                "kill_to_redelivered_ms": round((redelivered["t_real"] - t_kill) * 1000, 1),
                "attempt": redelivered.get("attempt"),
            })

        def settled() -> bool:
            s = b.states(lab)
            return s.get("queued", 0) + s.get("running", 0) + s.get("retrying", 0) == 0
        try:
            wait(settled, 30 + 3 * JOB_REAL_S[mode] * SAMPLES[mode], "jobs still in flight after the run",
                 every=0.05)
        except TimeoutError as e:
            errors.append(str(e))
        states, counts = b.states(lab), b.counts(lab)
    finally:
        b.delete_lab(lab)
    late = [s["late_ms"] for s in samples]
    check = [s["late_ms_check"] for s in samples]
    row = {"speed": speed, "mode": mode, "vt_s_sim": vt, "samples": len(samples),
           "late_ms_p50": rnd(pct(late, 50), 1), "late_ms_p99": rnd(pct(late, 99), 1),
           "late_ms_max": rnd(max(late, default=float("nan")), 1),
           "late_sim_s_p99": rnd(pct(late, 99) * speed / 1000, 2),
           "check_p50": rnd(pct(check, 50), 1), "check_p99": rnd(pct(check, 99), 1),
           "kill_to_redelivered_ms_p50": rnd(pct([s["kill_to_redelivered_ms"] for s in samples], 50), 0),
           "scan_ms": LOOP_S * 1000, "p99_vs_scan": rnd(pct(late, 99) / (LOOP_S * 1000), 2),
           "done": states.get("done", 0), "lost": states.get("lost", 0), "dlq": states.get("dlq", 0),
           "redelivered": counts.get("redelivered", 0),
           "duplicates_blocked": counts.get("duplicates_blocked", 0), "raced": raced, "errors": errors}
    if idle_blpop:
        row["idle_blpop_ms_p50"] = rnd(median(idle_blpop), 1)
    return row, samples


def run(b: Bench) -> dict:
    rows, raw = [], {}
    for mode in ("busy", "quiet"):
        for speed in SPEEDS:
            row, samples = sample_speed(b, speed, mode)
            if row["errors"]:
                print(f"  ! {mode}@{speed}: {row['errors']}", flush=True)
            rows.append(row)
            raw[f"{mode}@{speed}"] = samples
    blpop = [v for r in rows for v in ([r["idle_blpop_ms_p50"]] if "idle_blpop_ms_p50" in r else [])]
    idle_loop = median(blpop) if blpop else float("nan")
    busy = [r for r in rows if r["mode"] == "busy"]
    worst = max(busy, key=lambda r: r["p99_vs_scan"] or 0)
    quiet_worst = max((r for r in rows if r["mode"] == "quiet"), key=lambda r: r["p99_vs_scan"] or 0)
    notes = [f"ack late, heartbeat on, lease = {LEASE_REAL_S} real s; SIGKILL of worker + horse right after "
             "the claim; late_ms from job.redelivered data, check_* recomputed from event t_real",
             f"a BLPOP with timeout {LOOP_S:g} s on this (otherwise quiet) server returns after "
             f"{idle_loop:.0f} ms p50: the reaper's real scan interval when nothing else wakes the server",
             "done/lost: every sampled job must end done (its redelivered attempt succeeds), none lost"]
    for r in rows:
        if r["errors"] or r["lost"] or r["done"] != r["samples"] + r["raced"]:
            notes.append(f"{r['mode']} @{r['speed']}: done {r['done']}/{r['samples'] + r['raced']}, "
                         f"lost {r['lost']}, dlq {r['dlq']}, errors {r['errors']}")
        if r["raced"]:
            notes.append(f"{r['mode']} @{r['speed']}: {r['raced']} job(s) finished before the kill landed "
                         "(not samples)")
    return report(
        NAME, "killed worker → redelivery, ms past the lease deadline",
        ["speed", "mode", "samples", "late_ms_p50", "late_ms_p99", "late_ms_max", "late_sim_s_p99",
         "check_p50", "check_p99", "kill_to_redelivered_ms_p50", "p99_vs_scan", "done", "lost"],
        rows,
        {"label": f"busy late_ms p99 ÷ reaper scan interval (worst: speed {worst['speed']})",
         "value": worst["p99_vs_scan"],
         "baseline": f"workers.supervisor.LOOP_S = {LOOP_S * 1000:g} ms (BLPOP timeout of the reaper loop); "
                     f"effective when idle: {idle_loop:.0f} ms",
         "quiet_p99_vs_scan": quiet_worst["p99_vs_scan"], "idle_blpop_ms": rnd(idle_loop, 1)},
        {"speeds": SPEEDS, "samples": SAMPLES, "lease_real_s": LEASE_REAL_S, "job_real_s": JOB_REAL_S},
        notes, {"samples": raw})
