"""What the benchmarks share beyond the harness: statistics, the benchmark context, the report.

The stack and its HTTP client are the ones the tests and the fault drills use (runtime/harness/stack.py,
runtime/harness/client.py): a private valkey-server, the pool supervisor (real `rq worker` processes) and
gunicorn (gevent), each on a free 127.0.0.1 port with its own VAR_DIR, started once for every
benchmark; `Stack.stop()` stops all of it, including any process a benchmark started through
`Stack.spawn()`, and removes its files.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis

from core import procs, stream
from core.keys import key
from runtime.harness.stack import Stack
from runtime.harness.stats import pct

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench"
RQ_BIN = str(Path(sys.executable).with_name("rq"))
DRIVER = "bench-driver"  # the client name of the bench's own connection to the server (`cost` leaves its commands out)
LOAD: dict[str, float] = {}  # 1-minute load average when the current benchmark started


# --- statistics (percentiles: runtime/harness/stats.py) ------------------------------------------


def median(values: Iterable[float]) -> float:
    return pct(values, 50)


def rnd(x: float, nd: int = 2) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, nd)


# --- processes --------------------------------------------------------------------------------


def rusage_cpu_s(ru) -> float:
    return ru.ru_utime + ru.ru_stime


def stack() -> Stack:
    """The benchmarks' stack: no per-client limits, room for 50 labs."""
    return Stack("bench", env={"MAX_LABS": "50"})


wait = functools.partial(procs.wait, every=0.02)


class Bench:
    """What a benchmark gets: the stack, the HTTP contract, and read access to the server."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.r = redis.Redis.from_url(stack.redis_url, decode_responses=True, client_name=DRIVER)  # the driver's reads
        self.rb = redis.Redis.from_url(stack.redis_url)  # RQ pickles: bytes in, bytes out
        self.api = stack.api(timeout=30)
        LOAD["start"] = round(os.getloadavg()[0], 2)

    # HTTP (the shared client; `call` answers the JSON or raises runtime.harness.client.HttpError) ----------------
    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        expect: tuple[int, ...] = (200, 201, 202, 204),
        timeout: float = 30,
    ) -> Any:
        return self.api.ok(method, path, body, token, expect=expect, timeout=timeout)

    def lab(self, preset: str, speed: float, **settings) -> dict:
        return self.api.lab(preset, speed, **settings)

    def delete_lab(self, lab: dict) -> None:
        self.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"], expect=(204, 404))
        self.api.created = [x for x in self.api.created if x["lab_id"] != lab["lab_id"]]

    def delete_labs(self) -> None:
        self.api.delete_created()

    def enqueue(self, lab: dict, body: dict) -> str:
        return self.call("POST", f"/api/labs/{lab['lab_id']}/jobs", body, lab["token"])["job_id"]

    def kill(self, lab: dict, worker_id: str) -> dict:
        return self.call("POST", f"/api/labs/{lab['lab_id']}/workers/{worker_id}/kill", {}, lab["token"])

    # direct reads (same keys the snapshot is built from; cheaper than a full snapshot) --------
    def states(self, lab: dict) -> dict[str, int]:
        return {k: int(v) for k, v in self.r.hgetall(key(lab["lab_id"], "states")).items()}

    def counts(self, lab: dict) -> dict[str, int]:
        return {k: int(v) for k, v in self.r.hgetall(key(lab["lab_id"], "counts")).items()}

    def worker_rows(self, lab: dict) -> list[dict]:
        return [json.loads(v) for v in self.r.hgetall(key(lab["lab_id"], "workers")).values()]

    def workers_ready(self, lab: dict, n: int, timeout: float = 60) -> None:
        """n workers registered with RQ (so a timed run does not measure start-up)."""
        wait(lambda: self.r.scard(f"rq:workers:lab-{lab['lab_id']}") >= n, timeout, f"{n} workers did not register")

    def events(self, lab: dict) -> list[dict]:
        return stream.read_after(self.r, lab["lab_id"], "0", count=100_000)

    def last_event_id(self, lab: dict) -> str:
        top = self.r.xrevrange(key(lab["lab_id"], "events"), count=1)
        return top[0][0] if top else "0-0"

    def wait_event(self, lab: dict, after: str, pred: Callable[[dict], bool], timeout: float) -> tuple[dict, str]:
        """Block on the lab's stream (XREAD) until an event after `after` satisfies pred."""
        k = key(lab["lab_id"], "events")
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            resp = self.r.xread({k: after}, block=max(1, int(min(left, 1.0) * 1000)), count=500)
            for _name, entries in resp or ():
                for eid, fields in entries:
                    after = eid
                    ev = stream.decode(eid, fields)
                    if pred(ev):
                        return ev, after
        raise TimeoutError(f"no matching event within {timeout:.0f} s")

    def close(self) -> None:
        self.delete_labs()
        self.r.close()
        self.rb.close()


# --- the report --------------------------------------------------------------------------------


def fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)


def table(columns: list[str], rows: list[dict]) -> str:
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    for row in cells:
        out.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(out)


def report(
    name: str,
    title: str,
    columns: list[str],
    rows: list[dict],
    ratio: dict,
    params: dict,
    notes: list[str] | None = None,
    extra: dict | None = None,
) -> dict:
    """Print the table and the RATIO line; write var/bench/NAME.json; return the document."""
    print(f"\n== {name}: {title}")
    print(table(columns, rows))
    print(f"RATIO {ratio['label']}: {fmt(ratio['value'])}  (baseline: {ratio['baseline']})")
    if ratio.get("also"):
        print(f"      also: {ratio['also']}")
    load_end = round(os.getloadavg()[0], 2)
    print(f"  · load average (1 min) at start {LOAD.get('start', '?')}, at end {load_end} on {os.cpu_count()} cpus")
    for n in notes or ():
        print(f"  · {n}")
    doc = {
        "name": name,
        "title": title,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_1m_start": LOAD.get("start"),
            "loadavg_1m_end": load_end,
        },
        "params": params,
        "columns": columns,
        "rows": rows,
        "ratio": ratio,
        "notes": notes or [],
        **(extra or {}),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc
