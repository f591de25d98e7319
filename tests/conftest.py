"""Fixtures: a private Redis-protocol server and a real app stack (supervisor + gunicorn) per session.

Everything binds to 127.0.0.1 on free ports and is stopped at the end; no test touches a server
it did not start. Under pytest-xdist a session is one worker process, so each worker has a stack of its
own (its own ports, its own tmp dirs). A test's folder is its marker (tests/unit → `unit`, …), so
`-m "not integration and not e2e and not lesson"` selects exactly the tests that start no server.
"""

from __future__ import annotations

import importlib
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
TESTS = Path(__file__).resolve().parent
ARTIFACTS = TESTS.parent / "test-artifacts"
FOLDERS = ("unit", "integration", "e2e", "lesson")  # each folder's name is its tests' marker
DRILLS = ("tests/integration/test_chaos.py", "tests/integration/test_network.py")
"""Fault drills and network namespaces: they kill processes, stop servers and load the box on purpose, so under
xdist they run in one group, one after another on one worker, never beside each other."""


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """xdist's controller collects nothing, so it never meets tests/lesson's conftest on its own: load it there, to
    merge the workers' lesson runs and write test-artifacts/lesson.json once."""
    if config.pluginmanager.hasplugin("dsession"):
        recorder = importlib.import_module("tests.lesson.conftest")
        if not config.pluginmanager.is_registered(recorder):  # unless a path under tests/lesson was given
            config.pluginmanager.register(recorder)


def pytest_collection_modifyitems(config, items):
    """Mark each test by its folder; under xdist keep a module whose tests share a module- or class-scoped fixture
    (a stack of its own, a drill's run) on one worker, so that fixture is built once; then set the run's order."""
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if folder not in FOLDERS:
            continue
        item.add_marker(folder)
        if folder == "unit" and "redis_server" in item.fixturenames:
            raise pytest.UsageError(f"{item.nodeid}: a unit test must start no server; move it to tests/integration")
        module = item.nodeid.split("::", 1)[0]
        if module in DRILLS:
            item.add_marker(pytest.mark.xdist_group("drills"))
        elif any(d.scope in ("module", "class") for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(module))
    items[:] = run_order(items)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report kept on its test (`item.rep_call`), so a fixture's teardown knows the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def failed(request) -> bool:
    """Whether the test `request` belongs to failed in its call (read in a fixture's teardown)."""
    report = getattr(request.node, "rep_call", None)
    return bool(report and report.failed)


def run_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The unit tests first (a broken build fails in seconds); then the grouped modules, the drills first (the
    longest: started last, they would be the run's tail); then the rest in file order, with the browser tests
    spread evenly among them (Chromium is the heaviest part: three at once would take both cores)."""
    unit = [i for i in items if i.get_closest_marker("unit")]
    rest = [i for i in items if not i.get_closest_marker("unit")]
    grouped = sorted(
        (i for i in rest if i.get_closest_marker("xdist_group")),
        key=lambda i: i.get_closest_marker("xdist_group").args[0] != "drills",
    )
    free = [i for i in rest if not i.get_closest_marker("xdist_group")]
    browser = [i for i in free if "page" in i.fixturenames]
    other = [i for i in free if "page" not in i.fixturenames]
    spread: list[pytest.Item] = []
    for n, item in enumerate(other, 1):
        spread.append(item)
        spread.extend(browser[len(browser) * (n - 1) // len(other) : len(browser) * n // len(other)])
    return unit + grouped + (spread if other else browser)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """The session's server; with COMMAND_LOG=<file>, every command each role sends it is recorded there
    (runtime/harness/command_log.py: what the ACL allowlists are written from)."""
    server = embedded_redis.start(tmp_path_factory.mktemp("redis"), persist=False)
    log = (
        CommandLog(server.url, server.port, Path(os.environ["COMMAND_LOG"])).start()
        if os.environ.get("COMMAND_LOG")
        else None
    )
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
    with Stack(
        "tests",
        root=tmp_path_factory.mktemp("stack"),
        redis_url=redis_server.url,
        env={
            "MAX_LABS": "200",
            "RECONCILE_S": "86400",
            "MAX_UPLOAD_BYTES": str(2 * 1024 * 1024),
            "WEBHOOK_TEST_ALLOWLIST": f"http://127.0.0.1:{hook_port}/",
        },
    ) as s:
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
