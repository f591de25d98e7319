"""CPU budgets for process trees: cgroup v1 CPU quotas, so each pool host on one box has cores of its own.

A `CpuQuota` is a cgroup in the v1 `cpu` hierarchy with `cpu.cfs_quota_us` = cores × `cpu.cfs_period_us`:
in every 100 ms period its processes together run for at most that many cores' worth of time, however
many of them there are, and are throttled for the rest of the period. A process put in right after it is
spawned, before it forks, takes every later child with it (rq workers, their horses, ffmpeg), so the
whole tree gets the budget of a machine with that many cores. The same cgroup in the `cpuacct`
hierarchy, where that is mounted on its own, counts the CPU they used, also of processes that died
unreaped. Needs root and cgroup v1; `unavailable()` says why not otherwise.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from core.procs import wait

CPU = Path("/sys/fs/cgroup/cpu")
ACCT = Path("/sys/fs/cgroup/cpuacct")
PERIOD_US = 100_000


def unavailable() -> str:
    """Why CPU quotas cannot be set on this machine, or '' if they can (a probe cgroup is made and removed)."""
    if not (CPU / "cpu.cfs_quota_us").exists():
        if Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return "cgroup v2 only; cgroup v1 cpu quotas are what is supported"
        return f"no cgroup v1 cpu controller at {CPU}"
    probe = CPU / f"cpuquota-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return f"cannot make a cgroup in {CPU}: {e.strerror}"
    return ""


class CpuQuota:
    """One cgroup whose processes share `cores` CPUs; close() removes it.

    name: the cgroup's directory name, unique on the machine (several runs may share the box).
    """

    def __init__(self, name: str, cores: float):
        self.dir = CPU / name
        own_acct = ACCT.is_dir() and ACCT.resolve() != CPU.resolve()  # else co-mounted with cpu, or absent
        self.acct = ACCT / name if own_acct else self.dir
        self.dir.mkdir()
        if own_acct:
            self.acct.mkdir()
        (self.dir / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (self.dir / "cpu.cfs_quota_us").write_text(str(int(cores * PERIOD_US)))

    def add(self, pid: int) -> None:
        """Put a process in; children it forks from then on are in too (those it already has stay out)."""
        for d in {self.dir, self.acct}:
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        return [int(p) for p in (self.dir / "cgroup.procs").read_text().split()]

    def used_s(self) -> float | None:
        """CPU seconds its processes have used so far; None without the cpuacct controller."""
        usage = self.acct / "cpuacct.usage"
        return int(usage.read_text()) / 1e9 if usage.exists() else None

    def stat(self) -> dict[str, int]:
        """The kernel's throttling counters (cpu.stat): nr_periods, nr_throttled, throttled_time (ns)…"""
        return {k: int(v) for k, v in (line.split() for line in (self.dir / "cpu.stat").read_text().splitlines())}

    def close(self, timeout: float = 10) -> None:
        """SIGKILL whatever still runs in it, as if its machine were switched off, then remove the cgroup."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait(lambda: not self.pids(), timeout, f"cgroup {self.dir.name} to empty")
        for d in {self.dir, self.acct}:
            d.rmdir()
