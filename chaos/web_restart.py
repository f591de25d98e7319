"""Drill: restart the web process under N live WebSocket clients while the lab keeps producing events.

Two restarts on the same port: a graceful one (SIGTERM: gunicorn stops, its sockets are closed
after the graceful timeout) and a crash (SIGKILL of master and worker). The pool keeps running,
so events keep landing in the stream while no web process is up. Each client reconnects with
`after=<last id it saw>`; when the lab is quiet, every client's list of ids must be the stream's.
"""

from __future__ import annotations

import signal
import time

from chaos.common import Result, workers_registered
from core import clock, stream
from core.procs import wait
from runtime.harness.drill import WsTail, drill_client, drill_stack

NAME = "web_restart"
INVARIANT = (
    "every WebSocket client that reconnects with after=<last id> across web restarts (SIGTERM and "
    "SIGKILL, same port) ends with exactly the stream's ids (GET …/events): no gap, no repeat, in order"
)


def settled_ids(api, r, lab: dict, still_s: float = 1.0, timeout: float = 30) -> list[str]:
    """The stream's ids once the lab has gone quiet. Every job done is not quiet yet: real work held the
    clock back, and the supervisor says `clock.caught_up` once the achieved speed is back, up to a pacing
    window (3 real s) after the work stopped. So: the clock no longer `slowed`, and no new id for `still_s`."""
    deadline = time.monotonic() + timeout
    ids, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now_ids = [e["id"] for e in api.events(lab)]
        if now_ids != ids:
            ids, since = now_ids, time.monotonic()
        elif not clock.read(r, lab["lab_id"])["slowed"] and time.monotonic() - since >= still_s:
            return ids
        time.sleep(0.2)
    raise TimeoutError(f"the lab's stream did not go quiet within {timeout:.0f} s")


def run(
    redis_url: str | None = None,
    clients: int = 8,
    jobs_per_phase: int = 3,
    workers: int = 3,
    speed: float = 200,
    duration: float = 600,
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
            heartbeat_interval=30,
            heartbeat_extend=1200,
            vt_seconds=1200,
        )
        wait(lambda: workers_registered(r, lab) >= workers, 60, f"{workers} workers to register")
        tails = [WsTail(stack, lab, f"client-{i}") for i in range(clients)]
        for t in tails:
            t.start()
        accepted = 0

        def phase(tag: str) -> None:
            nonlocal accepted
            for i in range(jobs_per_phase):
                reply = api.enqueue(lab, {"sample": "bikes"}, idem=f"{tag}-{i}")
                accepted += reply.status == 202
            wait(lambda: api.snapshot(lab)["counts"]["running"] >= 1, 60, f"{tag}: a job running")

        def all_connected(n: int, after: int) -> bool:
            return all(t.connections >= n and len(t.ids) > after for t in tails)

        phase("p1")
        wait(lambda: all(t.ids for t in tails), 30, "every client to receive its first event")
        restarts = []
        for sig in (signal.SIGTERM, signal.SIGKILL):
            seen = min(len(t.ids) for t in tails)
            time.sleep(0.5)
            t_stop = time.monotonic()
            stack.restart_web(sig)
            restarts.append({"signal": sig.name, "down_s": round(time.monotonic() - t_stop, 1)})
            phase(f"after-{sig.name}")
            n = len(restarts) + 1
            try:
                wait(lambda n=n, seen=seen: all_connected(n, seen), 60, f"every client to reconnect after {sig.name}")
            except TimeoutError as e:
                res.violations.append(f"{e}: connections {[t.connections for t in tails]}")
        try:
            api.wait_for(
                lab,
                lambda s: s["counts"]["done"] >= accepted and not s["counts"]["running"],
                120,
                "every job to finish",
            )
        except TimeoutError as e:
            res.violations.append(str(e))
        try:
            truth = settled_ids(api, r, lab)
        except TimeoutError as e:
            res.violations.append(str(e))
            truth = [e["id"] for e in api.events(lab)]
        for t in tails:
            t.target = truth[-1]
        for t in tails:
            t.finished.wait(30)
            t.stop.set()
        later = {e["id"]: e["type"] for e in api.events(lab, after=truth[-1])}
        for i, t in enumerate(tails):
            got = t.ids
            if t.error:
                res.violations.append(f"client {i}: {t.error}")
            if got == truth:
                continue
            dup = len(got) - len(set(got))
            missing = [x for x in truth if x not in set(got)]
            extra = [x for x in got if x not in set(truth)]
            if extra:  # ids the stream got after `truth` was read name their type
                res.notes.append(f"client {i}: unknown ids {[(x, later.get(x, '?')) for x in extra[:5]]}")
            order = got == sorted(got, key=stream.order)
            res.violations.append(
                f"client {i}: {len(got)} ids vs {len(truth)} in the stream "
                f"(repeats {dup}, gaps {len(missing)} e.g. {missing[:3]}, unknown {len(extra)}, "
                f"in order {order})"
            )
        res.check(
            all(t.connections >= 3 for t in tails),
            f"not every client lived through both restarts: connections {[t.connections for t in tails]}",
        )
        res.counts = {
            "clients": clients,
            "restarts": len(restarts),
            "events": len(truth),
            "jobs": accepted,
            "exact_clients": sum(t.ids == truth for t in tails),
            "reconnects": sum(t.connections - 1 for t in tails),
            "connect_refused": sum(t.connect_failures for t in tails),
        }
        res.details = {"restarts": restarts, "connections": [t.connections for t in tails]}
        api.delete(lab)
        r.close()
    res.seconds = time.monotonic() - t0
    return res
