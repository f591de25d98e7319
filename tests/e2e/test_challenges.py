"""The challenges in real Chromium on the real stack. Chapter 5's as a student in a room: the starter handler fails
with the double-email counterexample outlined on the timeline; a claim fixes it (typed with the code box's own
keys); the run passes, the pass is remembered, and the instructor's dashboard shows it. The others on their
chapter pages: the starter fails on its invariant, the reference passes."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Browser, expect

import chapters
from tests.e2e.test_rooms import create_room, saved_lab, widget_ready

RUN = 120_000
FIX = 'if ctx.kv.claim("emailed:" + ctx.job.idempotency_key):'


@pytest.mark.timeout(400)
def test_ch5_starter_fails_with_two_emails_a_claim_fixes_it_and_the_room_sees_the_pass(browser: Browser, stack, api):
    errors: list[str] = []
    teacher = browser.new_context().new_page()
    code = create_room(teacher, stack.url, start="preset:ch5")
    room_lab = saved_lab(teacher, "ch5")
    api.created.append({"lab_id": room_lab["id"], "token": room_lab["token"]})
    student = browser.new_context().new_page()
    student.on("pageerror", lambda e: errors.append(str(e)))
    student.goto(f"{stack.url}/join/{code}")
    student.get_by_test_id("follow-name").fill("Grace")
    student.get_by_test_id("join-follow").click()
    widget_ready(student)
    mine = saved_lab(student, "ch5")
    api.created.append({"lab_id": mine["id"], "token": mine["token"]})

    panel = student.get_by_test_id("challenge-effectively-once")
    box = panel.get_by_test_id("challenge-code")
    expect(box).to_have_value(chapters.CHALLENGES["effectively-once"]["starter"])  # the starter, as declared
    run = panel.get_by_test_id("challenge-run")
    expect(run).to_be_enabled(timeout=30_000)
    run.click()
    expect(panel).to_have_attribute("data-state", "failed", timeout=RUN)
    email = panel.get_by_test_id("challenge-inv-one_email")
    expect(email).to_have_attribute("data-held", "no")
    cex = panel.get_by_test_id("challenge-cex-one_email")
    expect(cex).to_contain_text("two emails")
    expect(cex).to_contain_text("was killed before its ack")
    expect(panel.get_by_test_id("challenge-inv-one_output")).to_have_attribute("data-held", "yes")
    job = cex.inner_text().split(":")[0].split()[1]
    # outlined on the widget's timeline: the job's row, and the attempts that sent
    expect(student.locator(f'.lw-tl-row[data-job="{job}"]')).to_have_attribute("data-counterexample", "yes")
    outline = student.locator("#challenge-outline").inner_text()
    assert f"tl-attempt-{job}-1" in outline and f"tl-attempt-{job}-2" in outline, outline
    student.screenshot(path="test-artifacts/challenge-ch5-failed.png", full_page=False)

    # the fix, typed: a new line before the email (no auto-indent with Shift+Enter), then the email line indented
    text = box.input_value()
    at = text.index("    ctx.email.send")
    box.focus()
    box.evaluate(f"(el) => el.setSelectionRange({at}, {at})")
    student.keyboard.type("    " + FIX)
    student.keyboard.press("Shift+Enter")
    student.keyboard.press("Shift+End")
    student.keyboard.press("Tab")
    fixed = box.input_value()
    assert f"    {FIX}\n        ctx.email.send" in fixed, fixed
    student.keyboard.press("Escape")
    student.keyboard.press("Tab")  # Escape lets Tab leave the box: it is no keyboard trap
    assert student.evaluate("document.activeElement.dataset.testid") != "challenge-code"
    run.click()
    expect(panel).to_have_attribute("data-state", "passed", timeout=RUN)
    for inv in ("every_job_done", "one_output", "one_email"):
        expect(panel.get_by_test_id(f"challenge-inv-{inv}")).to_have_attribute("data-held", "yes")
    expect(panel.locator('[data-role="passed"]')).to_be_visible()
    assert json.loads(student.evaluate("localStorage.getItem('awl.challenges')")) == {"effectively-once": 5}
    student.screenshot(path="test-artifacts/challenge-ch5-passed.png", full_page=False)

    student.goto(f"{stack.url}/")  # the progress on the home page: chapter 5's challenge passed
    expect(student.locator('.toc-item[data-chapter="5"]')).to_have_class(re.compile(r"\bchallenge-passed\b"))
    row = teacher.get_by_test_id(f"room-row-{mine['id']}")
    expect(row).to_contain_text("Grace", timeout=10_000)
    expect(row.locator('[data-role="passed"]')).to_have_attribute("data-passed", "effectively-once", timeout=10_000)
    assert not errors, errors
    teacher.context.close()
    student.context.close()


OTHERS = [c for c, spec in chapters.CHALLENGES.items() if c != "effectively-once"]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("challenge", OTHERS)
def test_each_other_challenge_fails_its_starter_on_its_invariant_and_passes_its_reference(page, lab, challenge):
    """Chapters 1, 4 and 7 in Chromium: the chapter page's code box holds the starter, which fails on the
    invariant it is written to break, with a counterexample; the reference, put in the box, passes every one."""
    spec = chapters.CHALLENGES[challenge]
    lab(f"/chapters/{spec['chapter']}")
    panel = page.get_by_test_id(f"challenge-{challenge}")
    box, run = panel.get_by_test_id("challenge-code"), panel.get_by_test_id("challenge-run")
    expect(box).to_have_value(spec["starter"])
    expect(run).to_be_enabled(timeout=30_000)
    run.click()
    expect(panel).to_have_attribute("data-state", "failed", timeout=RUN)
    broken = panel.locator(f'[data-testid^="challenge-inv-{spec["starter_breaks"]}"]')
    expect(broken).to_have_attribute("data-held", "no")
    expect(panel.locator(f'[data-testid^="challenge-cex-{spec["starter_breaks"]}"]')).not_to_be_empty()
    box.fill(spec["reference"])
    run.click()
    expect(panel).to_have_attribute("data-state", "passed", timeout=RUN)
    held = panel.locator('[data-testid^="challenge-inv-"]')
    expect(held).to_have_count(len(spec["invariants"]))
    for n in range(len(spec["invariants"])):
        expect(held.nth(n)).to_have_attribute("data-held", "yes")
    page.screenshot(path=f"test-artifacts/challenge-{challenge}-passed.png", full_page=False)
