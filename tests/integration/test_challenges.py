"""Challenges on the running app: a learner's handler runs on the lab's real workers, in the sandbox, under the
challenge's faults, and the checker's verdict names each invariant held or broken (core/challenges/).

Proven both ways per challenge: its reference passes; its starter and each mutant of the reference fail, each
by the invariant that names its mistake, with a counterexample told from the lab's own events.
"""

from __future__ import annotations

import json
import os
import time

import pytest

import chapters
from core import clock, sandbox
from core.challenges import run as runs
from core.engines.scheduler import PLAN, cron_key

SPEED = 200


def run(api, lab: dict, challenge: str, code: str, timeout: float = 120) -> dict:
    """Start a run of `code` and wait for its verdict (a state, not a time: `checked` or `error`)."""
    path = f"/api/labs/{lab['lab_id']}/challenge"
    api.ok("POST", path, {"challenge": challenge, "code": code}, lab["token"], expect=(202,))
    deadline = time.monotonic() + timeout
    while True:
        verdict = api.ok("GET", path, token=lab["token"], expect=(200,))
        if verdict["state"] in ("checked", "error"):
            return verdict
        if time.monotonic() > deadline:
            snap = api.snapshot(lab)
            raise AssertionError(
                f"no verdict within {timeout} s: counts={snap['counts']} jobs="
                f"{[(j['id'], j['state']) for j in snap['jobs']]}"
            )
        time.sleep(0.2)


def broken(verdict: dict) -> dict[str, str]:
    assert verdict["state"] == "checked", verdict
    return {i["id"]: i["counterexample"]["text"] for i in verdict["invariants"] if not i["held"]}


def lab_for(api, challenge: str) -> dict:
    """A fresh lab of the challenge's chapter, its workers up."""
    spec = chapters.CHALLENGES[challenge]
    lab = api.lab(f"ch{spec['chapter']}", speed=SPEED)
    api.workers_ready(lab, chapters.settings_for(f"ch{spec['chapter']}")["workers"])
    return lab


@pytest.fixture
def ch5(api):
    return lab_for(api, "effectively-once")


SPEC = chapters.CHALLENGES["effectively-once"]
MUTANTS = [(c, name) for c, spec in chapters.CHALLENGES.items() for name in spec["mutants"]]


@pytest.mark.parametrize("challenge", list(chapters.CHALLENGES))
def test_each_reference_passes_every_invariant(api, challenge):
    spec = chapters.CHALLENGES[challenge]
    verdict = run(api, lab_for(api, challenge), challenge, spec["reference"])
    assert broken(verdict) == {}, verdict
    assert verdict["passed"] is True and len(verdict["invariants"]) == len(spec["invariants"])


@pytest.mark.parametrize("challenge", list(chapters.CHALLENGES))
def test_each_starter_breaks_the_invariant_it_is_wrong_about(api, challenge):
    spec = chapters.CHALLENGES[challenge]
    verdict = run(api, lab_for(api, challenge), challenge, spec["starter"])
    assert spec["starter_breaks"] in broken(verdict), verdict


def test_ch5_starter_fails_with_the_double_email_of_the_killed_attempt(api, ch5):
    verdict = run(api, ch5, "effectively-once", SPEC["starter"])
    found = broken(verdict)
    assert set(found) == {"one_email"}, verdict
    text = found["one_email"]
    assert "two emails" in text and "was killed before its ack" in text, text
    cex = next(i for i in verdict["invariants"] if i["id"] == "one_email")["counterexample"]
    assert len(cex["events"]) == 2 and cex["job"] == verdict["jobs"][1]


@pytest.mark.parametrize(("challenge", "name"), MUTANTS)
def test_each_mutant_is_caught_by_the_invariant_naming_its_mistake(api, challenge, name):
    code, invariant = chapters.CHALLENGES[challenge]["mutants"][name]
    verdict = run(api, lab_for(api, challenge), challenge, code)
    assert invariant in broken(verdict), verdict


def test_ch7_runs_jobs_its_replicas_fire_as_the_plan_takes_them_down_and_up(api, r):
    """Chapter 7's run has no workload of its own: the lab's scheduler replica processes fire its jobs at the ticks
    of their own clocks, and the fleet takes them down and back at exactly the plan's moments (it holds the clock
    there), so at 200× as at 20× all three fire tick 1, replica 1 alone tick 2, none tick 3 and all three tick 4."""
    spec = chapters.CHALLENGES["once-per-tick"]
    lab = lab_for(api, "once-per-tick")
    verdict = run(api, lab, "once-per-tick", spec["reference"])
    assert verdict["passed"], verdict
    plan = json.loads(r.hget(runs.row_key(lab["lab_id"]), "schedule"))
    jobs = {j["id"]: j for j in api.snapshot(lab)["jobs"]}
    inputs = {i: jobs[i]["payload"]["input"] for i in verdict["jobs"]}
    fired = sorted((x["tick"], x["replica"]) for x in inputs.values())
    assert fired == [(1, "r1"), (1, "r2"), (1, "r3"), (2, "r1"), (4, "r1"), (4, "r2"), (4, "r3")]
    skew = float(spec["settings"]["clock_skew"])
    for i, x in inputs.items():  # the reading is the replica's own clock: the lab's time then, plus its offset
        ahead = x["clock"] - (jobs[i]["payload"]["created_at"] - plan["base"] * plan["interval"])
        offset = skew * (int(x["replica"][1:]) - 1) / 2
        assert offset - 15 < ahead <= offset + 0.01, (x, ahead)
    first = (plan["base"] + 1) * plan["interval"]  # tick 1 on replica 1's clock
    events = api.events(lab)
    events = events[next(n for n, e in enumerate(events) if e["type"] == "challenge.started") :]

    def at(kind: str) -> list[tuple[str, float]]:
        return sorted((e["data"]["replica"], round(e["t_sim"] - first, 2)) for e in events if e["type"] == kind)

    assert [x for x in at("replica.killed") if x[1] > 0] == [("r1", 90.0), ("r2", 20.0), ("r3", 20.0)]
    assert [x for x in at("replica.started") if x[1] > 0] == [("r1", 150.0), ("r2", 150.0), ("r3", 150.0)]


def test_a_ch7_run_a_handler_ends_gives_the_replicas_and_the_clock_back(api, r):
    """A handler that breaks a limit ends the run at its first job: the plan goes with it, so the fleet neither
    holds the clock at its moments nor takes replicas down, and the replicas run their own ticks again."""
    lab = lab_for(api, "once-per-tick")
    lid = lab["lab_id"]
    verdict = run(api, lab, "once-per-tick", "def handle(ctx):\n    while True:\n        pass\n")
    assert verdict["state"] == "error", verdict
    assert r.hget(cron_key(lid, "fault"), "plan") is None
    assert PLAN not in clock.holders(r, lid)
    t = clock.now(r, lid)
    snap = api.wait_for(lab, lambda s: s["clock"]["t"] > t + 600, timeout=60, what="the clock runs on, held by no plan")
    replicas = api.ok("GET", f"/api/labs/{lid}/schedule", token=lab["token"], expect=(200,))["replicas"]
    assert [x["state"] for x in replicas] == ["running"] * 3, (replicas, snap["clock"])


def test_consecutive_attempts_on_a_worker_share_no_process_and_no_scratch(api, ch5):
    """The runner a worker starts ahead for its next horse (core/challenges/box.py `AHEAD`) serves that one
    attempt: every attempt of the run finds no mark of an earlier one (a file in its scratch, a module global, a
    builtin), and, for a root server, its uid says it ran on a runner started ahead (slot 1 or 2) after the
    first attempt on each worker."""
    code = (
        "import builtins, json, os\n"
        "def handle(ctx):\n"
        "    found = [os.path.exists('/scratch/mark'), hasattr(json, 'mark'), hasattr(builtins, 'mark')]\n"
        "    ctx.log('MARKS %r %d' % (found, os.getuid()))\n"
        "    with open('/scratch/mark', 'w') as f:\n"
        "        f.write('left by an earlier attempt')\n"
        "    json.mark = builtins.mark = True\n"
    )
    run(api, ch5, "effectively-once", code)
    events = api.ok("GET", f"/api/labs/{ch5['lab_id']}/events?after=0", token=ch5["token"], expect=(200,))["events"]
    said = [e["data"]["text"].split(" ", 1)[1] for e in events if e["type"] == "handler.log"]
    marks = [line.rsplit(" ", 1) for line in said if line.startswith("[")]
    assert len(marks) >= len(SPEC["workload"]), said  # every job ran at least one attempt
    assert {found for found, _uid in marks} == {"[False, False, False]"}, said
    if os.geteuid() == 0:
        slots = [(int(uid) - sandbox.SANDBOX_UID_BASE) // sandbox.PID_SPAN for _found, uid in marks]
        assert any(slot in (1, 2) for slot in slots), slots  # the hand-off ran: this is not a cold start each time
