"""A challenge run's CPU budget (CHALLENGE_CPU_S): the CPU seconds all its sandboxed attempts may use together.

Each attempt is charged what its sandbox's processes used (core/challenges/box.py counts it; the handler reports
nothing), on a stack of its own whose budget is BUDGET_S. A handler that spins SPIN_S of CPU in every attempt,
within the per-attempt limit of 2 s, has its run ended once the attempts' sum passes the budget; one that spins
nothing finishes its run (eight jobs, an attempt or more each).
"""

from __future__ import annotations

import pytest
import redis

import chapters
from core import sandbox
from runtime.harness.stack import Stack
from tests.integration.test_challenges import run

CHALLENGE = "effectively-once"
BUDGET_S = 1
SPIN_S = 0.4  # per attempt: the budget is spent on the third
SPINNING = f"""
import time
def handle(ctx):
    t = time.process_time()
    while time.process_time() - t < {SPIN_S}:
        pass
"""
IDLE = "def handle(ctx):\n    pass\n"


@pytest.fixture(scope="module")
def budget(redis_server, tmp_path_factory):
    """A stack whose challenge runs may use BUDGET_S CPU seconds each, on its own database of the session's
    server."""
    assert sandbox.unavailable() == "", sandbox.unavailable()
    db = redis_server.url.rsplit("/", 1)[0] + "/4"
    redis.Redis.from_url(db).flushdb()
    with Stack(
        "cpubudget", root=tmp_path_factory.mktemp("cpubudget"), redis_url=db, env={"CHALLENGE_CPU_S": str(BUDGET_S)}
    ) as s:
        yield s


@pytest.fixture
def lab(budget):
    client = budget.api()
    chapter = f"ch{chapters.CHALLENGES[CHALLENGE]['chapter']}"
    lab = client.lab(chapter, speed=200)
    client.workers_ready(lab, chapters.settings_for(chapter)["workers"])
    yield client, lab
    client.delete_created()


def test_a_run_whose_attempts_burn_cpu_is_ended_once_they_pass_its_budget(lab):
    client, one = lab
    verdict = run(client, one, CHALLENGE, SPINNING)
    assert verdict["state"] == "error", verdict
    assert f"the run used its {BUDGET_S} CPU seconds" in verdict["error"], verdict


def test_a_run_whose_attempts_burn_no_cpu_is_checked_within_the_same_budget(lab):
    client, one = lab
    verdict = run(client, one, CHALLENGE, IDLE)
    assert verdict["state"] == "checked", verdict  # wrong (it does no work), but not stopped
