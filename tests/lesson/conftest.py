"""The lesson conformance suite's recorder: each test's outcome and what the lab measured, per claim.

A test asks for `measured` (a dict) and fills in the numbers it observed; after the run the results are
merged into test-artifacts/lesson.json under the ids of the claims (core.lesson.CLAIMS) its test proves,
so the `/lesson` page shows, for every claim, the last time it was run and what the lab did. Running a
subset of the suite keeps the other claims' last results.
"""

from __future__ import annotations

import json
import time

import pytest

from core import lesson

_RUN: dict[str, dict] = {}


@pytest.fixture
def measured(request) -> dict:
    values: dict = {}
    _RUN.setdefault(request.node.nodeid, {})["measured"] = values
    return values


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        _RUN.setdefault(item.nodeid, {})["outcome"] = rep.outcome
        _RUN[item.nodeid]["seconds"] = round(rep.duration, 2)


def pytest_sessionfinish(session):
    claims = lesson.by_test()
    ran = {nid: r for nid, r in _RUN.items() if nid in claims and "outcome" in r}
    if not ran:
        return
    data = lesson.load_results()
    rows = data.setdefault("claims", {})
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for nid, r in ran.items():
        for c in claims[nid]:
            rows[c.id] = {"test": nid, "outcome": r["outcome"], "measured": r.get("measured", {}),
                          "seconds": r.get("seconds"), "when": when}
    data["last_run"] = when
    lesson.RESULTS.parent.mkdir(exist_ok=True)
    lesson.RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
