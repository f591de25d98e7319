"""The lesson conformance suite's recorder: each test's outcome and what the lab measured, per claim.

A test asks for `measured` (a dict) and fills in the numbers it observed; after the run the results are
merged into test-artifacts/lesson.json under the ids of the claims (chapters.CLAIMS) its test proves,
so the `/lesson` page shows, for every claim, the last time it was run and what the lab did. A
parametrized test records one entry per parameter (keyed by the parameter's id) under its one claim. A
`model` claim's figures come from the numbers model, not the lab: they are kept as "model", never as
"measured". Running a subset of the suite keeps the other claims' last results. Under pytest-xdist each worker
hands its runs to the controller, the one process that writes the file.
"""

from __future__ import annotations

import json
import time

import pytest

import chapters
from core import lesson

_RUN: dict[str, dict] = {}
_WORST = ("failed", "skipped", "passed")  # a claim run under several parameters is as good as its worst


def claim_nodeid(item: pytest.Item) -> str:
    """The node id the claims list names: a parametrized test's, without the parameter (nor the `@group` suffix
    xdist's loadgroup adds on its workers)."""
    return item.nodeid.split("[", 1)[0].split("@", 1)[0]


def _param(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec else None


@pytest.fixture
def measured(request) -> dict:
    """The numbers this test observed in the lab; a test that proves a tested claim must record some."""
    values: dict = {}
    _RUN.setdefault(request.node.nodeid, {})["measured"] = values
    yield values
    claims = lesson.by_test(chapters.CLAIMS).get(claim_nodeid(request.node), [])
    rep = _RUN[request.node.nodeid]
    if rep.get("outcome") == "passed" and any(c.status == "tested" for c in claims):
        assert values, f"{request.node.nodeid} passed but recorded no measured value for /lesson"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        run = _RUN.setdefault(item.nodeid, {})
        run.update(outcome=rep.outcome, seconds=round(rep.duration, 2), claim=claim_nodeid(item), param=_param(item))


def merged(runs: list[dict]) -> dict:
    """One claim's row from its test's runs: one run as it is; several parameters' runs with their values
    keyed by parameter, the worst outcome and the summed time."""
    if len(runs) == 1 and runs[0]["param"] is None:
        return {"outcome": runs[0]["outcome"], "values": runs[0].get("measured", {}), "seconds": runs[0]["seconds"]}
    return {
        "outcome": min((r["outcome"] for r in runs), key=_WORST.index),
        "values": {r["param"]: r.get("measured", {}) for r in runs if r.get("measured")},
        "seconds": round(sum(r["seconds"] for r in runs), 2),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: a worker's runs, as it handed them over when its session finished."""
    _RUN.update(json.loads(getattr(node, "workeroutput", {}).get("lesson_runs", "{}")))


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller merges and writes
        session.config.workeroutput["lesson_runs"] = json.dumps(_RUN, default=str)
        return
    claims = lesson.by_test(chapters.CLAIMS)
    by_claim: dict[str, list[dict]] = {}
    for r in _RUN.values():
        if r.get("claim") in claims and "outcome" in r:
            by_claim.setdefault(r["claim"], []).append(r)
    if not by_claim:
        return
    data = lesson.load_results()
    rows = data.setdefault("claims", {})
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for nid, runs in by_claim.items():
        m = merged(runs)
        for c in claims[nid]:
            # a model claim's figures are the numbers model's: /lesson labels them so, never as measured
            rows[c.id] = {
                "test": nid,
                "outcome": m["outcome"],
                "seconds": m["seconds"],
                "when": when,
                "model" if c.status == "model" else "measured": m["values"],
            }
    data["last_run"] = when
    lesson.RESULTS.parent.mkdir(exist_ok=True)
    lesson.RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
