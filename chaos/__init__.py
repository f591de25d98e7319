"""Chaos drills: break one part of the real stack on purpose and check an invariant that must survive it.

`python -m chaos` runs every drill, `python -m chaos NAME …` some of them (also `python3 lab.py chaos`).
Each drill starts its own private stack (valkey, supervisor, gunicorn on free 127.0.0.1 ports), states
its invariant, prints PASS/FAIL with its counts, writes `var/chaos/NAME.json` and stops everything it
started. The runner exits non-zero if any drill fails.
"""

DRILLS = (
    "kill_storm",
    "redis_restart",
    "web_restart",
    "supervisor_killed",
    "slow_consumer",
    "dequeue_crash",
    "self_heal",
    "flood",
    "pool_host_killed",
    "conn_flood",
)
