"""The worker class the supervisor starts: RQ's own Worker, with the job module preloaded.

RQ forks a work horse per job; without this, every horse imports `workers.tasks` (and Flask
with it) afresh — measured at ~75 ms per job, a fifth of raw RQ's throughput.
"""

from rq import Worker

import workers.tasks  # noqa: F401  (preload: forked horses inherit it warm)

LabWorker = Worker
