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

`python -m workers.spare --url REDIS_URL --token T` (started by the supervisor, which it dies with).
"""

from __future__ import annotations

import json
import os
import sys
import time

import redis
from rq.cli import main as rq_main
from setproctitle import setproctitle

import workers.rqworker  # noqa: F401  (what `rq worker --worker-class workers.rqworker.LabWorker` imports)
from core.keys import spare_assignment

WAIT_S = 2  # seconds per wait (under the client's 5 s socket timeout); between waits an orphan exits


def main() -> None:
    url = sys.argv[sys.argv.index("--url") + 1]
    token = sys.argv[sys.argv.index("--token") + 1]
    r = redis.Redis.from_url(url, decode_responses=True)
    parent = os.getppid()
    got = None
    while got is None:
        try:
            got = r.blpop([spare_assignment(token)], timeout=WAIT_S)
        except (redis.ConnectionError, redis.TimeoutError):  # the server restarts (the launcher brings it back)
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


if __name__ == "__main__":
    main()
