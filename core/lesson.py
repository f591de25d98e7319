"""A lesson claim: a statement a chapter makes, tied to the section that makes it and the test that proves it.

Each chapter home lists its own (`CLAIMS` in chapters/chN/, gathered as `chapters.CLAIMS`): the conformance
suite (tests/lesson/) names its tests after these rows and records what the lab measured under each row's id;
the `/lesson` page and docs/lesson-conformance.md are rendered from the list plus the suite's last run
(test-artifacts/lesson.json).

Status of a row:
  * `tested`     — a test in tests/lesson sets the lab up as the page says, does it, and asserts the
                   outcome the page states, with numbers read from the numbers model or the preset;
  * `model`      — a reasoning question whose answer is arithmetic the lab does not act out; the test
                   checks the page states the numbers model's figure (so the answer cannot drift);
  * `todo`       — the lab can show it, but only once the delivery-semantics rebuild (issue 18) lands;
                   listed in the chapter's test file docstring, not skipped;
  * `thought`    — the page says plainly it is a thought experiment.

Run `python -m chapters` to print the Markdown table kept in docs/lesson-conformance.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "lesson.json"
STATUSES = ("tested", "model", "todo", "thought")


@dataclass(frozen=True)
class Claim:
    id: str
    chapter: int
    section: str  # where the page makes the claim: "Try this 2", "Check yourself 1", or a heading
    claim: str
    test: str = ""  # test function name in tests/lesson/test_ch{chapter}.py
    status: str = "tested"
    why: str = ""  # for todo / thought: why it is not proven here yet

    @property
    def nodeid(self) -> str:
        return f"tests/lesson/test_ch{self.chapter}.py::{self.test}" if self.test else ""


def by_test(claims: Iterable[Claim]) -> dict[str, list[Claim]]:
    """Claims proven by each test node id (one test may prove a try-this step and a question)."""
    out: dict[str, list[Claim]] = {}
    for c in claims:
        if c.test:
            out.setdefault(c.nodeid, []).append(c)
    return out


def load_results(path: Path = RESULTS) -> dict[str, Any]:
    """The suite's last run: {claim id: {outcome, measured (or model, for a model claim), test, when}}; empty
    if it never ran here."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def table(claims: Iterable[Claim], results: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows for the conformance table: each claim with its last measured result, if any."""
    results = load_results() if results is None else results
    return [dict(asdict(c), nodeid=c.nodeid, result=results.get("claims", {}).get(c.id)) for c in claims]


def summary(claims: Iterable[Claim]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for c in claims:
        row = out.setdefault(c.chapter, dict.fromkeys(STATUSES, 0))
        row[c.status] += 1
    return out


def markdown(claims: tuple[Claim, ...]) -> str:
    lines = [
        "# Lesson conformance",
        "",
        "Every claim a chapter makes that the lab can act out, the section that makes it, and the test",
        "in `tests/lesson/` that proves it. Generated from the chapters' CLAIMS (`python -m chapters`);",
        "what the lab measured at the last run is on the `/lesson` page (read from",
        "`test-artifacts/lesson.json`, written by the suite).",
        "",
        "| claim | chapter · section | status | test |",
        "|---|---|---|---|",
    ]
    for c in claims:
        test = f"`{c.nodeid}`" if c.nodeid else (c.why or "—")
        lines.append(f"| {c.claim} | {c.chapter} · {c.section} | {c.status} | {test} |")
    lines += ["", "## Per chapter", "", "| chapter | tested | model | todo | thought |", "|---|---|---|---|---|"]
    for ch, row in sorted(summary(claims).items()):
        lines.append(f"| {ch} | {row['tested']} | {row['model']} | {row['todo']} | {row['thought']} |")
    return "\n".join(lines) + "\n"
