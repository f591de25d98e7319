"""A CPU quota holds a whole process tree to its cores (runtime/cpuquota.py, the pool hosts' own machines in
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

from runtime import cpuquota
from runtime.procs import alive, children, cpu_s, wait

WHY = cpuquota.unavailable()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(WHY), reason=f"no CPU quotas here: {WHY}")]

BUSY = "import os\nos.fork()\nwhile True:\n    pass\n"  # the fork comes after the parent was put in the cgroup


def test_a_quota_holds_a_process_and_the_children_it_forks_to_their_cores():
    quota = cpuquota.CpuQuota(f"awl-test-{time.time_ns()}", 0.2)
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        quota.add(proc.pid)
        child = wait(lambda: (children(proc.pid) or [0])[0], 20, "the forked child")
        assert sorted(quota.pids()) == sorted([proc.pid, child]), "the child forked later is in the cgroup too"
        used0, acct0, t0 = cpu_s(proc.pid) + cpu_s(child), quota.used_s(), time.monotonic()
        time.sleep(2)
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
