"""The challenge checker and the code check, on histories written by hand (core/challenges/checker.py,
app/routes/challenges.py `code_error`); the runs themselves are proven in tests/integration/test_challenges.py."""

from __future__ import annotations

import json

import chapters
from app.routes.challenges import code_error
from core.challenges import checker, describe


def ev(i: int, type_: str, t: float, job: str = "1", attempt: int | None = 1, **data) -> dict:
    e = {"id": f"{1000 + i}-0", "t_sim": t, "type": type_, "job_id": job, "data": data}
    if attempt is not None:
        e["attempt"] = attempt
    return e


DONE = {"state": "done", "payload": json.dumps({"video_id": "challenge-1-1"})}


def test_two_emails_are_told_with_the_kill_between_them():
    history = [
        ev(1, "job.claimed", 0),
        ev(2, "email.sent", 312),
        ev(3, "job.crashed", 312),
        ev(4, "job.claimed", 432, attempt=2),
        ev(5, "email.sent", 612, attempt=2),
        ev(6, "job.succeeded", 612, attempt=2),
    ]
    [result] = checker.check(["one_email"], ["1"], {"1": DONE}, history)
    assert not result["held"]
    cex = result["counterexample"]
    assert cex["text"] == (
        "job 1: two emails — attempt 1 sent at t = 312 s and was killed before its ack "
        "(t = 312 s); attempt 2 sent at t = 612 s and was acked (t = 612 s)"
    )
    assert cex["events"] == ["1002-0", "1005-0"] and cex["attempts"] == [1, 2]


def test_the_shortest_breaking_history_is_the_one_shown():
    long = [ev(i, "job.progress", i) for i in range(10)] + [ev(20, "email.sent", 50), ev(21, "email.sent", 60)]
    short = [ev(30, "email.sent", 70, job="2"), ev(31, "email.sent", 80, job="2")]
    [result] = checker.check(["one_email"], ["1", "2"], {"1": DONE, "2": DONE}, long + short)
    assert result["counterexample"]["job"] == "2" and result["counterexample"]["broken_in"] == 2


def test_one_email_holds_with_exactly_one_and_breaks_with_none():
    held = checker.check(["one_email"], ["1"], {"1": DONE}, [ev(1, "email.sent", 5)])
    none = checker.check(["one_email"], ["1"], {"1": DONE}, [])
    assert held[0]["held"] and not none[0]["held"]
    assert none[0]["counterexample"]["text"] == "job 1: no email — it was acked"


def test_overlapping_attempts_are_caught_and_sequential_ones_are_not():
    a1 = ev(1, "handler.transcoded", 600, began=0)
    a2 = ev(2, "handler.transcoded", 720, attempt=2, began=120)
    after = ev(3, "handler.transcoded", 1300, attempt=2, began=700)
    assert not checker.check(["one_at_a_time"], ["1"], {"1": DONE}, [a1, a2])[0]["held"]
    assert checker.check(["one_at_a_time"], ["1"], {"1": DONE}, [a1, after])[0]["held"]


def test_the_busiest_second_counts_retried_calls_only_and_names_its_limit():
    first = [ev(i, "storage.called", 60.2, job=str(i % 3 + 1), **{"try": 1}) for i in range(36)]
    retried = [ev(100 + i, "storage.called", 70.5, job=str(i % 3 + 1), **{"try": 2}) for i in range(13)]
    records = {j: DONE for j in "123"}
    ok = checker.check(["busiest_second:12"], list("123"), records, first + retried[:12])
    bad = checker.check(["busiest_second:12"], list("123"), records, first + retried)
    assert ok[0]["held"] and ok[0]["title"] == "Storage takes at most 12 retried calls in any second"
    assert not bad[0]["held"] and "13 retried calls in the second from t = 70 s" in bad[0]["counterexample"]["text"]


def test_the_dlq_takes_the_poison_and_nothing_else():
    pill = {"state": "dlq", "payload": json.dumps({"video_id": "challenge-1-2" + checker.POISON_SUFFIX})}
    swallowed = {"state": "done", "payload": pill["payload"]}
    dead = {"state": "dlq", "dlq_reason": "max_attempts", "payload": DONE["payload"]}
    assert checker.check(["dlq_only_poison"], ["1", "2"], {"1": DONE, "2": pill}, [])[0]["held"]
    assert not checker.check(["dlq_only_poison"], ["2"], {"2": swallowed}, [])[0]["held"]
    assert not checker.check(
        ["dlq_only_poison"], ["1"], {"1": dead}, [ev(1, "job.dead_lettered", 90, reason="max_attempts")]
    )[0]["held"]


def test_a_syntax_error_names_its_line_and_a_missing_handle_is_refused():
    assert code_error("def handle(ctx):\n    return (\n")["line"] == 2
    assert code_error("def other(ctx):\n    pass\n")["error"] == "no_handle"
    assert code_error("def handle(ctx):\n    pass\n") is None


def test_a_page_sees_the_starter_and_the_api_never_the_reference():
    for cid, spec in chapters.CHALLENGES.items():
        shown = describe(cid, spec)
        assert shown["starter"] == spec["starter"] and "ctx.kv.claim" in shown["api"]
        assert spec["reference"] not in json.dumps(shown)
        assert spec["starter_breaks"] in [i.partition(":")[0] for i in spec["invariants"]]


def test_every_tick_and_no_double_tick_read_the_tick_from_the_subject():
    mail = [
        ev(i, "email.sent", 10 * i, job=str(i), subject=f"Daily digest, tick {t}")
        for i, t in enumerate([1, 2, 2, 4], 1)
    ]
    records = {str(i): DONE for i in range(1, 5)}
    records["3"] = {**DONE, "payload": json.dumps({"input": {"tick": 2, "replica": "r3", "clock": 140.0}})}
    every, double = checker.check(["every_tick:4", "no_double_tick:4"], list(records), records, mail)
    assert every["counterexample"]["text"] == "tick 3: no email — no replica ran it"
    assert double["counterexample"]["text"] == (
        "tick 2: 2 emails — job 2 (attempt 1) at t = 20 s; "
        "job 3 (attempt 1, fired by replica r3 for tick 2) at t = 30 s"
    )
    stray = checker.check(
        ["no_double_tick:4"], ["1"], {"1": DONE}, [ev(1, "email.sent", 5, subject="Daily digest, tick 5")]
    )[0]
    assert "tick 5, which the schedule does not have" in stray["counterexample"]["text"]
