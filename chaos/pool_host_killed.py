"""Drill: SIGKILL one of several pool hosts (and its process group) under load.

Two pool hosts (`POOL_HOST_ID` p1, p2, each with its own VAR_DIR, as on two machines) share one
server with one web process. Labs are placed on both; every lab keeps jobs in flight while new
ones keep arriving; then the host that owns the most labs is SIGKILLed with its process group, as a
power cut would. Its leases lapse, the live host adopts its labs, and the dead host's in-flight jobs
come back through their broker leases. Reported: the time from the kill to the last moved lab having
a worker of its new host running again. (HostsStack can also give each host a CPU budget of its own,
as a machine of its own would have: a cgroup v1 quota, runtime/harness/cpuquota.py. This drill runs them unlimited.)
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from chaos.common import Result
from core import blobs, media
from core.keys import owner
from core.procs import alive, wait
from runtime.harness.drill import drill_client
from runtime.harness.hosts import LEASE_S, HostsStack

NAME = "pool_host_killed"
INVARIANT = (
    "SIGKILL of a pool host under load: its labs move to the live host (narrated 'went silent'), every "
    "accepted job ends done or dead-lettered, none lost, every output decodes"
)


def run(
    labs: int = 4,
    workers: int = 2,
    speed: float = 100,
    duration: float = 300,
    load_s: float = 8.0,
    root=None,
    stack: HostsStack | None = None,
) -> Result:
    """The drill on a stack of its own, or on `stack` (started, left running: runtime/harness/netns.py's namespaces)."""
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    if stack is not None:
        _drill(res, stack, labs, workers, speed, duration, load_s)
    else:
        with HostsStack(NAME, root=root) as own:
            _drill(res, own, labs, workers, speed, duration, load_s)
    res.seconds = time.monotonic() - t0
    return res


def _drill(
    res: Result, stack: HostsStack, labs: int, workers: int, speed: float, duration: float, load_s: float
) -> None:
    stack.wait_hosts()
    api, r = drill_client(stack), stack.redis_client()
    opened = []
    for _ in range(labs):
        lab = api.lab(
            "ch1",
            speed=speed,
            workers=workers,
            vt_seconds=120,
            heartbeat=True,
            heartbeat_interval=20,
            heartbeat_extend=60,
            max_attempts=10,
            respawn_delay=10,
        )
        wait(lambda lab=lab: r.get(owner(lab["lab_id"])), 30, "the lab to be placed")
        opened.append(lab)
    owners = {lab["lab_id"]: r.get(owner(lab["lab_id"])) for lab in opened}
    res.details["placement"] = owners
    res.check(len(set(owners.values())) == 2, f"labs not spread over both hosts: {owners}")
    for lab in opened:
        wait(
            lambda lab=lab: len([w for w in api.snapshot(lab)["workers"] if w["state"] == "idle"]) >= workers,
            60,
            "workers to start",
        )
    accepted: dict[str, list[str]] = {lab["lab_id"]: [] for lab in opened}
    stop = threading.Event()

    def load() -> None:  # steady arrivals in every lab, before and after the kill
        i = 0
        while not stop.is_set():
            for lab in opened:
                reply = api.enqueue(lab, {"sample": "carphone_pristine" if i % 2 else "bikes", "duration_s": duration})
                if res.check(reply.status == 202, f"enqueue → {reply.status} {reply.body}"):
                    accepted[lab["lab_id"]].append(reply.json()["job_id"])
            i += 1
            stop.wait(0.6)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    wait(
        lambda: sum(1 for lab in opened for w in api.snapshot(lab)["workers"] if w["state"] == "busy") >= labs,
        60,
        "busy workers in every lab",
    )
    victim = Counter(owners.values()).most_common(1)[0][0]
    survivor = next(h for h in stack.hosts if h != victim)
    moved = [lab for lab in opened if owners[lab["lab_id"]] == victim]
    killed_at = stack.kill_host(victim)
    live_after: dict[str, float] = {}

    def moved_live() -> bool:
        for lab in moved:
            if lab["lab_id"] in live_after:
                continue
            rows = api.snapshot(lab)["workers"]
            if any(
                w.get("host") == survivor and w.get("pid") and alive(int(w["pid"])) and w["state"] in ("idle", "busy")
                for w in rows
            ):
                live_after[lab["lab_id"]] = time.time() - killed_at
        return len(live_after) == len(moved)

    wait(moved_live, 60, "every moved lab to run on the live host", every=0.05)
    time.sleep(load_s)
    stop.set()
    loader.join()
    total = sum(len(v) for v in accepted.values())
    done = dlq = lost = probed = bad = 0
    for lab in opened:
        n = len(accepted[lab["lab_id"]])
        try:
            snap = api.wait_for(
                lab,
                lambda s, n=n: (
                    s["counts"]["done"] + s["counts"]["dlq"] + s["counts"]["lost"] >= n
                    and s["counts"]["running"] == 0
                    and s["counts"]["queued"] == 0
                ),
                180,
                "the lab to settle",
            )
        except TimeoutError as e:
            res.violations.append(str(e))
            snap = api.snapshot(lab)
        c = snap["counts"]
        done, dlq, lost = done + c["done"], dlq + c["dlq"], lost + c["lost"]
        evs = api.events(lab)
        if lab in moved:
            silent = [e for e in evs if e["type"] == "pool.host_silent"]
            res.check(
                bool(silent) and silent[0]["data"] == {"host": survivor, "from_host": victim},
                f"lab {lab['lab_id']}: no 'pool host {victim} went silent; lab moved to {survivor}'",
            )
        for j in snap["jobs"]:
            if j["state"] != "done":
                continue
            probed += 1
            try:
                media.probe(
                    blobs.save(
                        r,
                        lab["lab_id"],
                        f"transcoded/{j['id']}/240p.mp4",
                        stack.root / "probe" / lab["lab_id"] / f"{j['id']}.mp4",
                    )
                )
            except (media.InvalidMedia, OSError) as e:
                bad += 1
                res.violations.append(f"lab {lab['lab_id']} job {j['id']}: output does not decode ({e})")
    res.check(done + dlq == total, f"{total} accepted, {done} done + {dlq} dead-lettered")
    res.check(lost == 0, f"{lost} job(s) lost")
    times = sorted(live_after.values())
    res.counts = {
        "hosts": 2,
        "labs": labs,
        "moved": len(moved),
        "jobs": total,
        "done": done,
        "dlq": dlq,
        "lost": lost,
        "probed": probed,
        "bad_files": bad,
        "lease_s": LEASE_S,
        "kill_to_last_lab_live_s": round(times[-1], 2) if times else None,
        "kill_to_first_lab_live_s": round(times[0], 2) if times else None,
    }
    res.details["kill_to_live_s"] = {k: round(v, 2) for k, v in live_after.items()}
