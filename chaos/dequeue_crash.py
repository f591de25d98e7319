"""Drill: a worker dies after RQ handed it a message but before it claimed the job.

This is the window the redis_restart drill sometimes falls into by chance; here it is hit on
purpose, with real processes only. The lab's single idle worker sits in RQ's BLMOVE (server side:
`cmd=blmove` in CLIENT LIST). The drill SIGSTOPs it there, so when a job is enqueued the server
still moves the message into RQ's intermediate queue and writes it to the stopped worker's socket:
the message is received. Then the worker is killed through the public API (SIGKILL), before it
ever ran `leases.claim`. At-least-once delivery says the job must still run; the lease reaper
only knows leases, and this job never got one.
"""

from __future__ import annotations

import os
import signal
import time

from chaos.common import Result, post_mortem, workers_registered
from core.keys import key
from core.procs import tcp_ports, wait
from runtime.harness.drill import drill_client, drill_stack

NAME = "dequeue_crash"
INVARIANT = (
    "a job whose RQ message was received by a worker that died before claiming it is still "
    "delivered again and ends done (at-least-once covers the hand-off, not only the lease)"
)


def blocked_in_blmove(r, pid: int) -> bool:
    """The server lists one of this process's connections as blocked in BLMOVE (matched by client port)."""
    ports = tcp_ports(pid)
    return any(
        c.get("cmd") == "blmove" and int(c.get("addr", ":0").rsplit(":", 1)[1]) in ports for c in r.client_list()
    )


def run(redis_url: str | None = None, speed: float = 200, vt: float = 600, wait_vts: float = 40, root=None) -> Result:
    """The replacement worker must then run the job to done, so its lease has to outlive a beat even
    on a loaded box: a beat every quarter of the timeout, and a timeout of seconds, not a blink, in
    real time (600 sim s at 200× is 3 real s; the default 60 s beat extending by 60 s would leave no
    margin at all and turn a slow beat into a redelivery)."""
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    with drill_stack(NAME, redis_url=redis_url, root=root) as stack:
        api, r = drill_client(stack), stack.redis_client()
        lab = api.lab(
            "ch8",
            speed=speed,
            workers=1,
            heartbeat=True,
            vt_seconds=vt,
            heartbeat_extend=vt,
            heartbeat_interval=vt / 4,
            job_duration=60,
            respawn_delay=10,
        )
        lab_id, q = lab["lab_id"], f"rq:queue:lab-{lab['lab_id']}"
        wait(lambda: workers_registered(r, lab) >= 1, 60, "the worker to register")
        w = api.snapshot(lab)["workers"][0]
        pid = int(w["pid"])
        # it is idle in BLMOVE once the server shows a blocked blmove client
        wait(lambda: blocked_in_blmove(r, pid), 60, "the worker to block in BLMOVE")
        os.kill(pid, signal.SIGSTOP)
        try:
            reply = api.enqueue(lab, {"sample": "bikes"})
            res.check(reply.status == 202, f"enqueue → {reply.status} {reply.data}")
            job_id = reply.data["job_id"]
            received = wait(lambda: r.llen(q) == 0, 10, "the server to hand the message to the stopped worker")
            res.check(bool(received), "the message stayed in the queue")
            in_flight = r.lrange(f"{q}:intermediate", 0, -1)  # RQ's "received, not yet started" list
            res.check(len(in_flight) == 1, f"expected the message in RQ's intermediate queue, found {in_flight}")
            state_at_kill = r.hget(key(lab_id, "job", job_id), "state")
            killed = api.kill(lab, w["id"])  # SIGKILL: a crash before claim
            res.check(killed.status == 200, f"kill → {killed.status} {killed.data}")
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        # a new worker comes up; give the job many visibility timeouts to come back
        wait(
            lambda: any(
                x["state"] == "idle" and x.get("pid") and int(x["pid"]) != pid for x in api.snapshot(lab)["workers"]
            ),
            60,
            "the replacement worker",
        )
        budget = wait_vts * vt / speed
        try:
            api.wait_for(
                lab,
                lambda s: s["counts"]["done"] >= 1,
                budget,
                f"job {job_id} to be done ({wait_vts:g} visibility timeouts of {vt:g} sim s)",
            )
        except TimeoutError as e:
            res.violations.append(
                f"{e}: the message went to a worker that died before the claim and was not "
                f"sent again (core/broker/handoff.py); the job is "
                f"{r.hget(key(lab_id, 'job', job_id), 'state')!r}"
            )
        snap = api.snapshot(lab)
        res.counts = {
            "state_at_kill": state_at_kill,
            "final_state": r.hget(key(lab_id, "job", job_id), "state"),
            "attempt": r.hget(key(lab_id, "job", job_id), "attempt"),
            "redelivered": snap["counts"]["redelivered"],
            "resent": snap["counts"].get("resent", 0),
            "lost": snap["counts"]["lost"],
            "rq_queue_len": r.llen(q),
            "rq_intermediate_len": r.llen(f"{q}:intermediate"),
            "waited_sim_s": round(budget * speed),
        }
        res.details = {"rq_intermediate": in_flight}
        if not res.ok:
            res.details["post_mortem"] = post_mortem(r, lab_id, [job_id])
        api.delete(lab)
        r.close()
    res.seconds = time.monotonic() - t0
    return res
