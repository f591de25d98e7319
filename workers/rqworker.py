"""The worker class the supervisor starts: RQ's own Worker, with what every work horse needs made once in
the worker parent, and its command line kept.

RQ forks a work horse per job, and a horse inherits the parent's memory but loses whatever it makes itself
when it exits. Made here, before any fork:
- the job module (`workers.tasks`, Flask with it): imported afresh, ~75 ms per job;
- the ffmpeg binary's path (`media.ffmpeg`: imageio_ffmpeg's import and an `ffmpeg -version` run): ~55 ms per
  job that runs ffmpeg, because its cache dies with the horse.
A lab's hand-off holds its clock (workers/broker/handoff.py), so every millisecond a horse spends getting
ready is one the lab's other workers wait for too.
"""

from rq import Worker

import workers.tasks  # noqa: F401  (preload: forked horses inherit it warm)
from workers import media

media.ffmpeg()


class LabWorker(Worker):
    def procline(self, message: str) -> None:
        """RQ retitles its processes (`rq:worker:…: Listening on …`) when setproctitle is installed; ours keep
        the command line they were started with (or given: workers/spare.py), which names the server and
        the lab's queue, so a lab's or a stack's processes can always be found by it."""
