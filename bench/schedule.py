"""schedule: runs per tick for each of chapter 7's run-once strategies, on real scheduler replicas.

Four replica processes run the same cron entry (tick every 60 s, runs take the lesson's 45 s p99)
for TICKS complete ticks per strategy, once with no fault and once with the same faults for every
strategy: on two ticks the run takes 100 s (longer than the interval, shorter than the 120 s
TTL), and in the middle the replica holding the lock or the leader lease is SIGKILLed. Runs
per tick, duplicates, overlaps, missed ticks and catch-ups are what the replicas recorded;
beside them the numbers model's runs per tick (N with no lock, 1 with one).
"""

from __future__ import annotations

import time

from bench.common import Bench, report, rnd

NAME = "schedule"
REPLICAS = 4
SPEED = 20.0  # the widget's default clock: a tick is 3 real seconds
TICKS = 12
SLOW_TICKS = (2, 8)  # ticks after the count starts whose run takes SLOW_S
SLOW_S = 100.0
KILL_TICK = 5
BASE = {
    "scheduler_replicas": REPLICAS,
    "cron_interval": 60,
    "cron_task_s": 45,
    "respawn_delay": 600,
    "cron_shard": True,
    "shard_buckets": 12,
    "cron_users": 120,
}
SCENARIOS = (
    ("no lock", {"cron_strategy": "none"}, None),
    ("SET NX EX lock, TTL 120 s", {"cron_strategy": "lock", "cron_lock_ttl": 120}, "holder"),
    ("SET NX EX lock, TTL 30 s", {"cron_strategy": "lock", "cron_lock_ttl": 30}, "holder"),
    ("lock + heartbeat, TTL 30 s", {"cron_strategy": "heartbeat", "cron_lock_ttl": 30}, "holder"),
    ("leader lease 60 s", {"cron_strategy": "leader", "leader_lease": 60}, "leader"),
)


def schedule(b: Bench, lab: dict) -> dict:
    return b.call("GET", f"/api/labs/{lab['lab_id']}/schedule", token=lab["token"])


def control(b: Bench, lab: dict, **body) -> dict:
    return b.call("POST", f"/api/labs/{lab['lab_id']}/schedule", body, lab["token"], expect=(200, 409))


def run_scenario(b: Bench, label: str, settings: dict, kill: str | None, faults: bool) -> dict:
    lab = b.lab("ch7", SPEED, **BASE, **settings)
    deadline = time.monotonic() + 60
    while not (
        len((rep := schedule(b, lab))["replicas"]) == REPLICAS and all(x["state"] == "running" for x in rep["replicas"])
    ):
        if time.monotonic() > deadline:
            raise TimeoutError("replicas did not start")
        time.sleep(0.1)
    since = control(b, lab, action="reset")["since_tick"]
    done: set[str] = set()
    while (rep := schedule(b, lab))["last_complete_tick"] < since + TICKS - 1:
        k = rep["tick"] - since
        for at in SLOW_TICKS if faults else ():
            if k == at and f"slow{at}" not in done:
                done.add(f"slow{at}")
                control(b, lab, action="slow", duration_s=SLOW_S)
        if faults and kill and k >= KILL_TICK and "kill" not in done:
            if "pid" in control(b, lab, action="kill", replica=kill):  # a 409 while nobody holds it: again
                done.add("kill")
        time.sleep(0.05)
    ticks = [t for t in rep["ticks"] if since <= t["tick"] < since + TICKS]
    runs = [t["runs"] for t in ticks]
    evs = b.events(lab)
    b.delete_lab(lab)
    return {
        "strategy": label,
        "faults": "slow runs + kill" if faults else "none",
        "ticks": len(ticks),
        "runs": sum(runs),
        "runs_per_tick": rnd(sum(runs) / len(ticks), 3),
        "min_runs": min(runs),
        "max_runs": max(runs),
        "ticks_over_1": sum(n > 1 for n in runs),
        "missed_ticks": sum(n == 0 for n in runs),
        "overlaps": sum(t["overlaps"] for t in ticks),
        "catch_ups": sum(t["catch_up"] for t in ticks),
        "emails": rep["totals"]["emails"],
        "max_emails_per_user": rep["totals"]["max_emails_per_user"],
        "releases_refused": sum(e["type"] == "cron.release_refused" for e in evs),
        "leader_elections": sum(e["type"] == "leader.elected" for e in evs),
        "model_runs_per_tick": REPLICAS if settings["cron_strategy"] == "none" else 1,
    }


def run(b: Bench) -> dict:
    rows = [run_scenario(b, *s, faults=f) for f in (False, True) for s in SCENARIOS]
    clean = [r for r in rows if r["faults"] == "none"]
    locked = [r for r in clean if r["strategy"] != "no lock"]
    return report(
        NAME,
        "Runs per tick for each run-once strategy (4 real scheduler replicas)",
        [
            "strategy",
            "faults",
            "ticks",
            "runs",
            "runs_per_tick",
            "min_runs",
            "max_runs",
            "ticks_over_1",
            "missed_ticks",
            "overlaps",
            "catch_ups",
            "emails",
            "max_emails_per_user",
            "releases_refused",
            "leader_elections",
            "model_runs_per_tick",
        ],
        rows,
        {
            "label": "runs per tick, no lock ÷ best lock",
            "value": rnd(clean[0]["runs_per_tick"] / min(r["runs_per_tick"] for r in locked), 2),
            "baseline": f"{REPLICAS} (model)",
        },
        {
            "replicas": REPLICAS,
            "speed": SPEED,
            "ticks": TICKS,
            "interval_s": 60,
            "task_s": 45,
            "slow_ticks": SLOW_TICKS,
            "slow_s": SLOW_S,
            "kill_tick": KILL_TICK,
        },
        notes=[
            "slow runs take 100 s: past the next tick (60 s) and past a 30 s TTL, inside 120 s; the short TTL "
            "lets the next tick's replica in while the slow run still runs (an overlap), the others skip that "
            "tick and the run after catches it up",
            "the kill is a SIGKILL of the lock holder or leader: no finally block, so its lock or lease stays "
            "until it expires; missed ticks while it does are caught up by the next run",
        ],
    )
