"""The claims (chapters.CLAIMS) and the suite agree: every tested or model claim names a test in its
chapter's file, the docs table is the list's own rendering, and the /lesson page shows every claim."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import chapters
from core import lesson
from tests.lesson.helpers import page_text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def proving_tests(chapter: int) -> dict[str, ast.FunctionDef]:
    tree = ast.parse((HERE / f"test_ch{chapter}.py").read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def functions_in(chapter: int) -> set[str]:
    return set(proving_tests(chapter))


@pytest.mark.parametrize("claim", chapters.CLAIMS, ids=lambda c: c.id)
def test_each_claim_is_proven_or_says_why_not(claim):
    assert claim.status in lesson.STATUSES
    if claim.status in ("tested", "model"):
        assert claim.test in functions_in(claim.chapter), f"{claim.id}: no {claim.test} in test_ch{claim.chapter}.py"
    else:
        assert claim.why, f"{claim.id}: a {claim.status} claim says why it is not proven here"


@pytest.mark.parametrize("claim", [c for c in chapters.CLAIMS if c.status in ("tested", "model")], ids=lambda c: c.id)
def test_each_claims_test_records_what_it_measured(claim):
    """The /lesson "measured" column is filled by the `measured` fixture (tests/lesson/conftest.py, which
    also fails a passing test of a tested claim that recorded nothing): every proving test takes it."""
    fn = proving_tests(claim.chapter)[claim.test]
    assert "measured" in [a.arg for a in fn.args.args], f"{claim.test} records nothing for /lesson"


def test_a_parametrized_claim_is_recorded_per_parameter_with_its_worst_outcome():
    from tests.lesson.conftest import merged

    runs = [
        {"param": "fixed", "outcome": "passed", "seconds": 1.0, "measured": {"attempts": 5}},
        {"param": "none", "outcome": "failed", "seconds": 2.0, "measured": {"attempts": 1}},
    ]
    assert merged(runs) == {
        "outcome": "failed",
        "seconds": 3.0,
        "values": {"fixed": {"attempts": 5}, "none": {"attempts": 1}},
    }
    one = [{"param": None, "outcome": "passed", "seconds": 1.0, "measured": {"emails": 1}}]
    assert merged(one) == {"outcome": "passed", "seconds": 1.0, "values": {"emails": 1}}


def test_every_chapter_has_a_file_and_a_claim():
    numbers = {c.number for c in chapters.all_chapters()}
    assert {c.chapter for c in chapters.CLAIMS} == numbers
    assert all((HERE / f"test_ch{n}.py").exists() for n in numbers)


def test_the_docs_table_is_generated_from_the_claims():
    assert (ROOT / "docs" / "lesson-conformance.md").read_text() == lesson.markdown(chapters.CLAIMS), (
        "run: python -m chapters > docs/lesson-conformance.md"
    )


def test_the_lesson_page_lists_every_claim(api):
    res = api.call("GET", "/lesson")
    assert res.status == 200
    html = res.body.decode()
    assert all(f'data-claim="{c.id}"' in html for c in chapters.CLAIMS)


def test_the_lesson_page_says_model_where_no_lab_measured_the_figure(api):
    """A model row's figure came from the numbers model, not the running lab: the page says so, and never
    shows it in the measured column as a measurement (the "where we differ" notes, the lock's margin)."""
    html = api.call("GET", "/lesson").body.decode()
    cells = dict(re.findall(r'<tr data-claim="([^"]+)".*?<td data-testid="measured">(.*?)</td>', html, re.S))
    for c in chapters.CLAIMS:
        assert cells[c.id].startswith("model") is (c.status == "model"), (c.id, c.status, cells[c.id])
    assert {"ch1.fixed_vt_note", "ch2.mmc_note", "ch4.poison_note", "ch7.skew_margin"} <= {
        c.id for c in chapters.CLAIMS if c.status == "model"
    }


@pytest.mark.parametrize(
    "claim", [c for c in chapters.CLAIMS if c.status == "thought" and "Check yourself" in c.section], ids=lambda c: c.id
)
def test_a_question_the_lab_cannot_answer_says_so_on_its_page(api, claim):
    """A thought question is marked on the page right under it, so no learner goes looking for a switch."""
    text = page_text(api, claim.chapter)
    for n in re.findall(r"\d+", claim.section.split("Check yourself", 1)[1]):
        question = re.search(rf"\b{n}\. [^?]*\?", text[text.index("Check yourself") :])
        assert question, f"{claim.id}: no question {n}"
        after = text[text.index(question.group(0)) + len(question.group(0)) :][:200]
        assert "reason" in after.lower() and "Show answer" in after, (claim.id, n, after)
