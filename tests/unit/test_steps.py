"""Guided steps (STEPS in each chapter home): one per "Try this" item of every chapter, each naming a claim with a
test, so a step and the test that proves what it shows cannot drift apart."""

import re

import pytest

import chapters
from core import settings

CHAPTERS = chapters.all_chapters()


def try_this_items(source: str) -> int:
    """How many items the chapter's "Try this" list has: the numbered lines after its marker."""
    start = re.search(r"^(#+ |\*\*)Try this", source, re.M)
    assert start, "the chapter has no Try this list"
    end = source.find("## Check yourself", start.end())
    return len(re.findall(r"^\d+\. ", source[start.end() : end if end > 0 else None], re.M))


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: f"ch{c.number}")
def test_every_try_this_item_has_a_step_naming_a_tested_claim_of_its_chapter(ch):
    steps = chapters.STEPS.get(ch.preset, [])
    assert len(steps) == try_this_items(ch.source), f"chapter {ch.number}: one step per Try this item"
    for n, step in enumerate(steps, 1):
        claim = chapters.BY_ID.get(step["claim"])
        assert claim, f"chapter {ch.number} step {n} names no claim: {step['claim']}"
        assert claim.chapter == ch.number and claim.test, f"{claim.id} is not a tested claim of chapter {ch.number}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: f"ch{c.number}")
def test_every_step_asks_a_question_and_acts_with_the_labs_own_set_ups(ch):
    buttons = {b["id"] for b in chapters.BUTTONS.get(ch.preset, [])}
    for step in chapters.steps_public()[ch.preset]:
        assert step["predict"]["question"].endswith("?"), step
        for action in step.get("do", ()):
            if "scenario" in action:
                assert action["scenario"] in buttons, action
            if "settings" in action:
                assert not settings.validate(action["settings"])[1], action
        if step.get("do"):
            assert step["predict"]["measure"] and step["moment"] and step["look"] and "{measured}" in step["says"], step


def test_a_scenario_banner_asks_and_only_its_outcome_tells():
    vt = chapters.SCENARIOS["vt-too-short"]
    for text in (vt["summary"], vt["hint"]):
        assert "900" not in text and "done once" not in text and "duplicate" not in text
    assert "done once" in vt["outcome"]


# the measures predict-model.js knows (its `measure` and `fromEvents`)
MEASURES = {
    "attempts",
    "state",
    "peak",
    "counter",
    "pertick",
    "count",
    "gap",
    "spread",
    "moment",
    "events",
    "distinct",
    "concurrent",
    "backlog",
    "meanwait",
    "panel",
}


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: f"ch{c.number}")
def test_every_step_is_acted_out_and_no_two_steps_share_a_claim_or_a_question(ch):
    """Issue 38: no step is ask-then-reveal; each sets the lab up, runs, pauses at a moment and measures; and two
    steps of a chapter never ask one question or prove one claim."""
    steps = chapters.steps_public()[ch.preset]
    for n, step in enumerate(steps, 1):
        assert step.get("do"), f"chapter {ch.number} step {n} only asks and reveals"
        assert step["predict"]["measure"].split(":")[0] in MEASURES, step["predict"]["measure"]
        if step["predict"].get("kind") == "choice":
            values = {v for v, _ in step["predict"]["choices"]}
            assert values == set(step["predict"]["buckets"]), f"step {n}: every choice is read off the measure"
    for field in ("claim", "title"):
        seen = [s[field] for s in steps]
        assert len(set(seen)) == len(seen), f"chapter {ch.number}: two steps share a {field}: {seen}"
    questions = [s["predict"]["question"] for s in steps]
    assert len(set(questions)) == len(questions), f"chapter {ch.number}: two steps ask the same question"
