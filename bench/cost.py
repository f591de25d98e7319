"""cost: what one lab costs the server and the supervisor, idle and busy, against issue 30's goals.

Four windows of COST_SECONDS (20) real seconds on the bench stack, each after a short settle:
- floor: no lab at all (the web tier, the pool host's heartbeat, whatever runs with nothing to do);
- idle:  COST_IDLE_LABS (12) labs of the chapter 1 preset, nothing running, no page open;
- busy:  one lab (chapter 1, 20×, 3 workers, heartbeat on) kept at 3 jobs of 120 simulated s in flight, as
         `bench classroom` loads each of its labs: enqueued through the API (those clicks are counted), its
         states read straight from the server on the driver's own connection (DRIVER: the count leaves its
         commands out). Twice: with the lesson's heartbeat (every 60 simulated s, extending by 180: the
         defaults, and the chapter 1 heartbeat preset's), and with one six times as often (every 10 s,
         extending by 30), the figure earlier stops reported.
Each window reads the server's own counters (INFO commandstats: calls by command, and
total_commands_processed), the supervisor process's own CPU (without its reaped children: the workers' CPU is
the jobs', not the loop's) and the server process's own CPU, each from the kernel's per-process CPU clock, to
the nanosecond (`core.procs.run_s`), where /proc's stat counts in 10 ms ticks (7 % of a busy lab's server
CPU over a 60 s window). A lab's figure is its window minus the floor, over its labs; the server's CPU per busy
lab-second gives the busy labs one server core carries (1 / that).
Goals (issue 30): an idle lab ≤ 5 server commands/s and ≤ 0.3 % of a core in the supervisor; a busy lab
≤ 80 server commands/s, and one server core carrying ≥ 300 busy labs. Each busy row is checked against them.
"""

from __future__ import annotations

import os
import time

from bench.common import DRIVER, Bench, report, rnd, wait
from core.procs import run_s

NAME = "cost"
SECONDS = float(os.environ.get("COST_SECONDS", "20"))
IDLE_LABS = int(os.environ.get("COST_IDLE_LABS", "12"))
SETTLE_S = 3.0  # real seconds after the labs are up before a window opens (workers registering, first passes)
GOAL = {"idle_cmds_s": 5.0, "idle_cpu_pct": 0.3, "busy_cmds_s": 80.0, "busy_labs_per_core": 300}
TOP = 8  # commands listed per row
BUSY = (  # (row, heartbeat settings): the lesson's beat, then one six times as often
    (
        "busy lab (3 in flight, 20×, the lesson's heartbeat: every 60 s, +180 s)",
        {"vt_seconds": 180, "heartbeat_interval": 60, "heartbeat_extend": 180},
    ),
    (
        "busy lab (3 in flight, 20×, heartbeat every 10 s, +30 s)",
        {"vt_seconds": 60, "heartbeat_interval": 10, "heartbeat_extend": 30},
    ),
)


def _counters(b: Bench) -> tuple[dict[str, int], int, float, float]:
    stats = b.r.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    server = b.stack.server_pid
    total = int(b.r.info("stats")["total_commands_processed"])
    mine = sum(int(c["tot-cmds"]) for c in b.r.client_list() if c.get("name") == DRIVER)  # these reads included
    return calls, total - mine, run_s(b.stack.supervisor.pid), run_s(server) if server else 0.0


def window(b: Bench, seconds: float, during=None) -> dict:
    """Server commands/s (total and by command), supervisor CPU (% of a core) and server CPU (ms per second)
    over `seconds`."""
    calls0, total0, cpu0, srv0 = _counters(b)
    t0 = time.time()
    while time.time() - t0 < seconds:
        if during:
            during()
        time.sleep(0.5)
    calls1, total1, cpu1, srv1 = _counters(b)
    elapsed = time.time() - t0
    by_cmd = {c: (n - calls0.get(c, 0)) / elapsed for c, n in calls1.items() if n > calls0.get(c, 0)}
    return {
        "cmds_s": (total1 - total0) / elapsed,
        "by_cmd": by_cmd,
        "cpu_pct": 100 * (cpu1 - cpu0) / elapsed,
        "server_ms_s": 1000 * (srv1 - srv0) / elapsed,
    }


def per_lab(w: dict, floor: dict, labs: int) -> dict:
    by_cmd = {c: (n - floor["by_cmd"].get(c, 0)) / labs for c, n in w["by_cmd"].items()}
    top = sorted(((c, n) for c, n in by_cmd.items() if n >= 0.05), key=lambda x: -x[1])[:TOP]
    return {
        "cmds_s": rnd((w["cmds_s"] - floor["cmds_s"]) / labs, 1),
        "cpu_pct": rnd((w["cpu_pct"] - floor["cpu_pct"]) / labs, 2),
        "server_ms_per_lab_s": rnd((w["server_ms_s"] - floor["server_ms_s"]) / labs, 2),
        "by_cmd": ", ".join(f"{c} {n:.1f}" for c, n in top),
    }


def busy_window(b: Bench, beat: dict) -> dict:
    """One busy lab with heartbeat settings `beat`, kept at 3 jobs in flight for a window; deleted after."""
    busy = b.lab("ch1", speed=20, workers=3, heartbeat=True, max_attempts=20, respawn_delay=20, **beat)
    b.workers_ready(busy, 3, timeout=120)

    def fill() -> None:
        s = b.states(busy)
        for _ in range(max(0, 3 - s.get("running", 0) - s.get("queued", 0))):
            b.enqueue(busy, {"sample": "carphone_pristine", "duration_s": 120})

    fill()
    wait(lambda: b.states(busy).get("running", 0) >= 3, 60, "3 jobs never ran at once")
    w = window(b, SECONDS, during=fill)
    b.delete_lab(busy)
    time.sleep(SETTLE_S)
    return w


def run(b: Bench) -> dict:
    b.delete_labs()
    time.sleep(SETTLE_S)
    floor = window(b, SECONDS)
    idle = [b.lab("ch1", speed=20) for _ in range(IDLE_LABS)]
    for lab in idle:
        b.workers_ready(lab, 1, timeout=120)
    time.sleep(SETTLE_S)
    idle_w = window(b, SECONDS)
    for lab in idle:
        b.delete_lab(lab)
    busy_ws = [(row, busy_window(b, beat)) for row, beat in BUSY]
    top = sorted(floor["by_cmd"].items(), key=lambda x: -x[1])[:TOP]
    rows = [
        {
            "row": "floor (no lab)",
            "labs": 0,
            "cmds_s": rnd(floor["cmds_s"], 1),
            "cpu_pct": rnd(floor["cpu_pct"], 2),
            "server_ms_per_lab_s": rnd(floor["server_ms_s"], 2),
            "by_cmd": ", ".join(f"{c} {n:.1f}" for c, n in top),
        },
        {
            "row": "idle lab",
            "labs": IDLE_LABS,
            **per_lab(idle_w, floor, IDLE_LABS),
            "goal": f"≤ {GOAL['idle_cmds_s']:g} cmds/s, ≤ {GOAL['idle_cpu_pct']:g} %",
        },
    ]
    ok = rows[1]["cmds_s"] <= GOAL["idle_cmds_s"] and rows[1]["cpu_pct"] <= GOAL["idle_cpu_pct"]
    for row, w in busy_ws:
        busy = {
            "row": row,
            "labs": 1,
            **per_lab(w, floor, 1),
            "goal": f"≤ {GOAL['busy_cmds_s']:g} cmds/s, ≥ {GOAL['busy_labs_per_core']:g} per server core",
        }
        ms = busy["server_ms_per_lab_s"]
        per_core = 1000 / ms if ms and ms > 0 else None
        busy["labs_per_server_core"] = rnd(per_core, 0)
        busy["met"] = (
            busy["cmds_s"] <= GOAL["busy_cmds_s"] and per_core is not None and per_core >= GOAL["busy_labs_per_core"]
        )
        ok = ok and busy["met"]
        rows.append(busy)
    return report(
        NAME,
        "server commands/s, server CPU and supervisor CPU per lab, idle and busy",
        ["row", "labs", "cmds_s", "cpu_pct", "server_ms_per_lab_s", "labs_per_server_core", "goal", "met", "by_cmd"],
        rows,
        {
            "label": "busy-lab commands/s over the goal (the lesson's heartbeat)",
            "value": rnd(rows[2]["cmds_s"] / GOAL["busy_cmds_s"], 2),
            "baseline": f"goal {GOAL['busy_cmds_s']:g} commands/s",
            "also": "all goals met" if ok else "a goal is not met",
        },
        {"seconds": SECONDS, "idle_labs": IDLE_LABS, "goal": GOAL},
        notes=[
            "cmds_s, cpu_pct and server_ms_per_lab_s per lab: the window's minus the floor's, over its "
            "labs; cpu_pct is the supervisor process alone (% of one core); server_ms_per_lab_s is the "
            "server process's own CPU (ms per lab-second, the kernel's CPU clock of the process) and "
            "labs_per_server_core 1000 / that (the server is single-threaded)"
        ],
    )
