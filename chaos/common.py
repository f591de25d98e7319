"""What the drills share beyond the harness: reads of the broker's keys, the verdict.

The stack, its client, a drill's stack and the WebSocket tail are the harness's (runtime/harness/): every
part of `Stack` starts on its own, so a drill can SIGKILL the supervisor, restart gunicorn on the same port
or stop the server and bring it back on the same port and data dir, and `Stack.stop()` sweeps any process
still naming the stack's Redis URL or data dir, by pid.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from core import stream
from core.keys import key

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "chaos"


# --- the broker's keys ---------------------------------------------------------------------------


def workers_registered(r: redis.Redis, lab: dict) -> int:
    return r.scard(f"rq:workers:lab-{lab['lab_id']}")


def stream_ids(r: redis.Redis, lab: dict) -> list[str]:
    return [e["id"] for e in stream.read_after(r, lab["lab_id"], "0", count=1_000_000)]


def job_states(r: redis.Redis, lab: dict) -> dict[str, str]:
    ids = r.zrange(key(lab["lab_id"], "jobs"), 0, -1)
    return {i: r.hget(key(lab["lab_id"], "job", i), "state") or "missing" for i in ids}


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
        return {
            "name": self.name,
            "ok": self.ok,
            "invariant": self.invariant,
            "counts": self.counts,
            "violations": self.violations,
            "notes": self.notes,
            "seconds": round(self.seconds, 1),
            "details": self.details,
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)},
        }

    def write(self, out: Path = OUT) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.name}.json"
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")
        return path

    def summary(self) -> str:
        counts = " ".join(f"{k}={v}" for k, v in self.counts.items())
        lines = [
            f"{'PASS' if self.ok else 'FAIL'} {self.name} ({self.seconds:.0f} s): {counts}",
            f"     invariant: {self.invariant}",
        ]
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
        out[j] = {
            "job": rec,
            "attempts": r.hgetall(key(lab_id, "job", j, "attempts")),
            "events": [
                f"{e['id']} {e['type']} a{e.get('attempt')} {e.get('worker_id') or ''} {e['data']}"
                for e in events
                if e.get("job_id") == j
            ],
        }
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
