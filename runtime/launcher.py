"""`python3 lab.py`: bring the whole app up on one machine, keep it up, and tear it down on Ctrl-C.

Starts, in order: the Redis-protocol server (embedded, unless REDIS_URL points elsewhere),
the worker pool supervisor, and gunicorn serving the web app; waits for /healthz; prints the URL.
With a role (`server`, `web`, `pool`) it runs that one part, for a class on several machines.
Then it watches them: whichever dies is restarted (with backoff, logged), never the whole stack.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from core.config import Config
from runtime import embedded_redis

WORKER_CLASS = "runtime.web_worker.LabGeventWorker"


def gunicorn_command(config: Config) -> list[str]:
    """One gevent worker: a greenlet per connection, no thread per socket. See runtime/web_worker.py for
    the per-client bounds."""
    return [
        sys.executable,
        "-m",
        "runtime.gunicorn_main",
        "app:create_app()",  # gunicorn, ssl patched first
        "-k",
        WORKER_CLASS,
        "--worker-connections",
        "8192",
        "-w",
        "1",
        "-b",
        f"{config.host}:{config.port}",
        "--no-control-socket",
        "--log-level",
        "warning",
        "--graceful-timeout",
        "5",
        "--logger-class",
        "app.redact.RedactingLogger",  # tokens never reach a log
        *(["--access-logfile", config.access_log] if config.access_log else []),
    ]


def port_taken(host: str, port: int) -> bool:
    """Does another process listen on host:port? (SO_REUSEADDR, as gunicorn binds: a port merely in
    TIME_WAIT from an earlier run is free.)"""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or "0.0.0.0", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
        return False


def wait_healthy(url: str, procs: list[subprocess.Popen], timeout: float = 60, master: int | None = None) -> None:
    """Wait for /healthz to answer ok. With `master` (the gunicorn master's pid), only an answer from a
    worker of that master counts: another app on the same port must not pass for ours."""
    deadline, foreign = time.monotonic() + timeout, False
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a process exited during start-up; see its output above")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                health = json.load(r)
                if health.get("ok") and (master is None or health.get("master") == master):
                    return
                foreign = master is not None and health.get("master") != master
        except (OSError, ValueError, AttributeError):  # not up yet, or something that is not our JSON object
            pass
        time.sleep(0.2)
    if foreign:
        raise RuntimeError(f"{url}/healthz is answered by another program, not the gunicorn this launcher started")
    raise RuntimeError(f"{url}/healthz did not answer ok within {timeout:.0f} s")


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM everything (the supervisor drains its workers), then SIGKILL stragglers."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 10
    for p in reversed(procs):
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Backoff:
    """Restart delays for one process: 0.5 s doubling to RESTART_MAX_S; reset once it has stayed up
    RESTART_STABLE_S (a crash loop slows down, a one-off crash is healed at once)."""

    def __init__(self, first: float = 0.5, cap: float = 30.0, stable: float = 60.0):
        self.first, self.cap, self.stable = first, cap, stable
        self.delay, self.restarts, self.started = first, 0, time.monotonic()

    def next(self) -> float:
        if time.monotonic() - self.started >= self.stable:
            self.delay = self.first
        wait, self.delay = self.delay, min(self.cap, self.delay * 2)
        self.restarts += 1
        return wait

    def up(self) -> None:
        self.started = time.monotonic()


def log(msg: str) -> None:
    print(f"lab: {time.strftime('%H:%M:%S')} {msg}", flush=True)


def write_status(config: Config, status: dict) -> None:
    """var/launcher.json: the pids the launcher runs and how often each was restarted (drills read it)."""
    path = config.var_dir / "launcher.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status, indent=2))
        os.replace(tmp, path)
    except OSError:
        pass


ROLES = ("all", "server", "web", "pool")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def main(argv: list[str] | None = None) -> int:
    """Start everything, then keep it running: a process that dies (the embedded server, the supervisor,
    gunicorn) is restarted with backoff and the restart logged; labs and workers resume, because every
    lab lives in the server (AOF on) and the supervisor rebuilds its pools from it. Only Ctrl-C/SIGTERM
    tears the stack down.

    A role runs one part on a machine of its own ("More than one machine" in docs/deploy.md), kept running the
    same way: `server` the embedded server alone, on SERVER_BIND:SERVER_PORT with its ACL users; `web`
    gunicorn alone and `pool` the supervisor alone, both against the shared server named by REDIS_URL
    (required: no embedded server)."""
    roles = (argv if argv is not None else sys.argv[1:]) or ["all"]
    if len(roles) != 1 or roles[0] not in ROLES:
        print("usage: python -m runtime.launcher [server|web|pool]", file=sys.stderr)
        return 2
    role = roles[0]
    if role in ("web", "pool") and not os.environ.get("REDIS_URL"):
        print(f"lab: a {role} host needs REDIS_URL (the shared Redis-protocol server)", file=sys.stderr)
        return 2
    config = Config.from_env()
    users = {"web": config.web_password, "pool": config.pool_password, "admin": config.admin_password}
    if config.server_bind not in LOOPBACK and not any(users.values()) and role in ("all", "server"):
        print(
            f"lab: the server would listen on {config.server_bind} with no password; set REDIS_WEB_PASSWORD, "
            "REDIS_POOL_PASSWORD and REDIS_ADMIN_PASSWORD",
            file=sys.stderr,
        )
        return 2
    if role in ("all", "web") and port_taken(config.host, config.port):
        print(
            f"lab: port {config.port} on {config.host} is already in use by another process; stop it, "
            f"or start on another port (PORT={config.port + 1} python3 lab.py)",
            file=sys.stderr,
        )
        return 1
    server = None
    urls = {"web": config.redis_url, "pool": config.redis_url}
    if role == "server" or (role == "all" and not os.environ.get("REDIS_URL")):
        server = embedded_redis.start(
            config.var_dir / "redis",
            port=config.server_port or None,
            maxmemory=config.redis_maxmemory,
            bind=config.server_bind,
            users=users,
        )
        urls = {r: server.role_url(r) for r in urls}
        config.redis_url = server.url
        print(
            f"lab: embedded Redis-protocol server (valkey) on {embedded_redis.shown(server.url)}"
            + (f", ACL users {', '.join(r for r, pw in users.items() if pw)}" if server.users else ""),
            flush=True,
        )
    commands: dict[str, tuple[list[str], dict[str, str]]] = {}
    if role in ("all", "pool"):  # each process with its own role's URL (its own ACL user)
        commands["supervisor"] = (
            [sys.executable, "-m", "workers.supervisor"],
            dict(os.environ, REDIS_URL=urls["pool"]),
        )
    if role in ("all", "web"):
        commands["web"] = (gunicorn_command(config), dict(os.environ, REDIS_URL=urls["web"]))
    procs: dict[str, subprocess.Popen] = {}
    backoff = {name: Backoff() for name in ("redis", *commands)}
    due: dict[str, float] = {}  # name → monotonic time its restart is due
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    def status() -> None:
        write_status(
            config,
            {
                "launcher": os.getpid(),
                "url": embedded_redis.shown(config.redis_url),
                "redis": server.process.pid if server and server.process.poll() is None else None,
                **{n: p.pid if p.poll() is None else None for n, p in procs.items()},
                "restarts": {n: b.restarts for n, b in backoff.items()},
            },
        )

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        for name, (cmd, env) in commands.items():
            procs[name] = subprocess.Popen(cmd, env=env)
        status()
        if role == "pool":
            print(
                f"lab: pool host running against {embedded_redis.shown(config.redis_url)} (Ctrl-C stops it)", flush=True
            )
        elif role == "server":
            print("lab: server running (Ctrl-C stops it)", flush=True)
        else:
            url = config.self_url
            try:
                wait_healthy(url, list(procs.values()), master=procs["web"].pid)
            except RuntimeError as e:
                print(f"lab: the app did not come up: {e}", file=sys.stderr, flush=True)
                return 1
            status()
            print(f"\n  Async Work Lab is running: open {url}\n  (Ctrl-C stops everything)\n", flush=True)
        while not stopping:
            time.sleep(0.2)
            changed = False
            if server and server.process.poll() is not None and "redis" not in due:
                wait = backoff["redis"].next()
                log(
                    f"the Redis-protocol server exited (code {server.process.returncode}); restarting it on "
                    f"the same port and data in {wait:.1f} s (restart {backoff['redis'].restarts})"
                )
                due["redis"] = time.monotonic() + wait
            for name, p in procs.items():
                if p.poll() is not None and name not in due:
                    wait = backoff[name].next()
                    log(
                        f"{name} exited (code {p.returncode}); restarting it in {wait:.1f} s "
                        f"(restart {backoff[name].restarts})"
                    )
                    due[name] = time.monotonic() + wait
            for name, at in list(due.items()):
                if time.monotonic() < at or stopping:
                    continue
                del due[name]
                try:
                    if name == "redis":
                        server = embedded_redis.start(
                            server.data_dir,
                            port=server.port,
                            maxmemory=config.redis_maxmemory,
                            bind=server.bind,
                            users=server.users,
                        )
                    else:
                        procs[name] = subprocess.Popen(commands[name][0], env=commands[name][1])
                except (OSError, RuntimeError) as e:
                    log(f"{name} did not start again: {e}")
                    due[name] = time.monotonic() + backoff[name].next()
                    continue
                backoff[name].up()
                log(f"{name} restarted")
                changed = True
            if changed:
                status()
        return 0
    finally:
        stop_all(list(procs.values()))
        if server:
            server.stop()
        print("lab: stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
