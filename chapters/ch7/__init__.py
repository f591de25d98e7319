"""Chapter 7, Scheduled & Recurring Work: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import GAP, LESSON_INPUTS, PER_TICK, SHOWS_RETRIES, settings_of
from core.lesson import Claim
from core.numbers import SECONDS_PER_DAY, Inputs
from core.series import Chart, Lane, Mark, Panel, Point, Span, g, timeline_table

SLUG = "scheduled-and-recurring-work"  # the page is /chapters/7-scheduled-and-recurring-work
ADDON = "schedule"  # its lab panel: templates/_lab_schedule.html, static/js/lab-schedule.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch7": {
        "shows": SHOWS_RETRIES,
        "title": "Scheduled jobs: one cron entry, four replicas",
        "settings": {
            "workers": 0,
            "scheduler_replicas": 4,
            "cron_strategy": "none",
            # replicas do not all fire on the tick: the latest is late enough to find a
            # 30 s lock expired while a 45 s (p99) run still holds it, as in the lesson
            "cron_task_s": LESSON_INPUTS.task_p99_s,
            "cron_lock_ttl": LESSON_INPUTS.lock_ttl_s,
            "cron_late": LESSON_INPUTS.late_replica_s,
            # ticks far enough apart that the late replica's run (36–81 s) is over, and its
            # lock gone, before the next tick: every tick then starts from the same state
            "cron_interval": 120,
            # a killed leader stays dead past its lease, so a live follower takes over
            "respawn_delay": 150,
        },
        "pipeline": False,
        "controls": [
            "scheduler_replicas",
            "cron_strategy",
            "cron_lock_ttl",
            "cron_task_s",
            "cron_interval",
            "cron_late",
            "clock_skew",
            "cron_release",
            "leader_lease",
            "cron_idempotent",
            "cron_catch_up",
            "cron_shard",
            "shard_buckets",
            "respawn_delay",
            "clock",
        ],
    },
}

# The lab panel's cron-strategy buttons: settings each button applies.
# The lesson's bug and its two fixes: a lock shorter than the p99 run, a sized lock, a heartbeat lock.
CRON_STRATEGIES: dict[str, dict[str, Any]] = {
    # sharded, so every tick mails its bucket of users: with no lock each replica mails them again (unsharded,
    # only the day's first tick mails anyone, and two ticks would show no duplicate email at all)
    "none": {"label": "No lock", "settings": {"cron_strategy": "none", "cron_shard": True}},
    "lock": {
        "label": f"Lock, TTL {LESSON_INPUTS.lock_ttl_s:g} s",
        "settings": {"cron_strategy": "lock", "cron_lock_ttl": LESSON_INPUTS.lock_ttl_s},
    },
    "short": {
        "label": f"Lock, TTL {LESSON_INPUTS.short_lock_ttl_s:g} s",
        "settings": {"cron_strategy": "lock", "cron_lock_ttl": LESSON_INPUTS.short_lock_ttl_s},
    },
    "heartbeat": {
        "label": "Lock + heartbeat",
        "settings": {"cron_strategy": "heartbeat", "cron_lock_ttl": LESSON_INPUTS.short_lock_ttl_s},
    },
    "leader": {
        "label": "Leader lease",
        "settings": {"cron_strategy": "leader", "leader_lease": LESSON_INPUTS.leader_lease_s},
    },
}

DOWNTIME_DRILL_S = 330  # chapter 7's "All replicas down" button: long enough to miss more than two ticks


def lab_model() -> dict[str, Any]:
    """The numbers model's chapter 7 figures for the ch7 lab as it starts (its replicas, task, interval,
    late replica) with the strategy buttons' TTLs: what the page says the lab will show, and what the
    conformance suite checks the lab against."""
    s = settings_of(PRESETS["ch7"])
    inputs = Inputs(
        scheduler_replicas=int(s["scheduler_replicas"]),
        cron_interval_s=float(s["cron_interval"]),
        task_p99_s=float(s["cron_task_s"]),
        late_replica_s=float(s["cron_late"]),
        short_lock_ttl_s=float(CRON_STRATEGIES["short"]["settings"]["cron_lock_ttl"]),
        lock_ttl_s=float(CRON_STRATEGIES["lock"]["settings"]["cron_lock_ttl"]),
        clock_skew_s=float(s["clock_skew"]),
        leader_lease_s=float(s["leader_lease"]),
    )
    from chapters import derive  # the collector: chapter 7's figures need chapters 1 and 5's

    model = derive(inputs)["ch7"]
    model["downtime_drill_s"] = DOWNTIME_DRILL_S
    model["downtime_drill_ticks"] = DOWNTIME_DRILL_S / inputs.cron_interval_s
    return model


PANEL = {"cron_strategies": CRON_STRATEGIES}  # what the lab panel's template reads


def lab_facts() -> dict[str, Any]:
    """What the chapter's text says about its lab (`lab.ch7_model` in chapter.md)."""
    return {"ch7_model": lab_model(), "cron_strategies": CRON_STRATEGIES}


STEPS: dict[str, list[dict[str, Any]]] = {
    "ch7": [
        {
            "claim": "ch7.no_lock",
            "title": "No lock",
            "do": [{"click": "ch7-scenario-none"}],
            "predict": {
                **PER_TICK,
                "id": "ch7-step-none",
                "question": "With no lock, how many runs will one tick produce?",
            },
            "moment": "cron.overlap",
            "look": "ch7-counts-box",
            "says": "One tick, {measured} runs: with no lock every replica that fires runs the task.",
        },
        {
            "claim": "ch7.short_ttl",
            "title": "A lock shorter than the run",
            "do": [{"click": "ch7-scenario-short"}],
            "predict": {
                **PER_TICK,
                "id": "ch7-step-short",
                "question": "The lock expires before the run ends, and one replica fires late. How many runs per tick?",
            },
            "moment": "cron.overlap",
            "look": "ch7-counts-box",
            "says": "{measured} runs in one tick: the late replica found the lock expired under a run still going "
            "and ran the task again beside it.",
        },
        {
            "claim": "ch7.fixes",
            "title": "One click fixes it",
            "do": [{"click": "ch7-scenario-lock"}],
            "predict": {
                **PER_TICK,
                "id": "ch7-step-lock",
                "question": "A lock whose TTL outlasts the run: how many runs per tick now?",
            },
            "moment": "cron.skipped",
            "look": "ch7-counts-box",
            "says": "{measured} run per tick: the late replica found the lock held and skipped.",
        },
        {
            "claim": "ch7.leader",
            "title": "Kill the leader",
            # as its conformance test has it: the killed leader stays dead, so a follower takes over (not its own
            # restart, which would re-take the lease it still holds); the kill waits for a leader to exist
            "do": [
                {"settings": {"respawn_delay": 3600}},
                {"click": "ch7-scenario-leader"},
                {"click": "ch7-kill-leader"},
            ],
            "predict": {
                **GAP,
                "id": "ch7-step-leader",
                "measure": "gap:replica.killed:leader.elected",
                "question": "You kill the leader as soon as it is elected. For how many simulated seconds "
                "does the schedule have no leader?",
            },
            "moment": "leader.elected",
            "moment_after": "replica.killed",
            "look": "ch7-replicas-box",
            "says": "No leader for {measured} s after the kill: the followers waited out what was left of the dead "
            "leader's {leader_lease} s lease (the lesson's bound), then the next one to poll took it.",
        },
        {
            "claim": "ch7.catch_up",
            "title": "All replicas down",
            "do": [
                {"click": "ch7-scenario-lock"},
                {
                    "settings": {
                        "cron_shard": True,
                        "cron_catch_up": True,
                        "respawn_delay": settings_of(PRESETS["ch7"])["respawn_delay"],
                    }
                },
                {"click": "ch7-down"},
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 20,
                "unit": "runs",
                "id": "ch7-step-catch-up",
                "measure": "count:cron.catch_up:scheduler.up",
                "question": f"Every replica is down for {DOWNTIME_DRILL_S:g} s. When they come back, how "
                "many catch-up runs mail the missed buckets?",
            },
            "moment": "cron.catch_up",
            "moment_after": "scheduler.up",
            "look": "ch7-counts-box",
            "says": "{measured} catch-up run at t = {moment_t} s: the first replica back took the lock and mailed "
            "the missed buckets; the others found the tick already run.",
        },
    ],
}

# ---- the challenge: the learner writes the scheduled task (core/challenges/, workers/challenge.py) ----

_REFERENCE = """\
def handle(ctx):
    tick = ctx.job.input["tick"]  # the tick this replica fired
    for t in range(1, tick + 1):  # this tick, and any earlier one nobody ran (catch-up)
        if ctx.kv.get(f"emailed:{t}"):
            continue
        token = ctx.kv.claim(f"tick:{t}", ttl=60)  # the lock: one replica runs it; a dead holder's lapses
        if token is None:
            continue  # another replica is running it
        if ctx.kv.cas(f"emailed:{t}", None, "1"):
            ctx.email.send(f"Daily digest, tick {t}")
        ctx.kv.release(f"tick:{t}", token)
"""

CHALLENGES: dict[str, dict[str, Any]] = {
    "once-per-tick": {
        "chapter": 7,
        "title": "Once per tick",
        "task": "The lab's three scheduler replicas each enqueue this task at every tick of their own clocks "
        "(replica 3's runs 20 s ahead, replica 2's 10 s). Write it so that each of ticks 1–4 sends its digest "
        "exactly once: replicas 2 and 3 are down for tick 2, the worker running tick 2 is killed while it "
        "holds the lock, and every replica is down for tick 3.",
        "section": "a-lock-makes-the-task-a-singleton",
        "hint": "A lock per tick makes one replica run it; its TTL frees a dead holder's; and the tick that never "
        "fired is run by the next one (The other failure: the tick that never fired).",
        "settings": {
            "workers": 3,
            "scheduler_replicas": 3,
            "cron_strategy": "none",  # no lock of the scheduler's own: the task is the learner's
            "cron_interval": 60,
            "cron_late": 0,
            "clock_skew": 20,
            "guard": "off",
            "vt_seconds": 120,
            "heartbeat": False,
            "ack_mode": "late",
            "max_receives": 6,
            "max_attempts": 3,
            "retry_policy": "fixed",
            "retry_base": 10,
            "notify_guard": False,
        },
        # the replicas fire the jobs (core/challenges/run.py `fire`); each replica's window down, in simulated
        # seconds from tick 1 on replica 1's clock (the fleet follows them: workers/engines/fleet.py)
        "schedule": {
            "ticks": 4,
            "duration_s": 20,
            "down": {"r2": [20, 150], "r3": [20, 150], "r1": [90, 150]},
        },
        "faults": [  # whichever attempt first takes tick 2's lock is killed holding it
            {"key": "tick:2", "op": "kv.claim", "when": "after", "do": "crash"},
        ],
        "invariants": ["every_tick:4", "no_double_tick:4"],
        "starter_breaks": "no_double_tick",
        "starter": """\
def handle(ctx):
    tick = ctx.job.input["tick"]
    ctx.email.send(f"Daily digest, tick {tick}")
""",
        "reference": _REFERENCE,
        "mutants": {
            "a lock that never lapses": (_REFERENCE.replace("ttl=60", "ttl=None"), "every_tick"),
            "no catch-up": (_REFERENCE.replace("range(1, tick + 1)", "[tick]"), "every_tick"),
            # the flag's lines gone: the lock alone, let go after each run, lets every later run mail it again
            "a lock and no flag": (
                _REFERENCE.replace('        if ctx.kv.get(f"emailed:{t}"):\n            continue\n', "").replace(
                    'if ctx.kv.cas(f"emailed:{t}", None, "1"):', "if True:"
                ),
                "no_double_tick",
            ),
            # the lock's three lines gone, and the flag never set
            "neither lock nor flag": (
                "\n".join(
                    line for line in _REFERENCE.splitlines() if "token" not in line and "another replica" not in line
                ).replace('if ctx.kv.cas(f"emailed:{t}", None, "1"):', "if True:")
                + "\n",
                "no_double_tick",
            ),
        },
    },
}


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch7.no_lock",
        7,
        "Try this 1",
        "No lock: every replica runs every tick",
        "test_try1_without_a_lock_every_replica_runs_every_tick",
    ),
    Claim(
        "ch7.short_ttl",
        7,
        "Try this 2 / Check yourself 1",
        "Lock TTL 30 s, 45 s (p99) run, a late replica: "
        "the task runs twice per tick, overlapping, and the first run's release is refused",
        "test_try2_check1_a_30s_lock_under_a_45s_run_lets_the_late_replica_run_it_again",
    ),
    Claim(
        "ch7.fixes",
        7,
        "Try this 3",
        "One click fixes it: TTL 120 s, or a heartbeat-extended 30 s lock, runs once per tick",
        "test_try3_ttl_120_or_a_heartbeat_lock_runs_once_per_tick",
    ),
    Claim(
        "ch7.plain_del",
        7,
        "Check yourself 2",
        "A plain DEL after expiry frees another replica's lock",
        "test_check2_a_plain_delete_frees_the_next_holders_lock",
    ),
    Claim(
        "ch7.skew_margin",
        7,
        "Check yourself 3",
        "The lock's margin after skew is TTL − p99 − skew",
        "test_check3_the_lock_margin_after_skew_is_ttl_minus_p99_minus_skew",
        status="model",
    ),
    Claim(
        "ch7.leader",
        7,
        "Try this 4 / Check yourself 4",
        "A killed leader is replaced within one lease",
        "test_try4_check4_a_killed_leader_is_replaced_within_its_lease",
    ),
    Claim(
        "ch7.catch_up",
        7,
        "Try this 5",
        "After every replica was down, one catch-up run mails the missed "
        "buckets; it mails a cut run's bucket again (a user mailed twice) unless the task is idempotent",
        "test_try5_after_downtime_one_catch_up_run_mails_the_cut_runs_bucket_again_unless_idempotent",
    ),
    Claim(
        "ch7.buckets",
        7,
        "Check yourself 5",
        "Sustained load does not depend on the bucket count",
        "test_check5_sustained_load_does_not_depend_on_bucket_count",
        status="model",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def _lock_timeline(inputs: Inputs) -> list[dict[str, Any]]:
    ttl, p99 = inputs.short_lock_ttl_s, inputs.task_p99_s
    rows = [{"t_s": 0.0, "actor": "Replica A", "event": f"acquires the lock (TTL {ttl:g} s), starts the task"}]
    if ttl >= p99:
        rows.append({"t_s": p99, "actor": "Replica A", "event": "finishes and releases the lock"})
        return rows
    rows += [
        {"t_s": ttl, "actor": "Redis", "event": "lock expires while A is still running"},
        {"t_s": ttl, "actor": "Replica B", "event": "acquires the now-free lock and runs the same task"},
        {"t_s": p99, "actor": "Replica A", "event": "finishes and deletes the lock — which is now B's"},
        {"t_s": ttl + p99, "actor": "Replica B", "event": "finishes: the task ran twice"},
    ]
    return rows


def _own(inputs: Inputs) -> dict[str, Any]:
    r, p99 = inputs.scheduler_replicas, inputs.task_p99_s
    ticks_day = SECONDS_PER_DAY / inputs.cron_interval_s
    raw_margin = inputs.lock_ttl_s - p99
    per_bucket = inputs.users / inputs.shard_buckets
    bucket_s = SECONDS_PER_DAY / inputs.shard_buckets
    short_overlap = max(0.0, p99 - inputs.short_lock_ttl_s)
    short_runs = min(r, math.ceil(p99 / inputs.short_lock_ttl_s - 1e-9))
    bucket_rows = [
        {
            "buckets": b,
            "bucket_s": SECONDS_PER_DAY / b,
            "users_per_bucket": inputs.users / b,
            "ticks_per_day": b,
            "rate_per_s": inputs.users / b / (SECONDS_PER_DAY / b),
        }
        for b in inputs.shard_bucket_options
    ]
    return {
        "scheduler_replicas": r,
        "cron_interval_s": inputs.cron_interval_s,
        "ticks_per_day": ticks_day,
        "no_lock_runs_per_tick": r,
        "no_lock_emails_per_user": r,
        "no_lock_runs_per_day": r * ticks_day,
        "no_lock_wasted_runs_per_day": (r - 1) * ticks_day,
        "replicas_skipping_with_lock": r - 1,
        "task_p99_s": p99,
        "short_lock_ttl_s": inputs.short_lock_ttl_s,
        "short_ttl_overlap_s": short_overlap,
        "short_ttl_max_concurrent_runs": short_runs,
        "lock_ttl_s": inputs.lock_ttl_s,
        "lock_ttl_over_p99_x": inputs.lock_ttl_s / p99,
        "lock_margin_s": raw_margin,
        "clock_skew_s": inputs.clock_skew_s,
        "lock_margin_after_skew_s": raw_margin - inputs.clock_skew_s,
        "leader_lease_s": inputs.leader_lease_s,
        "leader_failover_max_s": inputs.leader_lease_s,
        "users": inputs.users,
        "shard_buckets": inputs.shard_buckets,
        "bucket_s": bucket_s,
        "users_per_bucket": per_bucket,
        "bucket_jobs_per_s": per_bucket / bucket_s,
        "daily_average_jobs_per_s": inputs.users / SECONDS_PER_DAY,
        "unsharded_burst_jobs": inputs.users,
        "bucket_count_table": bucket_rows,
        "missed_tick_after_s": inputs.cron_interval_s * inputs.catchup_factor,
        "late_replica_s": inputs.late_replica_s,
        "late_replica_gets_in": inputs.short_lock_ttl_s < inputs.late_replica_s < p99,
        "late_overlap_s": max(0.0, p99 - inputs.late_replica_s)
        if inputs.short_lock_ttl_s < inputs.late_replica_s
        else 0.0,
        "lock_timeline": _lock_timeline(inputs),
        "lock_strategies": [
            {
                "strategy": "no lock",
                "runs_per_tick": r,
                "margin_s": None,
                "failure": f"{r} runs and {r} emails per tick",
            },
            {
                "strategy": f"lock, TTL {inputs.short_lock_ttl_s:g} s",
                "runs_per_tick": short_runs,
                "margin_s": inputs.short_lock_ttl_s - p99,
                "failure": f"lock expires {short_overlap:g} s before the p99 task ends"
                if short_overlap
                else "none at p99",
            },
            {
                "strategy": f"lock, TTL {inputs.lock_ttl_s:g} s",
                "runs_per_tick": 1 if raw_margin > 0 else 2,
                "margin_s": raw_margin - inputs.clock_skew_s,
                "failure": "clock skew or a partition eats the margin",
            },
            {
                "strategy": "lock + heartbeat extension",
                "runs_per_tick": 1,
                "margin_s": None,
                "failure": "lock tracks the real duration; holder crash frees it after one TTL",
            },
            {
                "strategy": f"leader lease {inputs.leader_lease_s:g} s",
                "runs_per_tick": 1,
                "margin_s": None,
                "failure": f"up to {inputs.leader_lease_s:g} s with no leader during failover",
            },
            {
                "strategy": "idempotent task (backstop)",
                "runs_per_tick": None,
                "margin_s": None,
                "failure": "a double run is harmless: its UPDATEs match zero rows",
            },
        ],
        "timeout_reference": [
            {"timeout": "visibility timeout", "chapter": 1, "worst_case_s": None, "value_s": None},
            {"timeout": "dedup window", "chapter": 5, "worst_case_s": None, "value_s": None},
            {"timeout": "lock TTL", "chapter": 7, "worst_case_s": p99, "value_s": inputs.lock_ttl_s},
        ],
    }


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Chapter 7's figures; its timeout reference reads chapter 1's and chapter 5's worst cases and values."""
    c7 = _own(inputs)
    rows = c7["timeout_reference"]
    rows[0].update(worst_case_s=fig["ch1"]["transcode_p99_s"], value_s=fig["ch1"]["fixed_vt_s"])
    rows[1].update(worst_case_s=fig["ch5"]["worst_case_duplicate_gap_s"], value_s=fig["ch5"]["dedup_window_s"])
    for row in rows:
        row["margin_s"] = row["value_s"] - row["worst_case_s"]
    return c7


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another: so the page does no arithmetic."""
    c7 = fig["ch7"]
    c7["cron_interval_min"] = c7["cron_interval_s"] / 60
    for row in c7["lock_strategies"]:
        m = row["margin_s"]
        row["shortfall_s"] = -m if m is not None and m < 0 else None


# ---- charts (core/series.py's shapes; chapters.chart_series gathers them) ----


_LETTERS = "ABCDEFGHIJ"


def _lock_panel(ttl: float, p99: float, replicas: int, label: str) -> Panel:
    if ttl >= p99:
        lanes = (
            Lane(
                "lock key",
                (
                    Span(0, p99, "held by A", "solid", "muted"),
                    Span(p99, ttl, "unused TTL (only for a crash)", "dashed", "muted"),
                ),
            ),
            Lane("replica A runs", (Span(0, p99, "task"),), note=f"done at {g(p99)} s, releases the lock"),
            Lane("replica B", events=(Point(0, "skips", "✓ finds the lock held and skips the tick"),)),
        )
        return Panel(label, lanes, (Mark(ttl, f"TTL ends ({g(ttl)} s)"),))
    runs = min(replicas, math.ceil(p99 / ttl - 1e-9))
    shown = min(runs, 4)
    lock = tuple(
        Span(
            i * ttl,
            min((i + 1) * ttl, p99) if i == shown - 1 else (i + 1) * ttl,
            f"held by {_LETTERS[i]}",
            "solid",
            "muted",
            _LETTERS[i],
        )
        for i in range(shown)
    )
    lanes = (Lane("lock key", lock),) + tuple(
        Lane(
            f"replica {_LETTERS[i]} runs",
            (
                Span(
                    i * ttl,
                    i * ttl + p99,
                    "task" if i == 0 else "duplicate",
                    "solid" if i == 0 else "hatched",
                    "accent" if i == 0 else "accent-2",
                ),
            ),
        )
        for i in range(shown)
    )
    overlap_end = (shown - 2) * ttl + p99
    copies = "two or more copies" if shown > 2 else "two copies"
    marks = (
        Mark(ttl, f"TTL ends ({g(ttl)} s)"),
        Mark(
            ttl,
            f"↑ {copies} running: {g(overlap_end - ttl)} s"
            + (f" (+{runs - shown} more replicas)" if runs > shown else ""),
            end=overlap_end,
            tone="bad",
        ),
    )
    return Panel(label, lanes, marks)


def lock_timeline(inputs: Inputs, fig: dict) -> Chart:
    c7 = fig["ch7"]
    p99, short, sized, replicas = c7["task_p99_s"], c7["short_lock_ttl_s"], c7["lock_ttl_s"], c7["scheduler_replicas"]
    panels = (
        _lock_panel(short, p99, replicas, f"TTL {g(short)} s " + ("(too short)" if short < p99 else "(the short TTL)")),
        _lock_panel(sized, p99, replicas, f"TTL {g(sized)} s " + ("(sized)" if sized >= p99 else "(also too short)")),
    )
    parts = []
    for pn, ttl in zip(panels, (short, sized), strict=True):
        if ttl < p99:
            runs = min(replicas, math.ceil(p99 / ttl - 1e-9))
            end = (min(runs, 4) - 2) * ttl + p99
            parts.append(
                f"{pn.label}: the lock expires at {g(ttl)} s while replica A is still running; "
                f"{runs} copies of the task run, overlapping from {g(ttl)} s to {g(end)} s."
            )
        else:
            parts.append(
                f"{pn.label}: replica A finishes at {g(p99)} s and releases the lock, "
                f"{g(ttl - p99)} s before the TTL would have expired; other replicas skip."
            )
    x_max = max(max((s.end for ln in pn.lanes for s in ln.spans), default=0) for pn in panels)
    return Chart(
        "lock_timeline",
        "timeline",
        "seconds since the tick",
        panels=panels,
        summary=" ".join(parts),
        x_min=0,
        x_max=max(x_max, p99, sized if sized >= p99 else 0),
        x_ticks="time",
        table=timeline_table(panels),
    )


CHARTS = {"lock_timeline": lock_timeline}
