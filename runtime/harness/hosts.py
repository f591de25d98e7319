"""A stack with more pool hosts (`HostsStack`): each its own process group and data dir, and if asked a CPU
budget of its own, as on machines of their own. The fault drills, the classroom benchmark and the network
namespaces' stack build on it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from core import hosts
from core.config import ROOT
from core.procs import processes_matching, wait
from runtime.harness import cpuquota
from runtime.harness.stack import Stack

LEASE_S = 3.0


class HostsStack(Stack):
    """The chaos stack with more pool hosts: each its own process group and data dir.

    host_cpus: each host's CPU budget in cores, a cgroup v1 quota over its whole process tree (0: none).
    Where quotas cannot be set the hosts run unlimited: `host_cpus` is then 0 and `host_cpus_why` says why.
    """

    def __init__(self, name: str, n_hosts: int = 2, lease_s: float = LEASE_S, host_cpus: float = 0, **kw):
        super().__init__(name, logs=True, **kw)
        self.n_hosts, self.lease_s = n_hosts, lease_s
        self.hosts: dict[str, subprocess.Popen] = {}
        self.host_cpus_why = cpuquota.unavailable() if host_cpus > 0 else "no quota asked"
        self.host_cpus = 0.0 if self.host_cpus_why else host_cpus
        self.quotas: dict[str, cpuquota.CpuQuota] = {}

    def env(self) -> dict[str, str]:
        return dict(super().env(), POOL_LEASE_S=str(self.lease_s), POOL_HOST_ID="p1")

    def start_supervisor(self) -> subprocess.Popen:
        proc = self.hosts["p1"] = self._budgeted("p1", super().start_supervisor)
        for i in range(2, self.n_hosts + 1):
            self.start_host(f"p{i}")
        return proc

    def start_host(self, host: str) -> subprocess.Popen:
        env = dict(self.env(), POOL_HOST_ID=host, VAR_DIR=str(self.root / f"var-{host}"))
        out = open(self.log_dir / f"pool-{host}.log", "ab")
        proc = self.hosts[host] = self._budgeted(
            host,
            lambda: subprocess.Popen(
                [sys.executable, "-m", "workers.supervisor"],
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            ),
        )
        out.close()
        self.started.append(proc)
        return proc

    def wait_hosts(self, timeout: float = 60) -> None:
        r = self.redis_client()
        wait(lambda: set(self.hosts) <= set(hosts.live_hosts(r)), timeout, f"{len(self.hosts)} pool hosts to register")

    def kill_host(self, host: str) -> float:
        proc = self.hosts.pop(host)
        at = time.time()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if host in self.quotas:  # the rest of that machine too: work horses run in process groups of their own
            self.quotas.pop(host).close()
        return at

    def _budgeted(self, host: str, spawn: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        """spawn() the host, then at once (its cgroup made beforehand) put it in its cgroup: it is still starting
        Python then, so every process it forks later (rq workers, their horses, ffmpeg) is in it too."""
        if not self.host_cpus:
            return spawn()
        quota = self.quotas[host] = cpuquota.CpuQuota(f"awl-{os.getpid()}-{self.root.name}-{host}", self.host_cpus)
        proc = spawn()
        quota.add(proc.pid)
        return proc

    def leftovers(self) -> dict[int, str]:
        return {**super().leftovers(), **processes_matching(f"{self.root}/var-")}

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            for quota in self.quotas.values():
                quota.close()
            self.quotas.clear()
