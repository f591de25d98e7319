"""Processes as /proc shows them (no psutil), the tag naming a lab's processes' server, a child that
must not outlive its parent, and waiting for a condition: what the pool, the stack, the benchmarks and
the fault drills know about the processes they start."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces): state, ppid, …; [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def proc_state(pid: int) -> str:
    """The one-letter state ('' if gone); 'Z' is a zombie (dead, not reaped)."""
    f = _stat(pid)
    return f[0] if f else ""


def exit_status(pid: int) -> int | None:
    """A dead, unreaped process's wait status (as os.wait gives it); None while it runs or once it is gone. Any
    process of the caller's user, not only its children (whose parent has yet to reap them)."""
    f = _stat(pid)
    return int(f[49]) if len(f) > 49 and f[0] == "Z" else None


def alive(pid: int) -> bool:
    return proc_state(pid) not in ("", "Z", "X")


def ppid(pid: int) -> int:
    f = _stat(pid)
    return int(f[1]) if len(f) > 1 else 0


def children(pid: int) -> list[int]:
    """Direct children of a process, as the kernel lists each of its threads' (/proc/PID/task/TID/children: no
    scan of every process); [] if it is gone."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            found.update(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return sorted(found)


def tree(pids: list[int]) -> list[tuple[int, int]]:
    """(pid, parent) of every live descendant of `pids` (children, grandchildren, …), parents first, walked from
    the kernel's lists of each one's children."""
    found: list[tuple[int, int]] = []
    parents = list(pids)
    for parent in parents:
        kids = children(parent)
        found += [(kid, parent) for kid in kids]
        parents += kids
    return found


def descendants(pids: list[int]) -> list[int]:
    return [pid for pid, _ in tree(pids)]


def processes_matching(*needles: str) -> dict[int, str]:
    """Live (non-zombie) processes whose command line contains any needle: pid → cmdline."""
    found = {}
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        cmd = cmdline(int(d))
        if cmd and any(n in cmd for n in needles) and alive(int(d)):
            found[int(d)] = cmd
    return found


def started_at(pid: int) -> float:
    """When the process started, as a time.time() (to a clock tick); 0.0 if it is gone."""
    f = _stat(pid)
    if not f:
        return 0.0
    boot = next(
        int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
    )
    return boot + int(f[19]) / _TICK


def rss_kb(pid: int) -> int:
    """Resident set size (VmRSS), in kB; 0 if the kernel shows none."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int, with_children: bool = True) -> float:
    """CPU seconds (user + system) a process has used, plus those of the children it has reaped
    (an rq worker reaps its horses, a horse its ffmpeg): a cost figure that other load on the
    box barely moves, unlike wall-clock rates. 0.0 if the process is gone."""
    f = _stat(pid)
    if not f:
        return 0.0
    ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if with_children else 0)
    return ticks / _TICK


def run_s(pid: int) -> float:
    """CPU seconds the process itself has run (all its threads, not its children's), to the nanosecond: the
    kernel's CPU clock of that process (`clock_gettime` on its pid's clock id), where /proc's stat counts in
    ticks of 10 ms, a step as large as a quiet server's whole cost over a few seconds. 0.0 if it is gone."""
    try:
        return time.clock_gettime((~pid << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except OSError:
        return 0.0


def tcp_ports(pid: int) -> set[int]:
    """Local ports of the TCP sockets a process holds (its fds' inodes matched in /proc/net/tcp)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[9] in inodes:
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait(pred: Callable[[], Any], timeout: float, what: str = "condition", every: float = 0.05) -> Any:
    """Poll until pred() is truthy and return its value; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} (after {timeout:.0f} s)")
        time.sleep(every)


def server_tag(url: str) -> str:
    """`@host:port/db`, the server and database `url` names without its user or password: what a lab's
    processes carry on their command line (ps, the reconcile, the sweeps) to tell one stack's from another's.
    The URL itself, which may hold the pool role's password, reaches them in their environment only."""
    parts = urlsplit(url)
    return f"@{parts.hostname}:{parts.port or 6379}/{parts.path.strip('/') or '0'}"


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux PR_SET_PDEATHSIG).

    Set in each rq worker (parent: the supervisor) and again in each work horse (parent: its
    worker), because the setting is cleared on fork: a dead supervisor then leaves no orphans.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
