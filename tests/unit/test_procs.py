"""core/procs.py's CPU readings of another process, against each other (no wall-clock thresholds)."""

from __future__ import annotations

import subprocess
import sys

from core.procs import cpu_s, run_s


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
