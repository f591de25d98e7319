"""parked: the bytes a parked lab holds in the server, unfolded and folded, and how many a default server holds.

Each chapter's preset (ch0…ch8) is opened PARKED_ROUNDS (2) times on the bench stack at 1,000×, given
PARKED_JOBS (6) jobs of the small sample (30 simulated s each) and run until every one has ended (done or
dead-lettered; at most ENDED_WAIT_S), as a student's pass through a chapter's steps leaves it; then parked by
hand. Per lab: the bytes
its foldable keys hold (`core.archive.measure`: MEMORY USAGE of its records, events, messages and RQ keys), the
bytes of its archive once folded (`core.archive.fold`), its blobs (the outputs its jobs wrote, budgeted apart by
MAX_BLOB_BYTES), and how long opening it again takes (GET of its snapshot: unfold + resume), which issue 39 asks
to be at most 1 s. Then the median and p95 of each, and what a server at the defaults holds: the records part of
its memory (SERVER_MAX_MEMORY's 512 MiB beside MAX_BLOB_BYTES) filled with PARKED_MEMORY of unfolded parked labs
and the rest folded, against the blob budget's own count.
"""

from __future__ import annotations

import os
import time

from bench.common import Bench, report, rnd, wait
from core import archive, blobs
from core.config import Config
from runtime.harness.stats import pct

NAME = "parked"
ROUNDS = int(os.environ.get("PARKED_ROUNDS", "2"))
JOBS = int(os.environ.get("PARKED_JOBS", "6"))
PRESETS = [f"ch{i}" for i in range(9)]
ENDED_WAIT_S = 90.0  # real seconds a lab's jobs get to end before it is parked anyway (chapter 7 runs on and on)
MIB = 1024 * 1024


def one_lab(b: Bench, preset: str) -> dict:
    lab = b.lab(preset, 1000)
    lab_id = lab["lab_id"]
    for _ in range(JOBS):
        b.call("POST", f"/api/labs/{lab_id}/jobs", {"sample": "carphone_pristine", "duration_s": 30}, lab["token"])

    def ended() -> int:
        c = b.call("GET", f"/api/labs/{lab_id}", token=lab["token"])["counts"]
        return c["done"] + c["dlq"]

    deadline = time.monotonic() + ENDED_WAIT_S  # a student may leave before the last job ends, as here
    while ended() < JOBS and time.monotonic() < deadline:
        time.sleep(0.5)
    b.call("POST", f"/api/labs/{lab_id}/park", token=lab["token"])
    wait(lambda: not b.r.exists(f"lab:{lab_id}:owner"), 30, f"{preset}: its pool host to let it go")
    unfolded = archive.measure(b.r, lab_id)
    folded = archive.fold(b.r, lab_id)
    assert folded is not None, f"{preset}: the parked lab could not be folded"
    t = time.perf_counter()
    b.call("GET", f"/api/labs/{lab_id}", token=lab["token"])  # its page opens again: unfold + resume
    reopen_ms = (time.perf_counter() - t) * 1000
    row = {
        "preset": preset,
        "lab": lab_id,
        "ended": ended(),
        "unfolded_kb": rnd(unfolded / 1024, 1),
        "folded_kb": rnd(folded / 1024, 1),
        "ratio": rnd(unfolded / folded, 1),
        "blobs_kb": rnd(blobs.usage(b.r, lab_id) / 1024, 1),
        "reopen_ms": rnd(reopen_ms, 0),
    }
    b.delete_lab(lab)
    return row


def run(b: Bench) -> dict:
    rows = [one_lab(b, preset) for _ in range(ROUNDS) for preset in PRESETS]
    cfg = Config()
    stat = {
        col: (pct([r[col] for r in rows], 50), pct([r[col] for r in rows], 95))
        for col in ("unfolded_kb", "folded_kb", "blobs_kb", "reopen_ms")
    }
    records = cfg.redis_maxmemory - cfg.max_blob_bytes  # what the server keeps beside the blobs
    unfolded_n = cfg.parked_memory / (stat["unfolded_kb"][0] * 1024)
    folded_n = (records - cfg.parked_memory) / (stat["folded_kb"][0] * 1024)
    by_blobs = cfg.max_blob_bytes / (stat["blobs_kb"][0] * 1024) if stat["blobs_kb"][0] else float("inf")
    summary = {"preset": "median / p95", **{col: f"{rnd(m, 1)} / {rnd(p, 1)}" for col, (m, p) in stat.items()}}
    held = int(min(unfolded_n + folded_n, by_blobs))
    notes = [
        f"a default server ({records // MIB} MiB for records, PARKED_MEMORY {cfg.parked_memory // MIB} MiB "
        f"unfolded) holds ≈ {int(unfolded_n)} unfolded + {int(folded_n)} folded parked labs by their records, "
        f"and ≈ {int(by_blobs)} by their outputs (MAX_BLOB_BYTES {cfg.max_blob_bytes // MIB} MiB): {held} in all",
        f"{JOBS} jobs of the carphone sample per lab, {ROUNDS} labs per preset; reopen_ms is GET of the snapshot "
        "(unfold, take the slot again, run the clock), the bench stack's load included",
    ]
    return report(
        NAME,
        "bytes a parked lab holds, unfolded and folded, and how many a default server holds",
        ["preset", "ended", "unfolded_kb", "folded_kb", "ratio", "blobs_kb", "reopen_ms"],
        rows + [summary],
        {
            "label": "folded / unfolded bytes (median)",
            "value": rnd(stat["folded_kb"][0] / stat["unfolded_kb"][0], 3),
            "baseline": "the same labs unfolded, measured in the same run",
            "also": f"≈ {held} parked labs on a default server",
        },
        {"rounds": ROUNDS, "jobs": JOBS},
        notes=notes,
        extra={"median_p95": stat, "parked_labs_held": held},
    )
