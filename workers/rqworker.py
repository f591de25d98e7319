"""The worker class the supervisor starts: RQ's own Worker, with what every work horse needs made once in
the worker parent, its command line kept, and its repeated bookkeeping between two jobs written once.

RQ forks a work horse per job, and a horse inherits the parent's memory but loses whatever it makes itself
when it exits. Made here, before any fork:
- the job module (`workers.tasks`, Flask with it): imported afresh, ~75 ms per job;
- the ffmpeg binary's path (`media.ffmpeg`: imageio_ffmpeg's import and an `ffmpeg -version` run): ~55 ms per
  job that runs ffmpeg, because its cache dies with the horse.
A lab's hand-off holds its clock (workers/broker/handoff.py), so every millisecond a horse spends getting
ready is one the lab's other workers wait for too.
"""

import time

from redis import Redis
from rq import Worker

import workers.tasks  # noqa: F401  (preload: forked horses inherit it warm)
from workers import media

media.ffmpeg()


HEARTBEAT_GAP_S = 1.0  # real seconds within which a worker's heartbeat with an unchanged TTL is not sent again


class LabWorker(Worker):
    """Between one job and the next (a busy lab's workers do this every few seconds), RQ's worker parent writes
    its heartbeat up to four times (the horse's end, the dequeue loop before and after its wait, the suspension
    check's pipeline) and its `idle` state twice, within milliseconds: up to 14 commands, where one heartbeat
    and one state (4) say as much. A heartbeat with the TTL this process last set, less than HEARTBEAT_GAP_S
    later (alone or in a pipeline), and a state this process last wrote (alone), are not sent again: the
    worker's key lives `worker_ttl` + 60 s, and the skipped beat's TTL would have ended under a second later.
    A beat with another TTL (a job's start, the horse's beats while it works) always goes."""

    _beat: tuple[int, float] = (0, 0.0)  # the TTL of this process's last heartbeat, and when (monotonic)

    def heartbeat(self, timeout: int | None = None, pipeline=None) -> None:
        ttl = timeout or self.worker_ttl + 60
        if self._beat[0] == ttl and time.monotonic() - self._beat[1] < HEARTBEAT_GAP_S:
            return
        super().heartbeat(timeout, pipeline)
        self._beat = (ttl, time.monotonic())

    def set_state(self, state: str, pipeline=None) -> None:
        if pipeline is None and state == self.get_state():
            return
        super().set_state(state, pipeline)

    def procline(self, message: str) -> None:
        """RQ retitles its processes (`rq:worker:…: Listening on …`) when setproctitle is installed; ours keep
        the command line they were started with (or given: workers/spare.py), which names the server and
        the lab's queue, so a lab's or a stack's processes can always be found by it."""


class LabRedis(Redis):
    """RQ's connection (`rq worker --connection-class`): RESP2, and no CLIENT SETINFO. RQ opens two or three
    connections per job (a horse is a new process), each of which would otherwise start with a HELLO and two
    SETINFOs: 6 to 9 of a busy lab's commands per job. Nothing RQ or we do here needs RESP3."""

    @classmethod
    def from_url(cls, url: str, **kwargs) -> "LabRedis":
        return super().from_url(url, **{"protocol": 2, "driver_info": None, **kwargs})
