"""What the drills share beyond the stack: reads of the broker's keys, a WebSocket tail, the verdict.

The stack and its client are the ones the tests and the benchmarks use (runtime/stack.py,
runtime/client.py): every part of `Stack` starts on its own, so a drill can SIGKILL the supervisor,
restart gunicorn on the same port or stop the server and bring it back on the same port and data dir,
and `Stack.stop()` sweeps any process still naming the stack's Redis URL or data dir, by pid.
`drill_stack(name, …)` is a drill's stack: its processes log to files under the stack's root.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import websocket

from core import stream
from core.keys import key
from runtime.client import Api
from runtime.stack import Stack

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "chaos"


# --- the stack ---------------------------------------------------------------------------------

def drill_stack(name: str, redis_url: str | None = None, persist: bool = False, root: Path | None = None) -> Stack:
    return Stack(name, root=root, redis_url=redis_url, persist=persist, logs=True)


def drill_client(s: Stack) -> Api:
    """The drills' client: a refused or cut connection (a server being restarted) is status 0, not a raise."""
    return s.api(offline_ok=True, timeout=30)


def workers_registered(r: redis.Redis, lab: dict) -> int:
    return r.scard(f"rq:workers:lab-{lab['lab_id']}")


def stream_ids(r: redis.Redis, lab: dict) -> list[str]:
    return [e["id"] for e in stream.read_after(r, lab["lab_id"], "0", count=1_000_000)]


def job_states(r: redis.Redis, lab: dict) -> dict[str, str]:
    ids = r.zrange(key(lab["lab_id"], "jobs"), 0, -1)
    return {i: r.hget(key(lab["lab_id"], "job", i), "state") or "missing" for i in ids}


# --- WebSocket ---------------------------------------------------------------------------------

class WsTail(threading.Thread):
    """One WebSocket client: records every event id, reconnects with after=<last id> on any close."""

    def __init__(self, stack: Stack, lab: dict, name: str, after: str = "0"):
        super().__init__(name=f"ws-{name}", daemon=True)
        self.stack, self.lab = stack, lab
        self.first_after = after
        self.ids: list[str] = []
        self.lags: list[float] = []  # receive time − the event's t_real, seconds
        self.arrivals: list[float] = []
        self.connections = 0
        self.connect_failures = 0
        self.target: str | None = None
        self.stop = threading.Event()
        self.finished = threading.Event()
        self.error: str | None = None

    def url(self) -> str:
        after = self.ids[-1] if self.ids else self.first_after
        return f"{self.stack.ws_base}/ws/labs/{self.lab['lab_id']}?after={after}&token={self.lab['token']}"

    def reached(self) -> bool:
        return self.target is not None and bool(self.ids) and id_key(self.ids[-1]) >= id_key(self.target)

    def run(self) -> None:
        try:
            while not self.stop.is_set() and not self.reached():
                try:
                    ws = websocket.create_connection(self.url(), timeout=5, origin=self.stack.url)
                except (OSError, websocket.WebSocketException):
                    self.connect_failures += 1
                    time.sleep(0.2)
                    continue
                self.connections += 1
                ws.settimeout(0.5)
                try:
                    while not self.stop.is_set() and not self.reached():
                        try:
                            msg = ws.recv()
                        except websocket.WebSocketTimeoutException:
                            continue
                        if not msg:
                            break  # closed by the server
                        ev = json.loads(msg)
                        now = time.time()
                        self.ids.append(ev["id"])
                        self.arrivals.append(now)
                        self.lags.append(now - float(ev.get("t_real", now)))
                except (OSError, websocket.WebSocketException):
                    pass
                finally:
                    ws.close()
        except Exception as e:  # noqa: BLE001 - reported in the result, never a hang
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.finished.set()


def id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)



# --- results ----------------------------------------------------------------------------------------

@dataclass
class Result:
    """One drill's verdict: the invariant, what was counted, what broke it."""

    name: str
    invariant: str
    counts: dict = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def check(self, cond: bool, message: str) -> bool:
        if not cond:
            self.violations.append(message)
        return cond

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "invariant": self.invariant, "counts": self.counts,
                "violations": self.violations, "notes": self.notes, "seconds": round(self.seconds, 1),
                "details": self.details, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "host": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}}

    def write(self, out: Path = OUT) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.name}.json"
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")
        return path

    def summary(self) -> str:
        counts = " ".join(f"{k}={v}" for k, v in self.counts.items())
        lines = [f"{'PASS' if self.ok else 'FAIL'} {self.name} ({self.seconds:.0f} s): {counts}",
                 f"     invariant: {self.invariant}"]
        lines += [f"     VIOLATED: {v}" for v in self.violations]
        lines += [f"     note: {n}" for n in self.notes]
        return "\n".join(lines)


def post_mortem(r: redis.Redis, lab_id: str, job_ids: list[str], limit: int = 5) -> dict:
    """What the broker and RQ hold for some stuck jobs: enough to tell where a job fell through."""
    out: dict[str, Any] = {}
    events = stream.read_after(r, lab_id, "0", count=1_000_000)
    for j in job_ids[:limit]:
        rec = r.hgetall(key(lab_id, "job", j))
        rec.pop("payload", None)
        out[j] = {"job": rec, "attempts": r.hgetall(key(lab_id, "job", j, "attempts")),
                  "events": [f"{e['id']} {e['type']} a{e.get('attempt')} {e.get('worker_id') or ''} {e['data']}"
                             for e in events if e.get("job_id") == j]}
    q = f"lab-{lab_id}"
    rq_jobs = {}
    for jid in r.lrange(f"rq:queue:{q}", 0, -1):
        rq_jobs[jid] = r.hget(f"rq:job:{jid}", "status")
    out["broker"] = {
        "dispatch": r.zrange(key(lab_id, "dispatch"), 0, -1, withscores=True),
        "leases": r.zrange(key(lab_id, "leases"), 0, -1, withscores=True),
        "scheduled": r.zrange(key(lab_id, "scheduled"), 0, -1, withscores=True),
        "workers": r.hgetall(key(lab_id, "workers")),
        "rq_queue": rq_jobs,
        "rq_intermediate": r.lrange(f"rq:queue:{q}:intermediate", 0, -1),
        "rq_registries": {k: r.zrange(k, 0, -1) for k in r.scan_iter(match=f"rq:*:{q}") if r.type(k) == "zset"},
        "rq_workers": sorted(r.smembers(f"rq:workers:{q}")),
    }
    return out
