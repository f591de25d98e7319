"""core/procs.py's CPU readings of another process, against each other (no wall-clock thresholds), and a process's
tree as the kernel lists it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from core.procs import cpu_s, descendants, run_s, tree, wait


def test_run_s_reads_another_processs_cpu_to_below_a_tick_and_agrees_with_proc_stat():
    """A child burns about half a CPU-second, then sleeps: the kernel's CPU clock of it says what /proc's stat
    says, to within two 10 ms ticks, and in finer steps than a tick; a process that is gone reads 0."""
    burn = (
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nprint(1, flush=True)\n"
        "time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"1\n"
        fine, coarse = run_s(child.pid), cpu_s(child.pid, with_children=False)
        assert fine >= 0.5 and abs(fine - coarse) <= 0.02, (fine, coarse)
        assert round(fine * 100) != fine * 100, f"{fine} is a whole number of ticks"
    finally:
        child.kill()
        child.wait()
    assert run_s(child.pid) == 0.0


def test_tree_lists_every_descendant_with_its_parent_parents_first():
    """A shell with a subshell that starts a sleep, beside a sleep of its own: the tree names all three under their
    own parents, each parent before its children; a process with none has an empty tree."""
    top = subprocess.Popen(["sh", "-c", "(sleep 60; :) & sleep 60; wait"])
    try:
        found = wait(lambda: tree([top.pid]) if len(tree([top.pid])) == 3 else None, 10, "three descendants")
        order = [pid for pid, _ in found]
        sub = next(pid for pid, _ in found if any(parent == pid for _, parent in found))  # the subshell
        grandchild = next(pid for pid, parent in found if parent == sub)
        assert sorted(parent for _, parent in found) == sorted([top.pid, top.pid, sub])
        assert order.index(sub) < order.index(grandchild)
        assert descendants([top.pid]) == order
        assert tree([grandchild]) == []
    finally:
        for pid in descendants([top.pid]):
            os.kill(pid, signal.SIGKILL)
        top.kill()
        top.wait()
