"""The worker class the supervisor starts: RQ's own Worker, with what every work horse needs made once in
the worker parent, its command line kept, its repeated bookkeeping between two jobs written once, and the end of
a lab's job (no result kept, no dependents) in one transaction.

RQ forks a work horse per job, and a horse inherits the parent's memory but loses whatever it makes itself
when it exits. Made here, before any fork:
- the job module (`workers.tasks`, Flask with it): imported afresh, ~75 ms per job;
- the ffmpeg binary's path (`media.ffmpeg`: imageio_ffmpeg's import and an `ffmpeg -version` run): ~55 ms per
  job that runs ffmpeg, because its cache dies with the horse.
- whether the sandbox works on this host (`sandbox.unavailable`: one bwrap start, logged if it does not): once
  per worker instead of once per job;
- while its lab runs a challenge, the sandboxed runner of the next attempt (core/challenges/box.py `AHEAD`),
  started while the last one runs: its ~60–300 ms start is off the attempt's path.
A lab's hand-off holds its clock (core/broker/handoff.py), so every millisecond a horse spends getting
ready is one the lab's other workers wait for too.
"""

import time

from redis import Redis
from rq import Worker
from rq.job import Job, JobStatus
from rq.results import Result
from rq.suspension import WORKERS_SUSPENDED
from rq.utils import now
from rq.worker import WorkerStatus

import workers.challenge  # noqa: F401 - preloaded with the job module: forked horses inherit both warm
import workers.tasks  # preloaded: forked horses inherit it warm
from core import media, sandbox
from core.challenges import box
from workers import process

media.ffmpeg()
sandbox.unavailable()


HEARTBEAT_GAP_S = 25.0  # real seconds within which a worker's heartbeat with an unchanged TTL is not sent again


class LabWorker(Worker):
    """Between one job and the next (a busy lab's workers do this every few seconds), RQ's worker parent writes
    its heartbeat up to four times (the horse's end, the dequeue loop before and after its wait, the suspension
    check's pipeline) and its `idle` state twice, within milliseconds: up to 14 commands, where one state (1)
    says as much. A heartbeat with the TTL this process last set, less than HEARTBEAT_GAP_S after it (alone or in
    a pipeline), and a state this process last wrote (alone), are not sent again. The worker's key never lapses
    for it: the pool runs `--worker-ttl 60`, so this parent's beats set 120 s and a horse's (at its job's start)
    90 s, and this parent sends a beat at least every HEARTBEAT_GAP_S + 45 s (its dequeue wait) = 70 s, alone or
    in the horse monitor's 30 s beats. A beat with another TTL (a job's start, the monitor's) always goes.

    The lab's own jobs end in fewer commands too (`plain`, below): a busy lab's RQ bookkeeping was about 60
    commands a job, two fifths of it redundant."""

    _beat: tuple[int, float] = (0, 0.0)  # the TTL of this process's last heartbeat, and when (monotonic)
    _ready = False  # whether it has been idle yet (its start barrier lifted: workers/process.py ready)

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
        if state == WorkerStatus.IDLE and not self._ready:
            self._ready = True
            process.ready()

    def fork_work_horse(self, job: Job, queue) -> None:
        """The horse inherits the challenge handler's runner started ahead, if any (core/challenges/box.py
        `AHEAD`); this parent lets go of it at once and starts the next while the horse works, if the last horse
        ran a challenge attempt."""
        super().fork_work_horse(job, queue)
        box.AHEAD.handed()

    def monitor_work_horse(self, job: Job, queue, execution) -> None:
        """Once the horse has ended: the runner it was handed, ended too (used or not: one attempt each)."""
        try:
            super().monitor_work_horse(job, queue, execution)
        finally:
            box.AHEAD.settled()

    def execute_job(self, job: Job, queue) -> None:
        """Before the fork: whether the server sends keyspace notifications, looked at here at most every
        tasks.NOTIFY_CHECK_S, so the horse (which would otherwise ask with every job) inherits the answer."""
        workers.tasks.keyspace_flags(self.connection)
        super().execute_job(job, queue)

    def check_for_suspension(self, burst: bool) -> None:
        """RQ asks whether `rq suspend` is on before every dequeue, in a MULTI with a heartbeat that is nearly
        always skipped (above): three commands a job. One EXISTS asks the same; only a suspended worker goes
        on to RQ's own check (its wait, its state, its beats)."""
        if self.connection.exists(WORKERS_SUSPENDED):
            super().check_for_suspension(burst)

    @staticmethod
    def plain(job: Job) -> bool:
        """A job as the lab's producers enqueue it (core/broker/reaper.py, workers/engines/fairness.py):
        no result kept (`result_ttl=0`), no repeats, no group, no rate limit, no success callback. Nothing in
        the lab enqueues with `depends_on`, so no job has dependents."""
        return (
            job.result_ttl == 0
            and not job.repeats_left
            and not job.group_id
            and not job.has_rate_limit
            and job.success_callback is None
        )

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        """In the horse, before a job runs, RQ beats the worker's key (3 commands), writes the job's heartbeat,
        then its status with the heartbeat again. The worker's key is its parent's, which that parent's own
        beats keep alive throughout (above: at least every 70 s, TTL 120 s, and every 30 s while a horse
        works), so for a plain job: the status and heartbeat in one write, the record kept for good, and the
        job out of RQ's intermediate list, in one MULTI of 5 where RQ sends 9. Any other job goes RQ's way."""
        if not self.plain(job):
            super().prepare_job_execution(job, remove_from_intermediate_queue)
            return
        with self.connection.pipeline() as pipe:
            job.prepare_for_execution(self.name, pipeline=pipe)
            pipe.persist(job.key)
            if remove_from_intermediate_queue:
                pipe.lrem(self.queue_class(job.origin, connection=self.connection).intermediate_queue_key, 1, job.id)
            pipe.execute()

    def handle_execution_ended(self, job: Job, queue, heartbeat_ttl: int) -> None:
        """A plain job that succeeded is deleted in the next step (handle_job_success), so RQ's write of its
        last heartbeat first is for nothing; a failed one's record stays, and is written as RQ writes it."""
        if job.get_status(refresh=False) != JobStatus.FAILED and self.plain(job):
            job.ended_at = now()
            return
        super().handle_execution_ended(job, queue, heartbeat_ttl)

    def handle_job_success(self, job: Job, queue, started_job_registry, execution) -> None:
        """A plain job's success, in one MULTI of 7 commands where RQ sends 25 on two connections (with the job's
        last heartbeat, above): RQ watches and reads the job's dependents (it has none), reads its status and its
        executions twice over (it has one, this), and deletes that execution three times. What is written is
        what RQ writes for a job with `result_ttl=0`: the worker's counts, the execution gone from the job, the
        worker and the started registry, and the job's keys deleted. Any other job goes RQ's own way."""
        if not self.plain(job):
            super().handle_job_success(job, queue, started_job_registry, execution)
            return
        with self.connection.pipeline() as pipe:
            self.increment_successful_job_count(pipeline=pipe)
            self.increment_total_working_time(job.ended_at - job.started_at, pipe)
            # the execution (RQ's cleanup_execution: its record, its place in the job's executions, in the started
            # registry and in the worker's): the job's executions go with the job's keys, in one DEL
            pipe.zrem(started_job_registry.key, execution.composite_key)
            pipe.srem(execution.worker_executions_key, execution.composite_key)
            pipe.delete(
                execution.key,
                job.execution_registry.key,
                job.key,
                job.dependents_key,
                job.dependencies_key,
                Result.get_key(job.id),
            )
            pipe.execute()
        self.executions.pop(execution.id, None)
        job._status = JobStatus.FINISHED

    def unsubscribe(self) -> None:
        """RQ unsubscribes from its command channel, stops the channel's thread and joins it for at most 1 s (the
        thread is a daemon). redis-py 8's `stop()` joins first, with no bound: when the thread has already read
        the unsubscribe's reply it waits up to 60 s to be subscribed again (rq/rq#1613), so a worker's end (a
        burst's, a warm shutdown's) hung for a minute now and then on a loaded host. The same steps, bounded as
        RQ means them."""
        if self.pubsub_thread:
            self.pubsub.unsubscribe()
            self.pubsub_thread.stop(timeout=1)

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
