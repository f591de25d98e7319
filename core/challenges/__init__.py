"""Challenges: a learner writes the job's handler; the lab runs it on its real workers under a chapter's faults
and checks the invariants (docs/internals/challenges.md).

`box` runs one attempt of a handler in the sandbox, `runner` is the handler's side of it (the ctx API), `run` is
a run's state and verdict in a lab, `checker` the invariants. The challenges themselves are declared in the
chapters' homes (`CHALLENGES`), gathered by chapters/__init__.py.
"""

from __future__ import annotations

from typing import Any

from core.challenges import checker, runner


def api_doc() -> str:
    """The ctx API as the runner's docstring states it (its indented block): what the page shows."""
    lines = (runner.__doc__ or "").splitlines()
    return "\n".join(line[4:] for line in lines if line.startswith("    "))


def workload(spec: dict[str, Any]) -> str:
    """What a run of the challenge runs, in words (its page, its start event)."""
    if "schedule" in spec:
        n = spec["settings"]["scheduler_replicas"]
        return f"the jobs the lab's {n} scheduler replicas enqueue at each tick of their own clocks, on its workers"
    return f"{len(spec['workload'])} jobs on this lab's workers"


def describe(challenge_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What a page shows of a challenge (the reference and the mutants stay on the server)."""
    return {
        "id": challenge_id,
        "chapter": spec["chapter"],
        "title": spec["title"],
        "task": spec["task"],
        "starter": spec["starter"],
        "hint": spec["hint"],
        "section": spec["section"],
        "workload": workload(spec),
        "api": api_doc(),
        "invariants": [{"id": i.partition(":")[0], "title": checker.title_of(i)} for i in spec["invariants"]],
    }
