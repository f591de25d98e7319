"""Challenges on the running app: a learner's handler runs on the lab's real workers, in the sandbox, under the
challenge's faults, and the checker's verdict names each invariant held or broken (core/challenges/).

Proven both ways per challenge: its reference passes; its starter and each mutant of the reference fail, each
by the invariant that names its mistake, with a counterexample told from the lab's own events.
"""

from __future__ import annotations

import os
import time

import pytest

import chapters
from core import sandbox

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
