"""Fixtures: a private Redis-protocol server and a real app stack (supervisor + gunicorn) per session.

Everything binds to 127.0.0.1 on free ports and is stopped at the end; no test touches a server
it did not start.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from runtime import embedded_redis
from runtime.harness.browser import chromium_launch_args
from runtime.harness.client import Api, Response
from runtime.harness.command_log import CommandLog
from runtime.harness.stack import Stack

__all__ = ["ARTIFACTS", "Api", "Response"]  # tests import the shared client from here too
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """The session's server; with COMMAND_LOG=<file>, every command each role sends it is recorded there
    (runtime/harness/command_log.py: what the ACL allowlists are written from)."""
    server = embedded_redis.start(tmp_path_factory.mktemp("redis"), persist=False)
    log = CommandLog(server.url, server.port, Path(os.environ["COMMAND_LOG"])).start() \
        if os.environ.get("COMMAND_LOG") else None
    yield server
    if log:
        log.stop()
    server.stop()


@pytest.fixture
def r(redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture(scope="session")
def stack(redis_server, tmp_path_factory):
    """The real app: pool supervisor (real rq workers) and gunicorn (gevent) on a free port, unlimited
    (the whole session runs from one address), on the session's Redis-protocol server."""
    hook_port = embedded_redis.free_port()  # the one loopback port a test webhook receiver may use
    os.environ["LAB_TEST_REDIS_URL"] = redis_server.url
    os.environ["LAB_TEST_HOOK_PORT"] = str(hook_port)
    # tests that drive one part (a pass, a barrier, a blob) write a lab's keys by hand, a lab not in `labs`:
    # the pool's reconcile would sweep it as an orphan mid-test, so here it runs once a day, never in a session
    # (test_lifecycle's own stack runs it every 3 s and tests the sweep)
    with Stack("tests", root=tmp_path_factory.mktemp("stack"), redis_url=redis_server.url,
               env={"MAX_LABS": "200", "RECONCILE_S": "86400", "MAX_UPLOAD_BYTES": str(2 * 1024 * 1024),
                    "WEBHOOK_TEST_ALLOWLIST": f"http://127.0.0.1:{hook_port}/"}) as s:
        yield s


@pytest.fixture
def api(stack):
    """The stack's client; labs a test creates are deleted after it (workers, keys and files)."""
    client = stack.api()
    yield client
    client.delete_created()


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
