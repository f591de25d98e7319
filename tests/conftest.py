"""Fixtures: a private Redis-protocol server and a real app stack (supervisor + gunicorn) per session.

Everything binds to 127.0.0.1 on free ports and is stopped at the end; no test touches a server
it did not start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from bench.common import chromium_launch_args
from core.config import Config
from runtime import embedded_redis
from runtime.launcher import gunicorn_command, stop_all, wait_healthy

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
# The shared stack serves a whole test session from one address (2,000-job tests, kill storms):
# per-client rate limits and the machine's worker ceiling are tested on their own stack instead.
UNLIMITED = {"RATE_JOBS": "0", "RATE_KILLS": "0", "MAX_WORKERS": "1000", "RATE_LABS": "0", "MAX_CLIENT_LABS": "0",
             "RATE_ROOM_LOOKUPS": "0", "LAB_BATCH_JOBS": "0", "LAB_LATE_DELIVERIES": "0", "LAB_JOB_RATE": "0"}


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = embedded_redis.start(tmp_path_factory.mktemp("redis"), persist=False)
    yield server
    server.stop()


@pytest.fixture
def r(redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes

    def json(self):
        return json.loads(self.body)


class Api:
    """A tiny HTTP client for the contract (urllib: nothing mocked between test and server)."""

    def __init__(self, base: str):
        self.base = base
        self.created: list[dict] = []

    def call(self, method: str, path: str, body=None, token: str | None = None, headers=None,
             raw: bytes | None = None, timeout: float = 40) -> Response:
        hdrs = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return Response(resp.status, dict(resp.headers), resp.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, dict(e.headers), e.read())

    def lab(self, preset: str = "ch8", speed: float = 1000, **settings) -> dict:
        res = self.call("POST", "/api/labs", {"preset": preset, "speed": speed})
        assert res.status == 201, res.body
        lab = res.json()
        self.created.append(lab)
        if settings:
            patched = self.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", settings, lab["token"])
            assert patched.status == 200, patched.body
        return lab

    def snapshot(self, lab: dict) -> dict:
        return self.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"]).json()

    def wait_for(self, lab: dict, predicate, timeout: float = 60, every: float = 0.1) -> dict:
        """Poll the snapshot until predicate(snapshot) holds; fail with the last snapshot."""
        deadline = time.monotonic() + timeout
        snap = self.snapshot(lab)
        while not predicate(snap):
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met; counts={snap['counts']} workers={snap['workers']}")
            time.sleep(every)
            snap = self.snapshot(lab)
        return snap

    def workers_ready(self, lab: dict, n: int) -> dict:
        """Wait until n workers are registered with RQ (so timing tests don't race start-up)."""
        r = redis.Redis.from_url(os.environ["LAB_TEST_REDIS_URL"])
        queue = f"rq:workers:lab-{lab['lab_id']}"
        deadline = time.monotonic() + 60
        while r.scard(queue) < n:
            if time.monotonic() > deadline:
                raise AssertionError("workers did not register")
            time.sleep(0.05)
        return self.snapshot(lab)

    def events(self, lab: dict, after: str = "0") -> list[dict]:
        return self.call("GET", f"/api/labs/{lab['lab_id']}/events?after={after}", token=lab["token"]).json()["events"]


@dataclass
class Stack:
    url: str
    api: Api
    var_dir: Path
    redis_url: str
    procs: list


@pytest.fixture(scope="session")
def stack(redis_server, tmp_path_factory):
    """The real app: pool supervisor (real rq workers) and gunicorn (gthread) on a free port."""
    var_dir = tmp_path_factory.mktemp("var")
    port = embedded_redis.free_port()
    hook_port = embedded_redis.free_port()  # the one loopback port a test webhook receiver may use
    env = dict(os.environ, REDIS_URL=redis_server.url, VAR_DIR=str(var_dir), PORT=str(port),
               MAX_LABS="200", LAB_IDLE_TTL="3600", MAX_UPLOAD_BYTES=str(2 * 1024 * 1024),
               WEBHOOK_TEST_ALLOWLIST=f"http://127.0.0.1:{hook_port}/", **UNLIMITED)
    os.environ["LAB_TEST_REDIS_URL"] = redis_server.url
    os.environ["LAB_TEST_HOOK_PORT"] = str(hook_port)
    config = Config(redis_url=redis_server.url, port=port)
    procs = [subprocess.Popen([sys.executable, "-m", "workers.supervisor"], env=env),
             subprocess.Popen(gunicorn_command(config, threads=48), env=env)]
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, procs)
        yield Stack(url, Api(url), var_dir, redis_server.url, procs)
    finally:
        stop_all(procs)


@pytest.fixture
def api(stack):
    """The stack's client; labs a test creates are deleted after it (workers, keys and files)."""
    client = Api(stack.url)
    yield client
    for lab in client.created:
        client.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return chromium_launch_args(browser_type_launch_args)


@pytest.fixture
def shot(page, request):
    """Save a screenshot under test-artifacts/ named after the test and a label."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(label: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{label}.png"
        page.screenshot(path=str(path), full_page=True)
        return path
    return take
