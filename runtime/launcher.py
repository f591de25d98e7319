"""`python3 lab.py`: bring the whole app up on one machine and tear it down on Ctrl-C.

Starts, in order: the Redis-protocol server (embedded, unless REDIS_URL points elsewhere),
the worker pool supervisor, and gunicorn serving the web app; waits for /healthz; prints the URL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from core.config import Config
from runtime import embedded_redis

WORKER_CLASS = "runtime.web_worker.LabGeventWorker"


def gunicorn_command(config: Config, threads: int = 0) -> list[str]:
    """One gevent worker: a greenlet per connection, no thread per socket (`threads` is accepted for
    callers written for gthread and ignored). See runtime/web_worker.py for the per-client bounds."""
    del threads
    return [
        sys.executable, "-m", "gunicorn", "app:create_app()",
        "-k", WORKER_CLASS, "--worker-connections", "8192", "-w", "1",
        "-b", f"{config.host}:{config.port}", "--no-control-socket",
        "--log-level", "warning", "--graceful-timeout", "5",
        "--logger-class", "app.redact.RedactingLogger",  # tokens never reach a log
        *(["--access-logfile", config.access_log] if config.access_log else []),
    ]


def wait_healthy(url: str, procs: list[subprocess.Popen], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a process exited during start-up; see its output above")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                if json.load(r).get("ok"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
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


def main() -> int:
    config = Config.from_env()
    server = None
    if not os.environ.get("REDIS_URL"):
        server = embedded_redis.start(config.var_dir / "redis")
        os.environ["REDIS_URL"] = server.url
        config.redis_url = server.url
        print(f"lab: embedded Redis-protocol server (valkey) on {server.url}", flush=True)
    env = dict(os.environ, REDIS_URL=config.redis_url)
    procs: list[subprocess.Popen] = []
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "workers.supervisor"], env=env))
        procs.append(subprocess.Popen(gunicorn_command(config), env=env))
        url = f"http://{'127.0.0.1' if config.host in ('0.0.0.0', '') else config.host}:{config.port}"
        wait_healthy(url, procs)
        print(f"\n  Async Work Lab is running: open {url}\n  (Ctrl-C stops everything)\n", flush=True)
        while not stopping and all(p.poll() is None for p in procs):
            time.sleep(0.2)
        return 0 if stopping else 1
    finally:
        stop_all(procs)
        if server:
            server.stop()
        print("lab: stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
