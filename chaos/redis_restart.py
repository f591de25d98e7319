"""Drill: stop the Redis-protocol server mid-run and start it again on the same port and data dir.

The embedded valkey runs with persistence on (appendonly yes, appendfsync everysec). The stop is
a clean SIGTERM, which makes the server fsync the AOF before it exits, so nothing acknowledged is
lost; a SIGKILL or power cut instead could lose up to ~1 s of writes — everysec's trade-off —
which this drill does not claim to survive. Jobs are enqueued before, during and after the outage
with an Idempotency-Key, so a POST retried after a network error cannot create a second job; the
invariant covers every job that was answered 202.
"""

from __future__ import annotations

import time
from collections import Counter

from chaos.common import Result, post_mortem, workers_registered
from core.keys import key
from core.procs import wait
from runtime.harness.drill import drill_client, drill_stack

NAME = "redis_restart"
INVARIANT = (
    "every job accepted with 202 (before, during or after a SIGTERM stop + restart of the server on "
    "the same port and data dir) is still there after the restart and ends done; the lab, its token "
    "and its counters survive; supervisor and web reconnect on their own"
)


def stuck_reason(r, lab_id: str, job_id: str) -> str | None:
    """Why a job that is not done will never run again, if the broker and RQ say so."""
    rec = r.hgetall(key(lab_id, "job", job_id))
    if rec.get("state") != "queued":
        return None
    q = f"rq:queue:lab-{lab_id}"
    prefix = f"{lab_id}-{job_id}-{rec.get('attempt')}-"
    queued = [m for m in r.lrange(q, 0, -1) if m.startswith(prefix)]
    pending = r.zscore(key(lab_id, "dispatch"), f"{job_id}:{rec.get('attempt')}")
    if queued or pending is not None:
        return None
    taken = [m for m in r.lrange(f"{q}:intermediate", 0, -1) if m.startswith(prefix)]
    statuses = {m: r.hget(f"rq:job:{m}", "status") for m in r.scan_iter(match=f"rq:job:{prefix}*")}
    return (
        f"stuck in 'queued' (attempt {rec.get('attempt')}) with no lease, no pending dispatch and no message in "
        f"the RQ queue: a worker took the message (RQ intermediate queue {taken}, RQ job statuses {statuses}) "
        f"and died or failed before leases.claim; nothing will ever deliver it again (see dequeue_crash)"
    )


def run(
    before: int = 8,
    after: int = 4,
    workers: int = 3,
    speed: float = 200,
    duration: float = 400,
    down_s: float = 2.0,
    backlog: bool = True,
    root=None,
) -> Result:
    """backlog=False stops the server only once every job is claimed (RQ's queue empty), which keeps
    out of the hand-off window that dequeue_crash exposes; the drill's default stops it with a backlog."""
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    with drill_stack(NAME, persist=True, root=root) as stack:
        api = drill_client(stack)
        r = stack.redis_client()
        lab = api.lab(
            "ch8",
            speed=speed,
            workers=workers,
            heartbeat=True,
            job_duration=duration,
            heartbeat_interval=60,
            heartbeat_extend=1200,
            vt_seconds=1200,
            respawn_delay=10,
            max_attempts=10,
        )
        lab_id = lab["lab_id"]
        wait(lambda: workers_registered(r, lab) >= workers, 60, f"{workers} workers to register")
        accepted: dict[str, str] = {}  # idempotency key → job id
        statuses: Counter = Counter()

        def submit(tag: str, tries: int = 1, pause: float = 0.5) -> None:
            for _ in range(tries):
                reply = api.enqueue(lab, {"sample": "bikes", "duration_s": duration}, idem=tag)
                statuses[reply.status] += 1
                if reply.status == 202:
                    accepted[tag] = reply.data["job_id"]
                    return
                time.sleep(pause)

        n_before = before if backlog else min(before, workers)
        for i in range(n_before):
            submit(f"before-{i}")
        if backlog:
            wait(lambda: api.snapshot(lab)["counts"]["running"] >= 1, 60, "a job to start")
            wait(lambda: api.snapshot(lab)["counts"]["done"] >= 1, 60, "a first job to finish")
        else:
            wait(lambda: api.snapshot(lab)["counts"]["running"] >= n_before, 60, "every job to be claimed")
            res.check(r.llen(f"rq:queue:lab-{lab_id}") == 0, "RQ's queue is not empty at the stop")
        snap_before = api.snapshot(lab)
        aof = stack.redis_dir / "appendonlydir"

        stack.stop_redis()  # SIGTERM → clean shutdown, AOF fsynced
        down_at = time.monotonic()
        during = Counter()
        while time.monotonic() - down_at < down_s:
            reply = api.enqueue(lab, {"sample": "bikes", "duration_s": duration}, idem=f"during-{len(during)}")
            during[reply.status] += 1
            res.check(reply.status != 202, "a POST was accepted (202) while the server was down")
            time.sleep(0.25)
        stack.start_redis()  # same port, same dir: the AOF is replayed
        res.check(stack.server is not None and stack.server.port == stack.redis_port, "not the same port")
        up_at = time.monotonic()
        res.check(aof.exists(), f"no AOF directory in {stack.redis_dir}")

        # every POST refused during the outage may have half-run: retrying with its key must be safe
        for i in range(len(during)):
            submit(f"during-{i}", tries=20)
        for i in range(after):
            submit(f"after-{i}", tries=20)
        healthy = wait(lambda: api.call("GET", "/healthz").status == 200, 30, "/healthz after the restart")
        res.check(bool(healthy), "/healthz not ok after the restart")
        res.check(stack.supervisor.poll() is None, "the supervisor exited during the outage")
        res.check(stack.web.poll() is None, "gunicorn exited during the outage")

        r = stack.redis_client()
        first = {k: v for k, v in accepted.items() if k.startswith("before-")}
        present = {k: v for k, v in first.items() if r.exists(key(lab_id, "job", v))}
        res.check(
            len(present) == len(first),
            f"jobs accepted before the outage missing after it: {sorted(set(first) - set(present))}",
        )
        reply = api.call("GET", f"/api/labs/{lab_id}", token=lab["token"])
        res.check(reply.status == 200, f"the lab's token no longer opens it → {reply.status}")
        try:
            snap = api.wait_for(
                lab,
                lambda s: s["counts"]["done"] + s["counts"]["dlq"] >= len(accepted) and s["counts"]["running"] == 0,
                120,
                "every accepted job to finish",
            )
        except TimeoutError as e:
            res.violations.append(str(e))
            snap = api.snapshot(lab)
        ids = list(accepted.values())
        res.check(len(set(ids)) == len(ids), "two idempotency keys map to one job")
        states = Counter(r.hget(key(lab_id, "job", j), "state") or "missing" for j in ids)
        res.check(states["done"] == len(ids), f"final states of accepted jobs: {dict(states)}")
        for j in ids:
            why = stuck_reason(r, lab_id, j)
            if why:
                res.violations.append(f"job {j}: {why}")
        total_jobs = r.zcard(key(lab_id, "jobs"))
        res.check(
            total_jobs == len(ids),
            f"the lab holds {total_jobs} jobs but {len(ids)} were accepted "
            f"(a refused POST created a job, or one vanished)",
        )
        c = snap["counts"]
        res.check(c["enqueued"] >= snap_before["counts"]["enqueued"], "the enqueued counter went backwards")
        res.check(c["lost"] == 0, f"{c['lost']} job(s) counted lost")
        res.counts = {
            "accepted": len(ids),
            "before": len(first),
            "during_tries": sum(during.values()),
            "after": len(accepted) - len(first),
            "down_s": round(up_at - down_at, 1),
            "done": states["done"],
            "redelivered": c["redelivered"],
            "failed": c["failed"],
            "lost": c["lost"],
        }
        res.details = {
            "backlog": backlog,
            "statuses_during_outage": dict(during),
            "statuses": dict(statuses),
            "running_at_stop": snap_before["counts"]["running"],
            "done_at_stop": snap_before["counts"]["done"],
            "final_states": dict(states),
        }
        bad = {s: n for s, n in during.items() if s not in (503,)}
        if bad:
            res.notes.append(
                f"POSTs during the outage answered {dict(during)} (a 503 with a JSON error would "
                f"tell a client to retry; 0 = connection error, 500 = unhandled)"
            )
        res.notes.append(
            "stop = SIGTERM (clean: the AOF is fsynced on shutdown); with appendfsync everysec a "
            "SIGKILL could lose up to ~1 s of acknowledged writes"
        )
        if not res.ok:
            res.details["post_mortem"] = post_mortem(
                r, lab_id, [j for j in ids if r.hget(key(lab_id, "job", j), "state") != "done"]
            )
        api.delete(lab)
        r.close()
    res.seconds = time.monotonic() - t0
    return res
