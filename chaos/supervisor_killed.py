"""Drill: SIGKILL the pool supervisor while its workers are busy, then start a new one.

The supervisor starts each `rq worker` with PR_SET_PDEATHSIG(SIGKILL), so a supervisor that
dies should take its workers with it. A busy worker has a forked work horse (its own process
group, same command line) and the horse has ffmpeg children; all of them name the lab, by the
queue `lab-<id>` on the command line or by the lab's data dir. The drill looks in /proc.
"""

from __future__ import annotations

import time

from chaos.common import Result, workers_registered
from core.keys import key
from core.procs import processes_matching, wait
from runtime.harness.drill import drill_client, drill_stack

NAME = "supervisor_killed"
INVARIANT = (
    "SIGKILL of the supervisor leaves no process of its lab alive (rq workers, work horses, their "
    "ffmpeg: nothing in /proc names lab-<id>); a restarted supervisor brings the lab's workers back "
    "and every job, including one enqueued after the restart, ends done"
)


def lab_processes(lab_id: str, var_dir) -> dict[int, str]:
    return processes_matching(f"lab-{lab_id}", f"{var_dir}/labs/{lab_id}/")


def run(
    redis_url: str | None = None,
    workers: int = 3,
    jobs: int = 4,
    speed: float = 200,
    duration: float = 1400,
    grace: float = 5.0,
    root=None,
) -> Result:
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    with drill_stack(NAME, redis_url=redis_url, root=root) as stack:
        api, r = drill_client(stack), stack.redis_client()
        lab = api.lab(
            "ch8",
            speed=speed,
            workers=workers,
            heartbeat=True,
            job_duration=duration,
            respawn_delay=10,
            max_attempts=10,
        )
        lab_id = lab["lab_id"]
        wait(lambda: workers_registered(r, lab) >= workers, 60, f"{workers} workers to register")
        accepted = []
        for i in range(jobs):
            reply = api.enqueue(lab, {"sample": "bigbuckbunny" if i % 2 else "bikes"})
            res.check(reply.status == 202, f"enqueue {i} → {reply.status} {reply.data}")
            if reply.status == 202:
                accepted.append(reply.data["job_id"])
        wait(
            lambda: (
                len([w for w in api.snapshot(lab)["workers"] if w["state"] == "busy" and w.get("horse_pid")])
                >= min(workers, jobs)
            ),
            60,
            "every worker busy",
        )
        rows = api.snapshot(lab)["workers"]
        busy = [w for w in rows if w["state"] == "busy"]
        worker_pids = {int(w["pid"]) for w in rows if w.get("pid")}
        horse_pids = {int(w["horse_pid"]) for w in rows if w.get("horse_pid")}
        before = lab_processes(lab_id, stack.var_dir)
        ffmpeg_before = {p for p, c in before.items() if "ffmpeg" in c}

        sup_pid = stack.kill_supervisor()
        deadline = time.monotonic() + grace
        survivors = lab_processes(lab_id, stack.var_dir)
        while survivors and time.monotonic() < deadline:
            time.sleep(0.1)
            survivors = lab_processes(lab_id, stack.var_dir)
        s_workers = sorted(p for p in survivors if p in worker_pids)
        s_horses = sorted(p for p in survivors if p in horse_pids)
        s_ffmpeg = sorted(p for p, c in survivors.items() if "ffmpeg" in c)
        res.details["survivors"] = {str(p): c[:200] for p, c in survivors.items()}
        res.check(
            not s_workers,
            f"{len(s_workers)} rq worker process(es) outlived the supervisor "
            f"(pid {sup_pid}) by {grace:g} s: {s_workers}",
        )
        res.check(
            not s_horses,
            f"{len(s_horses)} work horse(s) outlived the supervisor by {grace:g} s and kept "
            f"running their attempt as orphans: {s_horses}",
        )
        res.check(
            not (set(survivors) - set(s_workers) - set(s_horses) - set(s_ffmpeg)),
            f"other processes naming lab-{lab_id} survived: {sorted(survivors)}",
        )
        if s_ffmpeg:
            res.violations.append(f"{len(s_ffmpeg)} ffmpeg process(es) of the lab outlived the supervisor")

        # a new supervisor: the lab's workers come back and the work finishes
        stack.start_supervisor()
        new_pool = wait(
            lambda: (lambda ws: ws if len(ws) >= workers else None)(
                [
                    w
                    for w in api.snapshot(lab)["workers"]
                    if w.get("pid") and int(w["pid"]) not in worker_pids and w["state"] in ("idle", "busy")
                ]
            ),
            60,
            "the restarted supervisor's workers",
        )

        def lab_rq_workers() -> list[dict]:
            live = processes_matching(f"lab-{lab_id}")
            return [w for w in new_pool if f"lab-{lab_id}" in (live.get(int(w["pid"])) or "")]

        # a spare takes its lab's `rq worker` command line as it starts the lab's worker, which can be a moment
        # after its row reads idle on a loaded box: the check allows that moment, not a missing rename
        try:
            new_ok = wait(
                lambda: (lambda ok: ok if len(ok) >= workers else None)(lab_rq_workers()),
                30,
                "the restarted workers to take their lab's command line",
            )
        except TimeoutError:
            new_ok = lab_rq_workers()
        res.check(
            len(new_ok) >= workers,
            f"only {len(new_ok)} of {workers} restarted workers are live rq processes of the lab",
        )
        reply = api.enqueue(lab, {"sample": "bikes"})
        res.check(reply.status == 202, f"enqueue after restart → {reply.status}")
        if reply.status == 202:
            accepted.append(reply.data["job_id"])
        try:
            snap = api.wait_for(
                lab,
                lambda s: (
                    s["counts"]["done"] + s["counts"]["dlq"] + s["counts"]["lost"] >= len(accepted)
                    and not s["counts"]["running"]
                ),
                120,
                "every job to finish",
            )
        except TimeoutError as e:
            res.violations.append(str(e))
            snap = api.snapshot(lab)
        states = {j: r.hget(key(lab_id, "job", j), "state") for j in accepted}
        not_done = {j: s for j, s in states.items() if s != "done"}
        res.check(not not_done, f"jobs not done after the restart: {not_done}")
        after_orphans = {
            p: c for p, c in lab_processes(lab_id, stack.var_dir).items() if p in worker_pids or p in horse_pids
        }
        res.counts = {
            "workers": workers,
            "busy_at_kill": len(busy),
            "procs_before": len(before),
            "ffmpeg_before": len(ffmpeg_before),
            "survived_workers": len(s_workers),
            "survived_horses": len(s_horses),
            "survived_ffmpeg": len(s_ffmpeg),
            "workers_back": len(new_ok),
            "jobs": len(accepted),
            "done": sum(s == "done" for s in states.values()),
            "redelivered": snap["counts"]["redelivered"],
        }
        if after_orphans:
            res.notes.append(f"{len(after_orphans)} old process(es) still alive at the end; swept by pid")
        api.delete(lab)
        r.close()
    res.seconds = time.monotonic() - t0
    return res
