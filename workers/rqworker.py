"""The worker class the supervisor starts: RQ's own Worker, with the job module preloaded and its command
line kept.

RQ forks a work horse per job; without this, every horse imports `workers.tasks` (and Flask
with it) afresh — measured at ~75 ms per job, a fifth of raw RQ's throughput.
"""

from rq import Worker

import workers.tasks  # noqa: F401  (preload: forked horses inherit it warm)


class LabWorker(Worker):
    def procline(self, message: str) -> None:
        """RQ retitles its processes (`rq:worker:…: Listening on …`) when setproctitle is installed; ours keep
        the command line they were started with (or given: workers/spare.py), which names the server and
        the lab's queue, so a lab's or a stack's processes can always be found by it."""
