"""A pre-started worker: a process with Python, RQ and the job code already loaded, waiting for a lab.

Starting an `rq worker` costs a few hundred milliseconds of real time (interpreter, imports, Redis), and
a learner's lab pays it twice: when the page opens the lab, and every time a killed worker respawns. On
the lab's honest clock that start-up is time the clock must wait for (a redelivery sent to a worker that
is still starting), so at 20× each respawn costs seconds of simulated time. The pool supervisor keeps
`SPARE_WORKERS` of these ready; to start a worker it takes one and pushes the lab's assignment (its
worker id and the exact `rq worker` arguments) to `pool:spare:<token>`, the token it was started with.
The process then runs RQ's own `rq worker` command in-process, with the same arguments and the same
worker class as a freshly started one, so from then on it *is* that worker: same pid the supervisor
kills, same queues, same horse per job.

`python -m workers.spare --server @host:port/db --token T` (started by the supervisor, which it dies with): the
server's URL, which may hold the pool role's password, comes in the environment (REDIS_URL, and RQ_REDIS_URL
for `rq worker`), never on the command line other users of the machine can read; `--server` only names it.
`Spares` is the supervisor's side: it keeps the host's spares topped up and hands one to a lab.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import redis

from core.config import SPARE_REFILL_S, Config
from core.disk import persist_refused
from core.keys import spare_assignment
from core.procs import server_tag
from workers.process import lab_env, start_lab_process
from workers.zygote import Forked, Zygote

Proc = subprocess.Popen | Forked  # a spare as the pool holds it: started afresh, or forked by the zygote

WAIT_S = 2  # seconds per wait (under the client's 5 s socket timeout); between waits an orphan exits


def prestart(nice: int) -> None:
    """In a spare, before it runs Python: a lab process, deaf to Ctrl-C. The terminal sends SIGINT to the whole
    group, and a spare holds nothing yet: the supervisor stops it (a spare given a lab runs `rq worker`, which
    sets its own handlers)."""
    start_lab_process(nice)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Spares:
    """This host's pre-started worker processes, each with the token of the list it waits on. They are forked
    from the host's zygote (workers/zygote.py) while it answers, else started as fresh interpreters."""

    def __init__(self, r: redis.Redis, config: Config):
        self.r = r
        self.config = config
        self.ready: list[tuple[Proc, str]] = []  # pre-started worker processes, each with its token
        self.refill_at = 0.0
        self.can_renice = os.geteuid() == 0  # may lower a process's nice value (a spare's, once assigned)
        self.zygote: Zygote | None = None
        self.zygote_failed = False  # it could not be started or stopped answering: fresh interpreters from then on

    def take(self, argv: list[str], env: dict[str, str], nice: int) -> Proc | None:
        """A pre-started worker process made into this worker: it runs `rq worker argv` in-process at once.
        With none ready, one forked for it now if the zygote answers; else None (the caller starts one the slow
        way)."""
        forks = 2  # spares forked for this worker at most (one that died at once is not forked for again and again)
        while self.ready or (forks and self._zygote()):
            if self.ready:
                proc, token = self.ready.pop(0)
                self.refill_at = time.time() + SPARE_REFILL_S
            else:
                forks, token = forks - 1, secrets.token_hex(8)
                if (forked := self._zygote_start(token)) is None:
                    continue
                proc = forked
            if proc.poll() is not None:
                continue
            try:
                with self.r.pipeline(transaction=True) as pipe:
                    pipe.rpush(spare_assignment(token), json.dumps({"argv": argv, "env": env, "nice": nice}))
                    pipe.expire(spare_assignment(token), 60)  # not left behind if the spare died meanwhile
                    pipe.execute()
            except redis.RedisError:
                proc.kill()  # it would wait for an assignment that never comes
                proc.wait()
                raise
            return proc
        return None

    def keep(self, running: Callable[[], bool]) -> None:
        """Top the host's pre-started workers back up to SPARE_WORKERS, SPARE_REFILL_S after the last was
        taken: a burst of new labs (a class opening a chapter) is not slowed by the loading of their
        replacements. A spare loads at nice 19 where this host may give it back a lab's priority on
        assignment (root or CAP_SYS_NICE), else at the lowest lab level."""
        self.ready = [(p, token) for p, token in self.ready if p.poll() is None]
        if time.time() < self.refill_at:
            return
        while running() and len(self.ready) < self.config.spare_workers:
            token = secrets.token_hex(8)  # its own list to wait on (a pid may be reused)
            proc = (self._zygote() and self._zygote_start(token)) or self._fresh(token)
            self.ready.append((proc, token))

    def exits(self) -> int | None:
        """The fd that is readable when a forked spare (or the worker it became) exits, for the waker's select."""
        return self.zygote.exits if self.zygote is not None else None

    def exited(self) -> bool:
        """Whether a forked spare exited since the last call (as SIGCHLD tells of the supervisor's own children)."""
        return self.zygote is not None and self.zygote.exited()

    def _nice(self) -> int:
        return 19 if self.can_renice else max(0, min(19, self.config.lab_nice))

    def _fresh(self, token: str) -> subprocess.Popen:
        nice = self._nice()
        return subprocess.Popen(
            [sys.executable, "-m", "workers.spare", "--server", server_tag(self.config.redis_url), "--token", token],
            env=lab_env(self.config),
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: prestart(nice),
        )

    def _zygote(self) -> Zygote | None:
        """The host's zygote, started on first use; None once it has failed (or where there are no pidfds). One
        that stopped answering is not stopped here: the lab workers it forked would die with it (`close` stops it)."""
        if self.zygote_failed or (self.zygote is not None and not self.zygote.alive()):
            self.zygote_failed = True
            return None
        if self.zygote is None:
            if not hasattr(os, "pidfd_open"):
                self.zygote_failed = True
                return None
            nice = self._nice()
            try:
                self.zygote = Zygote(
                    ["--server", server_tag(self.config.redis_url)],
                    lab_env(self.config),
                    lambda: prestart(nice),
                )
            except OSError:
                self.zygote_failed = True
        return self.zygote

    def _zygote_start(self, token: str) -> Forked | None:
        assert self.zygote is not None
        forked = self.zygote.fork(token, self._nice())
        self.zygote_failed = forked is None
        return forked

    def due_at(self) -> float:
        """Real time the host next starts spares (inf: it has all it keeps)."""
        return self.refill_at if len(self.ready) < self.config.spare_workers else math.inf

    def stop(self) -> None:
        """The host stops: its spares hold no lab yet, so nothing to finish. The zygote stays until `close`: the
        lab workers it forked die with it, and a graceful stop lets them finish their job first."""
        for proc, _token in self.ready:
            proc.kill()
            proc.wait()
        self.ready = []

    def close(self) -> None:
        """After the host's workers have stopped: the zygote too."""
        if self.zygote is not None:
            self.zygote.stop()
            self.zygote = None


def preload() -> None:
    """The job code, loaded before the wait (that is what a spare is for): here and not at the top, since the
    supervisor imports this module for `Spares` and runs no job code itself."""
    import rq.cli  # noqa: F401
    import setproctitle  # noqa: F401

    import workers.rqworker  # noqa: F401  (what `rq worker --worker-class workers.rqworker.LabWorker` imports)


def serve(token: str) -> None:
    """Wait for this spare's lab on `pool:spare:<token>`, then run `rq worker` in-process as that lab's worker."""
    from rq.cli import main as rq_main
    from setproctitle import setproctitle

    # RESP2 and no client-info handshake: a spare's one connection starts with no round trips beyond its own
    r = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True, protocol=2, driver_info=None)
    parent = os.getppid()
    got = None
    while got is None:
        try:
            got = r.blpop([spare_assignment(token)], timeout=WAIT_S)
        except (redis.ConnectionError, redis.TimeoutError):  # the server restarts (the launcher brings it back)
            time.sleep(1)
        except redis.ResponseError as e:  # its disk is full: a pop is a write, refused until space returns
            if not persist_refused(e):
                raise
            time.sleep(1)
        if got is None and os.getppid() != parent:
            return  # the supervisor died without taking it (it is also sent SIGKILL by PR_SET_PDEATHSIG)
    r.close()
    job = json.loads(got[1])
    os.environ.update(job["env"])
    try:
        os.setpriority(os.PRIO_PROCESS, 0, int(job["nice"]))
    except OSError:
        pass
    setproctitle(" ".join(["rq", *job["argv"]]))  # as if started as `rq worker …`: ps, sweeps and tests see its lab
    rq_main(args=job["argv"], prog_name="rq")


def main() -> None:
    preload()
    serve(sys.argv[sys.argv.index("--token") + 1])


if __name__ == "__main__":
    main()
