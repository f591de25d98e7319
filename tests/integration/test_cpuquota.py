"""A CPU quota holds a whole process tree to its cores (runtime/harness/cpuquota.py, the pool hosts' own machines in
`bench classroom`).

Two busy loops, a parent and the child it forks after entering the cgroup, would take two cores between them;
under a 0.2-core quota they share 0.2. What is asserted is their CPU share (CPU seconds per second, from
/proc), with a wide margin, not how long anything took. Skipped where cgroup v1 quotas cannot be set.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from core.procs import alive, children, cpu_s, wait
from runtime.harness import cpuquota

WHY = cpuquota.unavailable()
pytestmark = pytest.mark.skipif(bool(WHY), reason=f"no CPU quotas here: {WHY}")

# the fork waits for a line on stdin, sent once the parent is in both hierarchies (cpu and cpuacct): a fork
# between the two writes of `add` would leave the child out of the accounting
BUSY = "import os, sys\nsys.stdin.readline()\nos.fork()\nwhile True:\n    pass\n"


def test_a_quota_holds_a_process_and_the_children_it_forks_to_their_cores():
    quota = cpuquota.CpuQuota(f"awl-test-{time.time_ns()}", 0.2)
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, text=True)
    try:
        quota.add(proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        child = wait(lambda: (children(proc.pid) or [0])[0], 20, "the forked child")
        assert sorted(quota.pids()) == sorted([proc.pid, child]), "the child forked later is in the cgroup too"
        used0, acct0, t0 = cpu_s(proc.pid) + cpu_s(child), quota.used_s(), time.monotonic()
        # a window of at least 2 s that holds 0.4 CPU-s of the tree's work (a state, not a guessed sleep: on a
        # busy box the pair may get less than its quota, and a share is only meaningful over enough work)
        wait(
            lambda: cpu_s(proc.pid) + cpu_s(child) - used0 >= 0.4 and time.monotonic() - t0 >= 2,
            60,
            "the two busy loops to use 0.4 CPU-s under their quota",
        )
        used, acct, wall = cpu_s(proc.pid) + cpu_s(child) - used0, quota.used_s(), time.monotonic() - t0
        print(f"two busy loops under 0.2 cores: {used / wall:.2f} CPU-s per s; {quota.stat()}")
        assert used / wall <= 0.3, "two busy loops under a 0.2-core quota use no more than about 0.2 of a core"
        assert used > 0
        if acct is not None:  # the cgroup's own count agrees with /proc's
            assert abs((acct - acct0) - used) <= 0.1
    finally:
        proc.kill()
        proc.wait()
        quota.close()  # SIGKILLs the orphaned child, then removes the cgroup
    assert not quota.dir.exists() and not quota.acct.exists()
    assert not alive(child), "close() ended what still ran in the cgroup"
