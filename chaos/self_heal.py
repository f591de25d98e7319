"""Drill: the stack heals itself. Started exactly as `python3 lab.py` starts it (`python -m runtime.launcher`), under a
steady stream of jobs, each process is SIGKILLed in turn — the Redis-protocol server, the pool supervisor,
gunicorn (master and worker) — and the launcher must bring it back (with backoff, logged) without tearing
anything down. Meanwhile every API call answers 2xx/4xx or 503 + Retry-After, never a 500; at the end every
accepted job is done (0 lost). Time to recover per process: kill → /healthz ok, and kill → a job enqueued
after the kill is done.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from chaos.common import ROOT, Result
from core.procs import alive, children, processes_matching, wait
from runtime.embedded_redis import free_port
from runtime.harness.client import Api
from runtime.harness.stack import UNLIMITED, _scratch

NAME = "self_heal"
INVARIANT = (
    "SIGKILL of the Redis-protocol server, the supervisor and gunicorn, one at a time under load: the "
    "launcher restarts each, no API call answers 500 (503 + Retry-After while the server is down), "
    "and every accepted job ends done"
)


def http(
    url: str, method: str, body: object = None, token: str | None = None, timeout: float = 30
) -> tuple[int, bytes, dict]:
    """One call through the shared client; a refused or cut connection (a process being restarted) is 0."""
    base = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    reply = Api(base, offline_ok=True).call(method, url[len(base) :], body, token, timeout=timeout)
    return reply.status, reply.body, reply.headers


class Load(threading.Thread):
    """Enqueue a short job every `every` s; record accepted ids and every status seen."""

    def __init__(self, url: str, lab: dict, every: float = 0.5):
        super().__init__(daemon=True)
        self.url, self.lab, self.every = url, lab, every
        self.accepted: list[str] = []
        self.statuses: dict[int, int] = {}
        self.no_retry_after = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                status, raw, headers = http(
                    f"{self.url}/api/labs/{self.lab['lab_id']}/jobs",
                    "POST",
                    {"sample": "carphone_pristine"},
                    self.lab["token"],
                    timeout=10,
                )
            except OSError:
                status, raw, headers = 0, b"", {}
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == 202:
                self.accepted.append(json.loads(raw)["job_id"])
            if status == 503 and "Retry-After" not in headers:
                self.no_retry_after += 1
            # a read too: the snapshot must also say 503, not 500, while the server is down
            try:
                s2, _, h2 = http(
                    f"{self.url}/api/labs/{self.lab['lab_id']}", "GET", None, self.lab["token"], timeout=10
                )
            except OSError:
                s2, h2 = 0, {}
            self.statuses[s2] = self.statuses.get(s2, 0) + 1
            if s2 == 503 and "Retry-After" not in h2:
                self.no_retry_after += 1
            time.sleep(self.every)


def healthy(url: str) -> bool:
    try:
        status, raw, _ = http(url + "/healthz", "GET", timeout=2)
        return status == 200 and json.loads(raw).get("ok") is True
    except (OSError, ValueError):
        return False


def job_state(url: str, lab: dict, job_id: str) -> str | None:
    try:
        status, raw, _ = http(f"{url}/api/labs/{lab['lab_id']}/jobs/{job_id}", "GET", None, lab["token"], timeout=5)
    except OSError:
        return None
    return json.loads(raw).get("state") if status == 200 else None


def run(speed: float = 200, workers: int = 3) -> Result:
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="chaos-self-heal-", dir=_scratch()))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(
        PORT=str(port),
        VAR_DIR=str(root / "var"),
        HOST="127.0.0.1",
        **UNLIMITED,
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    log = open(root / "launcher.log", "w")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "runtime.launcher"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    load = None
    status_file = root / "var" / "launcher.json"
    try:
        wait(lambda: healthy(url) and status_file.exists(), 120, "the launcher's stack to come up")
        status, raw, _ = http(url + "/api/labs", "POST", {"preset": "ch8", "speed": speed})
        lab = json.loads(raw)
        http(
            f"{url}/api/labs/{lab['lab_id']}/settings",
            "PATCH",
            {
                "workers": workers,
                "heartbeat": True,
                "job_duration": 60,
                "max_attempts": 20,
                "respawn_delay": 10,
                "vt_seconds": 120,
            },
            lab["token"],
        )
        load = Load(url, lab)
        load.start()
        time.sleep(3)
        recovery: dict[str, dict] = {}
        for victim in ("redis", "supervisor", "web"):
            pids = json.loads(status_file.read_text())
            pid = pids.get(victim)
            if not pid:
                res.violations.append(f"launcher.json names no {victim} pid: {pids}")
                continue
            targets = [pid, *children(pid)] if victim == "web" else [pid]
            killed_at = time.monotonic()
            for p in targets:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait(lambda t=targets: not any(alive(p) for p in t), 20, f"{victim} to die")
            try:
                wait(
                    lambda v=victim, old=pid: json.loads(status_file.read_text()).get(v) not in (None, old),
                    90,
                    f"the launcher to restart {victim}",
                    every=0.1,
                )
                restarted = time.monotonic() - killed_at
                wait(lambda: healthy(url), 90, f"/healthz after killing {victim}", every=0.1)
                health = time.monotonic() - killed_at
                probe = None
                while probe is None:
                    s, raw, _ = http(
                        f"{url}/api/labs/{lab['lab_id']}/jobs",
                        "POST",
                        {"sample": "carphone_pristine"},
                        lab["token"],
                        timeout=10,
                    )
                    if s == 202:
                        probe = json.loads(raw)["job_id"]
                        load.accepted.append(probe)
                    else:
                        time.sleep(0.1)
                wait(lambda j=probe: job_state(url, lab, j) == "done", 120, f"a job after killing {victim}", every=0.1)
                recovery[victim] = {
                    "restarted_s": round(restarted, 2),
                    "healthz_s": round(health, 2),
                    "job_done_s": round(time.monotonic() - killed_at, 2),
                }
            except TimeoutError as e:
                res.violations.append(f"{victim}: {e}")
            time.sleep(3)  # a little steady load between kills
        load.stop.set()
        load.join(15)
        pending = set(load.accepted)
        deadline = time.monotonic() + 180
        while pending and time.monotonic() < deadline:
            pending = {j for j in pending if job_state(url, lab, j) != "done"}
            time.sleep(0.5)
        states = {j: job_state(url, lab, j) for j in pending}
        res.check(not pending, f"{len(pending)} accepted job(s) not done: {dict(list(states.items())[:5])}")
        res.check(load.statuses.get(500, 0) == 0, f"{load.statuses.get(500, 0)} answers were 500")
        res.check(load.no_retry_after == 0, f"{load.no_retry_after} 503 answers without Retry-After")
        res.check(launcher.poll() is None, "the launcher exited instead of healing")
        text = (root / "launcher.log").read_text() if (root / "launcher.log").exists() else ""
        res.check(len(re.findall(r"restarting it", text)) >= 3, "the launcher did not log each restart")
        res.details["recovery"] = recovery
        res.details["statuses"] = {str(k): v for k, v in sorted(load.statuses.items())}
        res.details["launcher_log"] = [ln for ln in text.splitlines() if "restart" in ln][:20]
        res.counts = {
            "accepted": len(load.accepted),
            "lost": len(pending),
            "http_500": load.statuses.get(500, 0),
            "http_503": load.statuses.get(503, 0),
            **{f"{v}_recover_s": r["job_done_s"] for v, r in recovery.items()},
            **{f"{v}_healthz_s": r["healthz_s"] for v, r in recovery.items()},
        }
    finally:
        if load:
            load.stop.set()
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(40)
            except subprocess.TimeoutExpired:
                launcher.kill()
        log.close()
        for p in processes_matching(str(root)):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if res.ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            res.notes.append(f"logs kept in {root}")
    res.seconds = time.monotonic() - t0
    return res
