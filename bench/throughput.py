"""throughput: short jobs per second through a lab vs raw RQ on the same server and cores.

Rows, each with N worker processes (N = 2 and 4):
- lab:          `{"job_type": "thumbnail", "duration_s": 1}` at speed 1000 through the public API:
                lease claim, paced work (1 ms), real ffmpeg thumbnail, CAS ack, events, email;
- raw rq noop:  plain `rq worker --burst` processes running a trivial function: RQ's own cost;
- raw rq ffmpeg thumbnail: plain `rq worker --burst` running the same `core.media.thumbnail`
                on the same clip: the physical floor of the work itself;
- diagnostics:  the no-op plus `import workers.tasks` in the horse (what each lab job paid before
                `workers.rqworker` preloaded it in the worker parent), and the no-op plus
                `media.ffmpeg()` (imageio_ffmpeg import + `ffmpeg -version`, paid by every raw-RQ
                horse that runs ffmpeg, because its lru_cache dies with the horse; the lab's worker
                parent resolves it once before it forks, `workers.rqworker`: the raw ffmpeg row pays
                it, the lab row does not, and this row shows how much it is).
The rate is jobs / (last job end − first job start), from the lab's event stream (t_real of
job.claimed / job.succeeded) and from RQ's own started_at / ended_at, so worker start-up is out.
CPU per job (user + sys, horses and ffmpeg included) is reported next to it: on a shared box the
wall-clock rate swings with other load, CPU per job much less.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from rq import Queue
from rq.job import Job

from bench.common import RQ_BIN, Bench, report, rnd, rusage_cpu_s, wait
from core import media
from core.procs import cpu_s

NAME = "throughput"
WORKER_COUNTS = (2, 4)
ROUNDS = 2  # interleaved; the best round per pipeline is reported (the box is shared, 2 cores)
LAB_JOBS = 30
FFMPEG_JOBS = 30
NOOP_JOBS = 120
DIAG_JOBS = 30
SPEED = 1000


def cost(jobs: int, worker_cpu: float, infra0: dict, infra1: dict) -> dict:
    """CPU ms per job: the worker processes (with their horses and ffmpeg), the server, and the
    supervisor + web process. Unlike jobs/s, CPU per job is barely moved by other load on the box."""
    d = {k: infra1[k] - infra0[k] for k in infra0}
    return {
        "worker_cpu_ms_per_job": rnd(worker_cpu / jobs * 1000, 1),
        "valkey_cpu_ms_per_job": rnd(d["valkey"] / jobs * 1000, 1),
        "sup_web_cpu_ms_per_job": rnd((d["supervisor"] + d["web"]) / jobs * 1000, 1),
    }


def lab_rate(b: Bench, n: int, jobs: int) -> dict:
    lab = b.lab("ch0", speed=SPEED, workers=n, heartbeat=False, vt_seconds=1200, retry_policy="none")
    try:
        b.workers_ready(lab, n)
        time.sleep(0.3)  # start-up CPU of the workers is not the jobs' cost
        pids = [int(w["pid"]) for w in b.worker_rows(lab) if w.get("pid")]
        cpu0, infra0 = sum(cpu_s(p) for p in pids), b.stack.infra_cpu_s()
        t0 = time.time()
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda _: b.enqueue(lab, {"job_type": "thumbnail", "duration_s": 1}), range(jobs)))
        enqueue_s = time.time() - t0

        def settled() -> bool:
            s = b.states(lab)
            return s.get("done", 0) + s.get("dlq", 0) + s.get("lost", 0) >= jobs

        wait(settled, 120, f"lab with {n} workers did not finish {jobs} jobs", every=0.05)
        wait(lambda: all(w.get("state") == "idle" for w in b.worker_rows(lab)), 10, "workers stayed busy")
        time.sleep(0.2)  # the last horses are reaped, so their CPU is in the workers' cutime
        cpu1, infra1 = sum(cpu_s(p) for p in pids), b.stack.infra_cpu_s()
        evs = b.events(lab)
        states, counts = b.states(lab), b.counts(lab)
    finally:
        b.delete_lab(lab)
    starts = [e["t_real"] for e in evs if e["type"] == "job.claimed"]
    ends = [e["t_real"] for e in evs if e["type"] == "job.succeeded"]
    span = max(ends) - min(starts)
    done = states.get("done", 0)
    return {
        "pipeline": "lab (thumbnail, 1 s @1000×)",
        "workers": n,
        "jobs": jobs,
        "done": done,
        "span_s": rnd(span, 3),
        "jobs_per_s": rnd(done / span, 2),
        "ms_per_job_per_worker": rnd(span / done * n * 1000, 1),
        **cost(jobs, cpu1 - cpu0, infra0, infra1),
        "enqueue_s": rnd(enqueue_s, 3),
        "failed": counts.get("failed", 0),
        "redelivered": counts.get("redelivered", 0),
        "events_per_job": rnd(len(evs) / jobs, 1),
    }


def reap(p, timeout: float):
    """Wait for a child with os.wait4: its rusage includes the horses and ffmpeg it reaped."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru
        if time.monotonic() > deadline:
            raise TimeoutError(f"rq worker {p.pid} still running after {timeout:.0f} s")
        time.sleep(0.01)


def rq_rate(b: Bench, n: int, label: str, func: str, arg_list: list[tuple]) -> dict:
    qname = f"bench-{label.replace(' ', '-')}-{n}-{time.time_ns() % 10**9}"
    q = Queue(qname, connection=b.rb)
    jobs = q.enqueue_many(
        [Queue.prepare_data(func, args=a, timeout=60, result_ttl=600, failure_ttl=600) for a in arg_list]
    )
    t0 = time.time()
    infra0 = b.stack.infra_cpu_s()
    procs = [
        b.stack.spawn(
            [
                RQ_BIN,
                "worker",
                "--burst",
                "--url",
                b.stack.redis_url,
                "--quiet",
                "--logging_level",
                "WARNING",
                "--name",
                f"{qname}-{i}",
                qname,
            ]
        )
        for i in range(n)
    ]
    worker_cpu = sum(rusage_cpu_s(reap(p, 180)) for p in procs)
    infra1 = b.stack.infra_cpu_s()
    wall = time.time() - t0
    startup = STARTUP_CPU_S.get("value")
    fetched = [j for j in Job.fetch_many([j.id for j in jobs], connection=b.rb) if j]
    finished = [j for j in fetched if j.get_status(refresh=False) == "finished"]
    q.delete(delete_jobs=True)
    if not finished:
        raise RuntimeError(f"raw RQ {label}: no job finished")
    span = (max(j.ended_at for j in finished) - min(j.started_at for j in finished)).total_seconds()
    return {
        "pipeline": f"raw rq {label}",
        "workers": n,
        "jobs": len(arg_list),
        "done": len(finished),
        "span_s": rnd(span, 3),
        "jobs_per_s": rnd(len(finished) / span, 2),
        "ms_per_job_per_worker": rnd(span / len(finished) * n * 1000, 1),
        **cost(len(arg_list), max(0.0, worker_cpu - n * (startup or 0.0)), infra0, infra1),
        "wall_s_incl_startup": rnd(wall, 2),
        "failed": len(fetched) - len(finished),
    }


STARTUP_CPU_S: dict[str, float] = {}


def startup_cpu(b: Bench) -> float:
    """CPU seconds one `rq worker --burst` spends with an empty queue (start, register, exit):
    subtracted from the raw-RQ rows so their CPU per job is the jobs' cost alone, like the lab's."""
    qname = f"bench-empty-{time.time_ns() % 10**9}"
    runs: list[float] = []
    for _ in range(6):
        if len(runs) == 3:
            break
        p = b.stack.spawn(
            [RQ_BIN, "worker", "--burst", "--url", b.stack.redis_url, "--quiet", "--logging_level", "WARNING", qname]
        )
        try:
            runs.append(rusage_cpu_s(reap(p, 10)))
        except TimeoutError:
            # now and then RQ's teardown waits out its pub/sub thread's 60 s sleep (see workers/pool.py
            # hurry_warm_stop): that run says nothing about start-up, so it is dropped
            p.kill()
            reap(p, 10)
    if not runs:
        raise RuntimeError("every empty `rq worker --burst` hung in its teardown")
    STARTUP_CPU_S["value"] = min(runs)
    return min(runs)


def run(b: Bench) -> dict:
    clip = media.sample_clip()
    thumbs = b.stack.root / "thumbs"
    startup = startup_cpu(b)
    rounds: list[list[dict]] = []
    for rnd_no in range(ROUNDS):
        got = []
        for n in WORKER_COUNTS:
            got.append(rq_rate(b, n, "noop", "bench.jobs.noop", [()] * NOOP_JOBS))
            got.append(rq_rate(b, n, "noop + import workers.tasks", "bench.jobs.import_tasks", [()] * DIAG_JOBS))
            got.append(rq_rate(b, n, "noop + media.ffmpeg()", "bench.jobs.resolve_ffmpeg", [()] * DIAG_JOBS))
            got.append(
                rq_rate(
                    b,
                    n,
                    "ffmpeg thumbnail",
                    "core.media.thumbnail",
                    [(clip, thumbs / f"r{rnd_no}-n{n}-{i}.jpg") for i in range(FFMPEG_JOBS)],
                )
            )
            got.append(lab_rate(b, n, LAB_JOBS))
        for r in got:
            r["round"] = rnd_no + 1
        rounds.append(got)
    rows = []
    for i in range(len(rounds[0])):
        rows.append(max((rd[i] for rd in rounds), key=lambda r: r["jobs_per_s"] or 0))
    for n in WORKER_COUNTS:
        mine = [r for r in rows if r["workers"] == n]
        noop, _imp, _res, ff, lab = mine
        lab["vs_rq_noop"] = rnd(lab["jobs_per_s"] / noop["jobs_per_s"], 3)
        lab["vs_rq_ffmpeg"] = rnd(lab["jobs_per_s"] / ff["jobs_per_s"], 3)
        lab["overhead_ms_per_job"] = rnd(lab["ms_per_job_per_worker"] - ff["ms_per_job_per_worker"], 1)
        lab["cpu_vs_rq_ffmpeg"] = rnd(lab["worker_cpu_ms_per_job"] / ff["worker_cpu_ms_per_job"], 3)
        lab["cpu_overhead_ms"] = rnd(lab["worker_cpu_ms_per_job"] - ff["worker_cpu_ms_per_job"], 1)
        for r in mine[1:4]:
            r["vs_rq_noop"] = rnd(r["jobs_per_s"] / noop["jobs_per_s"], 3)
            r["overhead_ms_per_job"] = rnd(r["ms_per_job_per_worker"] - noop["ms_per_job_per_worker"], 1)
            r["cpu_overhead_ms"] = rnd(r["worker_cpu_ms_per_job"] - noop["worker_cpu_ms_per_job"], 1)
    top = max(WORKER_COUNTS)
    lab_top = next(r for r in rows if r["workers"] == top and r["pipeline"].startswith("lab"))
    notes = [
        f"lab jobs are real: claim (Lua lease) → ffmpeg thumbnail → CAS ack → email, "
        f"{lab_top['events_per_job']} stream events per job",
        "ms/job/worker = span × workers / jobs (wall clock, so CPU contention included); rate = jobs / "
        "(last job end − first job start)",
        "worker_cpu: user+sys of the worker processes incl. reaped horses and ffmpeg (raw rows minus "
        f"{startup * 1000:.0f} ms start-up CPU per `rq worker --burst`); valkey / sup_web: server, and "
        "supervisor + web process, over the same window",
        "cpu_overhead_ms: lab row − raw rq ffmpeg row; diagnostic and ffmpeg rows − raw rq noop row (same N)",
        "all pipelines share 2 cores with the server, supervisor and web process; best of "
        f"{ROUNDS} interleaved rounds per row (all rounds in the JSON)",
    ]
    return report(
        NAME,
        "short jobs/s: lab vs raw RQ (no-op) vs raw RQ (same ffmpeg thumbnail)",
        [
            "pipeline",
            "workers",
            "done",
            "jobs_per_s",
            "ms_per_job_per_worker",
            "vs_rq_noop",
            "vs_rq_ffmpeg",
            "worker_cpu_ms_per_job",
            "cpu_overhead_ms",
            "valkey_cpu_ms_per_job",
            "sup_web_cpu_ms_per_job",
        ],
        rows,
        {
            "label": f"lab jobs/s ÷ raw-RQ ffmpeg jobs/s at {top} workers",
            "value": lab_top["vs_rq_ffmpeg"],
            "baseline": "raw rq worker --burst running core.media.thumbnail, same server, same N",
            "vs_rq_noop": lab_top["vs_rq_noop"],
            "cpu_vs_rq_ffmpeg": lab_top["cpu_vs_rq_ffmpeg"],
            "also": f"worker CPU per job ÷ raw-RQ ffmpeg's: {lab_top['cpu_vs_rq_ffmpeg']}; "
            f"jobs/s ÷ raw-RQ no-op's: {lab_top['vs_rq_noop']}",
        },
        {
            "worker_counts": WORKER_COUNTS,
            "lab_jobs": LAB_JOBS,
            "ffmpeg_jobs": FFMPEG_JOBS,
            "noop_jobs": NOOP_JOBS,
            "diag_jobs": DIAG_JOBS,
            "rounds": ROUNDS,
            "speed": SPEED,
            "job": {"job_type": "thumbnail", "duration_s": 1},
            "clip": str(clip),
        },
        notes,
        {"rounds": rounds},
    )
