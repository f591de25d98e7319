"""A lab process's lifetime and priority: its start (a child that must not outlive its parent), its
environment and its nice level."""

from __future__ import annotations

import math
import os

from core import registry
from core.config import Config
from core.procs import die_with_parent


def lab_nice(config: Config, settings: dict) -> int:
    """The nice level of a lab's processes: a base above the web tier, supervisor and server (LAB_NICE),
    plus log1.25 of the lab's process count. CFS weighs nice n at ≈ 1024/1.25^n, so a lab's eight busy
    workers together weigh about what one lab's single worker does: CPU is shared between labs, not
    between processes, and a lab that floods at its limits cannot take the box from a quiet one."""
    n = max(1, registry.processes_of(settings))
    return max(0, min(19, config.lab_nice + round(math.log(n) / math.log(1.25))))


def lab_env(config: Config, **extra: str) -> dict[str, str]:
    """The environment of an rq worker (or a spare that becomes one) and its horses: the server's URL, which may
    hold the pool role's password, goes here (REDIS_URL for our code, RQ_REDIS_URL for `rq worker`) and never on
    the command line, which other users of the machine can read in `ps`."""
    return dict(
        os.environ, REDIS_URL=config.redis_url, RQ_REDIS_URL=config.redis_url, VAR_DIR=str(config.var_dir), **extra
    )


def start_lab_process(nice: int) -> None:
    """preexec_fn of every lab process: die with the supervisor, run at the lab's nice level."""
    die_with_parent()
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        pass


def renice(pids: list[int], nice: int) -> None:
    """Move live processes to a new nice level (the lab grew or shrank); raising priority back needs
    CAP_SYS_NICE, so without it a lab that shrinks keeps its lower priority until its workers restart."""
    for pid in pids:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        except OSError:
            pass
