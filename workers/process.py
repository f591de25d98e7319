"""A lab process's lifetime and priority: its start (a child that must not outlive its parent, and a worker's
barrier on the lab's clock until it is ready), its environment and its nice level."""

from __future__ import annotations

import math
import os

import redis

from core import registry
from core.broker import handoff
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


def start_holder(slot_id: str) -> str:
    """The clock barrier of a worker waiting to start (booting, or dead until its respawn) or started and not yet
    ready (workers/pool.py Keeper.spawn): the clock may not pass that moment until the worker takes jobs."""
    return f"start:{slot_id}"


def ready() -> None:
    """In a lab's worker, the first time it is idle (registered with RQ, about to take its first job): its start
    barrier goes, so no simulated time passed while the process started (an interpreter, imports, its first round
    trips: real seconds on a busy host). A job that waited in the queue for it holds the clock in the same step
    until this worker receives it, as after any job (handoff.hold_for_next). Its lab and id are in its environment
    (workers/pool.py Keeper.spawn); the connection is its own (RQ's is binary) and closed, so no horse inherits it."""
    lab, wid = os.environ.get("LAB_ID"), os.environ.get("LAB_WORKER_ID")
    if not (lab and wid):
        return
    r = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True, protocol=2, driver_info=None)
    try:
        handoff.hold_for_next(r, lab, 0.0, start_holder(wid))
    finally:
        r.close()


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
