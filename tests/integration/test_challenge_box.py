"""The handler box's runners (core/challenges/box.py): one process per attempt, even when started ahead of it, and
the CPU time each attempt is charged.

Each attempt here leaves marks where a next attempt in the same process or the same scratch would find them (a
file in /scratch, a global of an imported module, a builtin) and reports which marks it found itself: the second
of two consecutive attempts must find none, and must have run in another process, the first one gone. Each attempt
of the CPU tests burns a known CPU time (its own processes' clock, not the wall's) and must be charged that much.
"""

from __future__ import annotations

import pytest

from core import procs, sandbox
from core.challenges import box

MARKS = """
import builtins, json, os
def handle(ctx):
    found = [os.path.exists('/scratch/mark'), hasattr(json, 'mark'), hasattr(builtins, 'mark')]
    ctx.log(repr(found))
    with open('/scratch/mark', 'w') as f:
        f.write('left by an earlier attempt')
    json.mark = builtins.mark = True
"""
JOB = {"id": "1", "attempt": 1, "idempotency_key": "k", "input": {}}


@pytest.fixture(autouse=True)
def confined():
    assert sandbox.unavailable() == "", sandbox.unavailable()


def attempt() -> tuple[box.Outcome, list[str]]:
    said: list[str] = []
    out = box.HandlerBox(MARKS, JOB).run(lambda op, args: said.append(args["text"]) if op == "log" else None)
    return out, said


def test_two_attempts_on_runners_started_ahead_share_no_process_and_no_scratch():
    pids = []
    for _ in range(2):
        box.AHEAD.start()  # as the worker parent does while the attempt before runs
        assert box.AHEAD.ready is not None
        pids.append(box.AHEAD.ready.pid)
        out, said = attempt()
        assert out.kind == "ack", out
        assert said == ["[False, False, False]"], said  # no file, no module global, no builtin of the one before
        assert box.AHEAD.ready is None  # given once
    assert pids[0] != pids[1]
    assert procs.proc_state(pids[0]) == "", "the first attempt's runner outlived it"


def test_an_attempt_without_a_runner_ahead_starts_its_own_after_one_that_ran_ahead():
    box.AHEAD.start()
    first = box.AHEAD.ready.pid if box.AHEAD.ready else 0
    assert attempt()[1] == ["[False, False, False]"]
    out, said = attempt()  # none started ahead this time
    assert out.kind == "ack" and said == ["[False, False, False]"], (out, said)
    assert procs.proc_state(first) == ""


def test_a_runner_started_ahead_that_expired_gives_way_to_a_new_one(monkeypatch):
    monkeypatch.setattr(box, "IDLE_S", 0)  # it waits no time for its attempt, and exits unused
    box.AHEAD.start()
    runner = box.AHEAD.ready
    assert runner is not None
    procs.wait(lambda: procs.proc_state(runner.pid) == "Z", 60, "the runner's exit")  # unreaped, as a worker's
    monkeypatch.undo()
    out, said = attempt()
    assert out.kind == "ack" and said == ["[False, False, False]"], (out, said)


# Each spins until its process has used SPIN_S CPU seconds (process_time: its own clock, not the wall's), so the
# CPU it burned is known however busy the host is; an attempt's Outcome.cpu_s is what the trusted side counted.
SPIN_S = 0.5
SPIN = f"""
import time
def spin():
    t = time.process_time()
    while time.process_time() - t < {SPIN_S}:
        pass
"""
SPINNING = SPIN + "def handle(ctx):\n    spin()\n"
IDLE = "import time\ndef handle(ctx):\n    time.sleep(0.3)\n"
# a child left spinning when the handler returns: it marks /scratch once it has used SPIN_S, then spins on
ORPHAN = (
    SPIN
    + """import os
def handle(ctx):
    if os.fork() == 0:
        spin()
        open('/scratch/spun', 'w').close()
        while True:
            pass
    while not os.path.exists('/scratch/spun'):
        time.sleep(0.01)
"""
)
# spun, then killed by the wall-clock limit (TURN_S after its last ctx call)
STUCK = SPIN + "def handle(ctx):\n    spin()\n    ctx.log('spun')\n    time.sleep(10**9)\n"


def cpu(code: str, ahead: bool) -> box.Outcome:
    if ahead:
        box.AHEAD.start()
    return box.HandlerBox(code, JOB).run(lambda op, args: None)


@pytest.mark.parametrize("ahead", [True, False], ids=["started ahead", "started for it"])
def test_an_attempt_counts_the_cpu_its_handler_burned_and_not_the_sandbox_start(ahead):
    spun = cpu(SPINNING, ahead)
    assert spun.kind == "ack" and spun.cpu_s >= SPIN_S - 0.1, spun
    idle = cpu(IDLE, ahead)
    assert idle.kind == "ack" and idle.cpu_s < 0.1, idle  # the interpreter's start (~0.03 s) is not the handler's


def test_an_attempt_counts_a_child_left_spinning_when_it_returned():
    out = cpu(ORPHAN, True)
    assert out.kind == "ack" and out.cpu_s >= SPIN_S - 0.1, out


def test_an_attempt_killed_by_the_wall_clock_limit_counts_what_it_burned():
    out = cpu(STUCK, True)
    assert out.kind == "killed" and "wall-clock" in out.why, out
    assert out.cpu_s >= SPIN_S - 0.1, out
