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
    return len(re.findall(r"^\d+\. ", source[start.end():end if end > 0 else None], re.M))


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
