"""Chapter 7's readouts and replica clocks, checked against the lesson's figures."""

import chapters
from app.routes.schedule import by_strategy, margins, model
from core.engines.scheduler import clock_offset

LESSON = {
    **chapters.settings_for("ch7"),
    "scheduler_replicas": 10,
    "cron_lock_ttl": 120,
    "cron_task_s": 45,
    "clock_skew": 2,
    "leader_lease": 60,
}


def test_the_lock_margin_is_the_lessons_73_seconds():
    m = margins(LESSON)["lock"]
    assert m["margin_s"] == 73 and m["ok"]
    assert m["margin_s"] == chapters.derive()["ch7"]["lock_margin_after_skew_s"]


def test_a_30_second_ttl_has_no_margin_and_the_heartbeat_and_lease_keep_theirs():
    m = margins({**LESSON, "cron_lock_ttl": 30})
    assert m["lock"]["margin_s"] == 30 - 45 - 2 and not m["lock"]["ok"]
    assert m["heartbeat"]["margin_s"] == 30 - 10 - 2 and m["heartbeat"]["ok"]
    assert m["leader"]["margin_s"] == 60 - 20 - 2 and m["leader"]["ok"]


def test_the_model_beside_the_lab_uses_the_labs_settings():
    fig = model(LESSON)
    assert fig["no_lock_runs_per_tick"] == 10  # the lesson's 10 replicas, 10 runs
    assert fig["leader_failover_max_s"] == 60
    assert fig["missed_tick_after_s"] == 1.5 * LESSON["cron_interval"]


def test_replica_clocks_spread_evenly_over_the_skew():
    s = {"scheduler_replicas": 5, "clock_skew": 40}
    assert [clock_offset(s, f"r{k}") for k in range(1, 6)] == [0, 10, 20, 30, 40]
    assert clock_offset({"scheduler_replicas": 1, "clock_skew": 40}, "r1") == 0


def test_runs_per_tick_are_grouped_by_the_strategy_in_force_and_only_complete_ticks_count():
    rows = {
        1: {"runs": 4, "overlaps": 0, "emails": 0, "strategy": "none"},
        2: {"runs": 4, "overlaps": 1, "emails": 8, "strategy": "none"},
        3: {"runs": 1, "overlaps": 0, "emails": 0, "strategy": "lock"},
        4: {"runs": 0, "overlaps": 0, "emails": 0, "strategy": "lock"},
        5: {"runs": 2, "overlaps": 0, "emails": 0, "strategy": "lock"},
    }
    out = by_strategy(rows, last_complete=4)
    assert out["none"]["runs_per_tick"] == 4 and out["none"]["overlaps"] == 1
    assert out["lock"] == {
        "ticks": 2,
        "runs": 1,
        "min_runs": 0,
        "max_runs": 1,
        "duplicate_ticks": 0,
        "missed_ticks": 1,
        "overlaps": 0,
        "emails": 0,
        "runs_per_tick": 0.5,
    }
