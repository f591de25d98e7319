"""Nothing outlives its lab: stopping a lab's whole process tree, and the pool's periodic reconcile.

A lab's worker is a process with children: RQ forks a work horse per job (in a session of its own, so
a signal to the worker's group misses it) and the horse runs ffmpeg. The horse dies with its worker
only once its job has set PR_SET_PDEATHSIG, so `kill_tree` kills every descendant with the worker.

`Reconciler` runs in each pool process, at most once every RECONCILE_S (core.config) across all pool
hosts (a short lock in the server), and puts right what a crash, a restart from the AOF or a write racing a
delete can leave behind:
- processes naming the queue of a lab no longer in `labs` (a horse whose worker was killed, a worker
  started in the tick its lab was deleted): killed;
- keys of labs no longer in `labs` (a late event, worker row or blob written after the teardown):
  swept, their blobs' bytes given back;
- the byte counters (server, per lab, per client): rebuilt from the blob indexes (core.blobs.recount);
- an append-only file grown past AOF_MAX_RATIO times the live data: rewritten (BGREWRITEAOF), since the
  server's own trigger (the file doubled since its last rewrite) misses a file that was rewritten
  while the data was large and then kept growing after the data went away.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import redis

from core import blobs, procs, registry
from core.config import AOF_REWRITE_MIN, Config
from core.keys import LABS
from core.procs import cmdline, server_tag

AOF_MAX_RATIO = 4  # the AOF may be this many times the live data (plus the server's rewrite min-size)
LOCK = "pool:reconcile"
_LAB_KEY = re.compile(r"^lab:([^:]+):")
_QUEUE = re.compile(r"\blab-([0-9a-f]+)\b")
SCHEDULER = "workers.engines.scheduler"  # `python -m workers.engines.scheduler <lab> <replica>` (engines/fleet.py)


def kill_tree(pids: list[int]) -> None:
    """SIGKILL processes and all their descendants (descendants first read, so none is reparented unseen)."""
    for pid in [*procs.descendants(pids), *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def lab_processes(redis_url: str) -> dict[int, str]:
    """Processes of this server's labs: pid → lab id. rq workers (and their horses, which keep the worker's
    command line) name the server (its `server_tag`, at the end of the worker's name) and the lab's queue;
    scheduler replicas name the lab and get the URL in their environment. Other stacks on this machine
    (another server or database) are never matched."""
    needle = f"{server_tag(redis_url)} "
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        argv = cmdline(int(d)).split(" ")
        if needle in " ".join(argv) + " ":
            if m := _QUEUE.search(" ".join(argv)):
                found[int(d)] = m.group(1)
        elif len(argv) > 3 and argv[2] == SCHEDULER and _environ(int(d)).get("REDIS_URL") == redis_url:
            found[int(d)] = argv[3]
    return found


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


class Reconciler:
    def __init__(self, r: redis.Redis, config: Config, host_id: str):
        self.r, self.redis_url, self.var_dir, self.host_id = r, config.redis_url, config.var_dir, host_id
        self.every = config.reconcile_s
        self.next_at = time.time() + self.every / 3  # a (re)started pool reconciles soon after it starts

    def due(self) -> bool:
        return time.time() >= self.next_at

    def run(self) -> dict[str, int]:
        """One reconcile, if no other pool host ran one within RECONCILE_S; what it put right."""
        self.next_at = time.time() + self.every
        if not self.r.set(LOCK, self.host_id, nx=True, px=max(100, int(self.every * 900))):
            return {}
        procs = lab_processes(self.redis_url)  # the processes first, then the live labs: a lab is in
        live = self.r.smembers(LABS)  # `labs` before any process of it starts, so one not in it is gone
        killed = [pid for pid, lab in procs.items() if lab not in live]
        kill_tree(killed)
        swept = self.sweep_orphan_keys()
        total = blobs.recount(self.r)
        rewrote = self.rewrite_aof()
        return {"processes": len(killed), "labs_swept": len(swept), "blob_bytes": total, "aof_rewrite": rewrote}

    def sweep_orphan_keys(self) -> set[str]:
        """Tear down every lab that has keys but is not in `labs` (keys first, then `labs`: a lab created
        between the two reads is in `labs` by then, since creating one is a single MULTI)."""
        seen = {m.group(1) for k in self.r.scan_iter(match="lab:*", count=1000) if (m := _LAB_KEY.match(k))}
        gone = seen - self.r.smembers(LABS)
        for lab in gone:
            registry.teardown(self.r, lab, self.var_dir)
        return gone

    def rewrite_aof(self) -> int:
        """BGREWRITEAOF when the file has outgrown the live data; 1 if one was started."""
        try:
            persistence = self.r.info("persistence")
            if not int(persistence.get("aof_enabled", 0)) or int(persistence.get("aof_rewrite_in_progress", 0)):
                return 0
            size = int(persistence.get("aof_current_size", 0))
            live = int(self.r.info("memory").get("used_memory_dataset", 0))
            floor = int(
                self.r.config_get("auto-aof-rewrite-min-size").get("auto-aof-rewrite-min-size") or AOF_REWRITE_MIN
            )
            if size <= AOF_MAX_RATIO * live + floor:
                return 0
            self.r.bgrewriteaof()
            return 1
        except redis.ResponseError:  # a managed server may refuse INFO sections or BGREWRITEAOF
            return 0
