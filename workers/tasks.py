"""RQ job functions: what a real worker process runs for one delivery of one job attempt.

`run_attempt` is the whole worker loop of the lesson in one place: receive the message and claim
the job's record (one round trip; the `guard` decides), do the work paced on the lab's clock with
heartbeats and the upload streaming to storage, write outputs atomically, then ack (record done,
message deleted) and send the completion email once. It never decides redelivery: that is the reaper's job, which is
exactly why a worker that is killed mid-job still gets its message back.
"""

from __future__ import annotations

import json
import math
import os
import select
import time
from pathlib import Path
from typing import NoReturn

import redis
from rq import get_current_job

from core import blobs, clock, media, registry, stream
from core.broker import handoff, leases, retry
from core.broker.retry import NonRetryable, StorageDown
from core.broker.state import merge_worker_row, record_attempt, script
from core.challenges import run as runs
from core.config import Config
from core.keys import LABS, job, key, keyspace, lab_dir
from core.procs import die_with_parent

PACE_MAX_S = 0.25  # real seconds a paced attempt sleeps at most before reading the clock when the server sends
# no keyspace notifications (a pause, a new speed, a storage outage that began: an in-flight upload fails at its
# first instant, so the retry keeps its moment); with them, it reads the clock and faults only when they change
POLL_FFMPEG_S = 0.05  # real seconds between looks at ffmpeg where no pidfd can wake the attempt when it exits
REFRESH_S = 2.0  # real seconds between refreshes of the attempt's barrier (it lapses after clock.BARRIER_TTL)
PROGRESS_GAP_S = 1.0  # real seconds at least between two tenths of a job's progress: the worker card's bar moves
# about once a second at any speed (every tenth while a tenth takes longer than that; at 20× a 120 s job shows 5)
SUBSCRIBE_CONFIRM_S = 10.0  # real seconds the server may take to confirm a subscription (a busy box)
NOTIFY_CHECK_S = 30.0  # real seconds a worker trusts its last look at whether the server sends notifications
_conn: redis.Redis | None = None
_notify: tuple[float, str] | None = None  # (monotonic time of the look, the server's notify-keyspace-events)


def connection() -> redis.Redis:
    global _conn
    if _conn is None:
        # nothing sent on connect (no HELLO, no CLIENT SETINFO): a horse is one process per job, and its
        # connections (this one, and its Watch's) are its own
        _conn = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True, protocol=2, driver_info=None)
    return _conn


def keyspace_flags(r: redis.Redis) -> str:
    """The server's `notify-keyspace-events` ("" if it will not say). An answer that the server notifies of hash
    writes is trusted for NOTIFY_CHECK_S (the supervisor's Waker keeps the setting on); any other is asked again
    next time, so a watch polls only while the server really sends nothing. The worker parent looks before it
    forks a horse (workers/rqworker.py), so a horse starts with a fresh answer in hand instead of asking the
    server for it with every job."""
    global _notify
    if _notify is None or time.monotonic() - _notify[0] >= NOTIFY_CHECK_S:
        try:
            flags = next(iter(r.config_get("notify-keyspace-events").values()), "")
        except redis.ResponseError:
            flags = ""
        flags = flags.decode() if isinstance(flags, bytes) else flags
        _notify = (time.monotonic(), flags) if notifies(flags) else None
        return flags
    return _notify[1]


def notifies(flags: str) -> bool:
    """Whether these `notify-keyspace-events` flags send a keyspace notification for every hash write."""
    return "K" in flags and ("h" in flags or "A" in flags)


def worker_id() -> str:
    return os.environ.get("LAB_WORKER_ID", "w?")


IDLE = {"state": "idle", "job_id": None, "attempt": None, "horse_pid": None, "progress": None}  # a row between jobs


def set_worker(r: redis.Redis, lab: str, **fields) -> None:
    """Merge fields into this worker's row (the supervisor owns pid and lifecycle states)."""
    merge_worker_row(r, lab, worker_id(), fields)


def progress_event(job_id: str, attempt: int, pct: int, now: float) -> str:
    """The attempt's new tenth, as a job.progress event (a busy lab shows about one a second per job). Pages hear
    it live; a snapshot finds it among the lab's newest events (core/registry.py PROGRESS_LOOKBACK) and shows it
    on this worker's row while the row still runs this attempt."""
    return stream.encode("job.progress", now, job_id=job_id, worker_id=worker_id(), attempt=attempt, percent=pct)


def report_progress(r: redis.Redis, lab: str, job_id: str, attempt: int, pct: int, now: float) -> None:
    """A new tenth on its own: one command."""
    stream.append(r, lab, "job.progress", now, job_id=job_id, worker_id=worker_id(), attempt=attempt, percent=pct)


def rides_with_beat(settings: dict, speed: float) -> bool:
    """A new tenth waits for the attempt's next heartbeat and goes in its round trip (one wake-up of the server,
    not two) where beats come at least once a PROGRESS_GAP_S real seconds: at 20× a 10 s heartbeat beats every
    0.5 real s."""
    return bool(settings["heartbeat"]) and speed > 0 and settings["heartbeat_interval"] / speed <= PROGRESS_GAP_S


def output_paths(
    var_dir: Path, lab: str, job_id: str, rendition: str, attempt: int, idempotent: bool, ext: str = "mp4"
) -> tuple[Path, Path]:
    """(temp, final). Deterministic final path when guarded; per-attempt names when not."""
    base = lab_dir(var_dir, lab) / "transcoded" / job_id
    name = f"{rendition}.{ext}" if idempotent else f"{rendition}-{worker_id()}-a{attempt}.{ext}"
    return base / f".tmp-{worker_id()}-a{attempt}-{rendition}.{ext}", base / name


def run_attempt(lab: str, job_id: str, attempt: int) -> None:
    """One delivery (number `attempt`) of the job's message, received by this worker."""
    die_with_parent()  # this work horse goes when its worker goes (RQ's fork clears the setting)
    r = connection()
    with r.pipeline(transaction=False) as pipe:  # what the attempt starts from, in one round trip
        pipe.sismember(LABS, lab)
        pipe.get(key(lab, "settings"))
        pipe.hgetall(key(lab, "clock"))
        pipe.hgetall(runs.row_key(lab))
        live, raw_settings, clock_hash, challenge = pipe.execute()
    if not live:
        return
    settings = registry.parse_settings(raw_settings)
    wid = worker_id()
    now = clock.reading(clock_hash, time.time())["t_raw"]
    delivery = get_current_job()  # RQ's job in hand (no read): its id names this delivery's hand-off note
    note = handoff.note_of(job_id, attempt, delivery.id) if delivery else ""
    outcome, rec = leases.receive(r, lab, job_id, attempt, wid, now, settings, os.getpid(), note)
    if outcome != leases.RUN:
        # the delivery has arrived (even a stale copy: delivery `attempt` was received, or will never be); its
        # own barrier only: this worker is idle again at once and takes the delivery any other was held for
        clock.lift(r, lab, handoff.transit_holder(job_id, attempt))
        return  # a stale copy, a copy that backed off (claim), or a finished job's message acked and dropped
    holder = f"{job_id}:{attempt}"
    # the clock waits here while the attempt checks its input (a real decode of a fraction of a second,
    # which would otherwise cost tens of simulated seconds at 200×); pace() moves the barrier on. Held in
    # the step the hand-off's barrier goes in, so the clock never runs between the two, and the row says busy
    # in that step too, so a producer never counts this worker idle with no delivery on its way to it
    busy = {"state": "busy", "job_id": job_id, "attempt": attempt, "horse_pid": os.getpid()}
    handoff.received(r, lab, job_id, attempt, holder=holder, at=now, row=busy, wid=wid)
    record = {"attempt": attempt, "worker": wid, "pid": os.getpid(), "start": round(now, 3)}
    rng = retry.jitter_rng(settings["jitter_seed"], job_id, attempt)
    watch: Watch | None = None
    try:
        if rec.get("poison") == "crash":
            # A crashing pill: the handler kills the process that runs it, every time (as an OOM would).
            # No error reaches any handler; the lab narrates the crash (as a crash log would) and the
            # lease is left to expire.
            crash(r, lab, job_id, attempt, now, holder)
        # what the attempt knows of its lab's clock and faults, to its end: its first read comes after the hold
        # above (a clock read before it would not know this attempt's own barrier until its notification came)
        watch = Watch(r, lab)
        if runs.is_challenge_job(rec):
            # the learner's handler does the work, in its sandbox; the ack stays this worker's
            outputs = challenge_attempt(r, lab, job_id, attempt, rec, settings, now, rng, watch, challenge, holder)
            if outputs is None:
                return
        else:
            outputs = do_work(r, lab, job_id, attempt, rec, settings, now, rng, watch)
        end = watch.now()
        res = leases.complete(
            r,
            lab,
            job_id,
            attempt,
            wid,
            end,
            settings["guard"],
            {**record, "end": round(end, 3), "outcome": "succeeded"},
            outputs,
        )
        if res == leases.REFUSED_WRITE:
            record_attempt(r, lab, job_id, attempt, end=round(end, 3), outcome="refused (no longer the holder)")
        elif runs.is_challenge_job(rec):
            pass  # the handler sent its own email, or did not: that is what the checker reads
        elif res == leases.DUPLICATE:
            record_attempt(r, lab, job_id, attempt, end=round(end, 3), outcome="completed again (duplicate)")
            notify(r, lab, job_id, attempt, settings, end)
        else:
            notify(r, lab, job_id, attempt, settings, end)
    except Exception as e:  # noqa: BLE001 - every failure is recorded and decided by the retry policy
        end = getattr(e, "at", None) or clock.now(r, lab)  # (read: the watch's own connection may be what failed)
        if isinstance(e, StorageDown):
            retry.breaker_record(r, lab, end, settings, ok=False)
        attempts_used = int(rec.get("attempt", 1)) - int(rec.get("attempt_base", 0))
        first = float(rec.get("created_at", end))
        retry.fail_attempt(r, lab, job_id, attempt, wid, end, settings, e, attempts_used, first, record, rng)
    finally:
        # the next delivery's barrier goes where the clock is now: a hold never takes the clock back (clock.py),
        # so the attempt's first moment places it at the present without another read of the clock; the
        # attempt's own barrier goes in the same step
        handoff.hold_for_next(r, lab, now, holder, row=IDLE, wid=wid)  # and this worker's row says idle again
        if watch is not None:
            watch.close()


def crash(r: redis.Redis, lab: str, job_id: str, attempt: int, now: float, holder: str) -> NoReturn:
    """This work horse dies here, as a SIGKILL or an OOM would take it: no error reaches any handler; the lab
    narrates the crash (as a crash log would) and the lease is left to expire."""
    record_attempt(r, lab, job_id, attempt, end=round(now, 3), outcome="crashed")
    stream.emit(r, lab, "job.crashed", now, job_id=job_id, worker_id=worker_id(), attempt=attempt)
    set_worker(r, lab, **IDLE)
    clock.lift(r, lab, holder)
    os._exit(70)


def challenge_attempt(
    r: redis.Redis,
    lab: str,
    job_id: str,
    attempt: int,
    rec: dict,
    settings: dict,
    start: float,
    rng,
    watch: Watch,
    row: dict,
    holder: str,
) -> dict | None:
    """The attempt as the learner's handler runs it (workers/challenge.py): the outputs to ack with, or None when
    it backed off (its message stays in flight). A handler that raised fails the attempt (the retry policy
    decides); one that broke a limit ends the run and its job goes to the DLQ."""
    from workers import challenge  # (preloaded by workers/rqworker.py: it imports this module)

    if not runs.active(row, job_id):
        raise NonRetryable(f"its challenge run is over ({row.get('error') or row.get('state') or 'gone'})")
    att = challenge.Attempt(r, lab, job_id, attempt, rec, settings, start, rng, watch, row)
    try:
        out = att.run()
    except challenge.Crash:
        crash(r, lab, job_id, attempt, watch.now(), holder)
    budget = Config.from_env().challenge_cpu_s
    within = runs.spend_cpu(r, lab, out.cpu_s, budget)
    if out.kind == "backoff":
        now = watch.now()
        record_attempt(r, lab, job_id, attempt, end=round(now, 3), outcome="backed off")
        stream.emit(r, lab, "handler.backed_off", now, job_id=job_id, worker_id=worker_id(), attempt=attempt)
        return None
    if out.kind == "killed" or not within:
        why = out.why if out.kind == "killed" else f"the run used its {budget:g} CPU seconds"
        stream.emit(
            r, lab, "handler.stopped", watch.now(), job_id=job_id, worker_id=worker_id(), attempt=attempt, why=why
        )
        runs.end(r, lab, f"job {job_id}, attempt {attempt}: {why}")
        raise NonRetryable(f"handler stopped: {why}")
    if out.kind == "raised":
        raise HandlerError(out.why + (f" (line {out.line})" if out.line else ""))
    return att.outputs


class HandlerError(Exception):
    """The learner's handler raised: a failed attempt, as any job's exception is."""


def do_work(
    r: redis.Redis, lab: str, job_id: str, attempt: int, rec: dict, settings: dict, start: float, rng, watch: Watch
) -> dict:
    """Real ffmpeg, paced so the attempt lasts its simulated duration; returns rendition → URL.

    An attempt that fails leaves no partial `.tmp-*` output behind (a crashed one's are swept by the
    supervisor); a published output is counted against the lab's disk share."""
    try:
        return _do_work(r, lab, job_id, attempt, rec, settings, start, rng, watch)
    except BaseException:
        drop_temps(lab, job_id, attempt)
        raise


def drop_temps(lab: str, job_id: str, attempt: int) -> None:
    """This attempt's partial outputs, gone (a failed attempt's, or a fenced-off one's)."""
    base = lab_dir(Config.from_env().var_dir, lab) / "transcoded" / job_id
    blobs.remove_partials([base], f"{registry.TMP_PREFIX}{worker_id()}-a{attempt}-*")


def _do_work(
    r: redis.Redis, lab: str, job_id: str, attempt: int, rec: dict, settings: dict, start: float, rng, watch: Watch
) -> dict:
    var_dir = Config.from_env().var_dir
    payload = json.loads(rec["payload"])
    src = source_file(r, lab, rec["source"], var_dir)
    probe_once(r, src)
    idempotent = settings["idempotent_outputs"]
    renditions = payload["resolutions"] if payload["job_type"] == "transcode" else ["thumb"]
    videos = []  # (temp path, height) of every rendition, encoded from ONE decode of the source
    procs = []  # (ffmpeg running, the renditions it makes): the attempt is paced while they work
    for rend in renditions:
        tmp, _final = output_paths(var_dir, lab, job_id, rend, attempt, idempotent, "jpg" if rend == "thumb" else "mp4")
        if rend == "thumb":
            procs.append((media.start_thumbnail(src, tmp), "thumb"))
        else:
            videos.append((tmp, media.RENDITIONS[rend]))
    if videos:
        procs.append((media.start_transcodes(src, videos), ", ".join(r for r in renditions if r != "thumb")))
    try:
        pace(r, lab, job_id, attempt, settings, start, float(payload["duration_s"]), [p for p, _ in procs], rng, watch)
        for proc, made in procs:
            if proc.wait(timeout=media.LIMITS.ffmpeg_timeout) != 0:
                raise RuntimeError(f"ffmpeg failed on {made}: {proc.stderr.read().decode()[:200]}")
    finally:
        for proc, _made in procs:  # a failed attempt leaves no ffmpeg running
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if settings["guard"] == "fence" and not fence_holds(r, lab, job_id, attempt):
        # the fencing token at the storage's door: a newer attempt owns the job, so this one writes nothing
        # (its completion is refused next); the temps go, as a failed attempt's do
        drop_temps(lab, job_id, attempt)
        return {}
    # the attempt's barrier holds the clock at its end until it is lifted (run_attempt), so one reading serves
    # every output the attempt writes
    done_at = watch.now()
    store_outputs(r, lab, settings, done_at, watch.faults())
    files, outputs = {}, {}  # blob name → temp file; rendition → URL
    for rend in renditions:
        tmp, final = output_paths(var_dir, lab, job_id, rend, attempt, idempotent, "jpg" if rend == "thumb" else "mp4")
        files[f"transcoded/{job_id}/{final.name}"] = tmp
        outputs[rend] = f"/api/labs/{lab}/jobs/{job_id}/outputs/{final.name}"
    publish(r, lab, files, idempotent)
    stream.emit_all(
        r,
        lab,
        [
            ("output.written", done_at, {"job_id": job_id, "worker_id": worker_id(), "attempt": attempt, "path": name})
            for name in files
        ],
    )
    return outputs


def fence_holds(r: redis.Redis, lab: str, job_id: str, attempt: int) -> bool:
    """Whether this attempt's token is still the newest: the record is running and held by it (what the
    completion's compare-and-set checks, asked before any output is written)."""
    state, holder = r.hmget(job(lab, job_id), "state", "holder")
    return state == "running" and int(holder or 0) == attempt


def source_file(r: redis.Redis, lab: str, source: str, var_dir: Path) -> Path:
    """The job's input on this host: a blob fetched once into the local cache, or a sample clip."""
    try:
        return blobs.local_path(r, lab, source, var_dir)
    except FileNotFoundError as e:
        raise NonRetryable(f"source gone: {e}") from None


def publish(r: redis.Redis, lab: str, files: dict[str, Path], atomic: bool) -> None:
    """The attempt's outputs become blobs every host and web process can serve. Guarded: all of them in one
    step, each one SET of the whole file under its deterministic name (all stored, or none). Unguarded: each
    written in pieces under a per-attempt name, so a crash can leave one half-written (the lesson's bug)."""
    try:
        if atomic:
            blobs.put_many(r, lab, {name: tmp.read_bytes() for name, tmp in files.items()})
        else:
            for name, tmp in files.items():
                blobs.put_file(r, lab, name, tmp, atomic=False)
    except blobs.BlobFull as e:
        raise NonRetryable(f"output not stored: {e}") from None
    except redis.exceptions.OutOfMemoryError:
        raise NonRetryable("output not stored: the server's memory is full (maxmemory)") from None
    except blobs.LabGone:
        raise NonRetryable("output not stored: the lab was deleted") from None
    finally:
        for tmp in files.values():
            tmp.unlink(missing_ok=True)


def probe_once(r: redis.Redis, src: Path) -> None:
    """Decode-check a source once per file version: a real floor of ~0.3 s that, at 1000x, would
    otherwise eat 300 simulated seconds of every attempt."""
    st = src.stat()
    k = f"media:valid:{src}:{st.st_size}:{st.st_mtime_ns}"
    if r.get(k):
        return
    try:
        media.probe(src)
    except media.InvalidMedia as e:
        raise NonRetryable(f"invalid video: {e}") from None
    r.set(k, 1, ex=3600)


def pace(
    r: redis.Redis,
    lab: str,
    job_id: str,
    attempt: int,
    settings: dict,
    start: float,
    duration: float,
    procs: list,
    rng,
    watch: Watch,
    plans: list[list[float]] | None = None,
) -> None:
    """Hold the attempt until `duration` simulated seconds have passed and ffmpeg has finished,
    heart-beating and streaming its upload parts to storage all the while.

    Every moment this attempt must act at (its end, its next heartbeat, a storage retry that is due,
    its execution timeout) is a barrier on the lab's clock (clock.hold): simulated time waits there
    until the attempt has acted, so a busy host or a slow ffmpeg slows the clock instead of making
    the job overrun its duration or a heartbeat miss its lease.
    """
    faults = watch.faults()
    if float(faults.get("slow_until", -1)) > start:
        duration *= float(faults.get("slow_factor", 3))
    if not retry.breaker_allows(r, lab, start, settings):
        raise StorageDown("circuit open: not calling storage", at=start)
    holder = f"{job_id}:{attempt}"
    end_at = start + duration
    timeout_at = start + settings["exec_timeout"] if settings["exec_timeout"] else math.inf
    parts = UploadParts(r, lab, job_id, attempt, settings, start, rng, plans)
    last_beat, last_pct, real_start = start, 0, time.monotonic()
    shown_at = -math.inf  # real time the last tenth of progress was reported
    barrier, fresh_at = None, 0.0  # the barrier held, and the real time it was last stamped
    while True:
        state = clock.reading(watch.clock(), time.time())
        now = state["t_raw"]
        elapsed = now - start
        parts.step(now, watch.faults())
        if time.monotonic() - real_start > media.LIMITS.ffmpeg_timeout and any(p.poll() is None for p in procs):
            raise NonRetryable(f"ffmpeg ran longer than {media.LIMITS.ffmpeg_timeout:g} real seconds")
        if now >= timeout_at - 1e-6:
            raise TimeoutError(f"execution timeout {settings['exec_timeout']:g} s")
        pct = min(100, int(elapsed / duration * 100)) if duration > 0 else 100
        beat = settings["heartbeat"] and now - last_beat >= settings["heartbeat_interval"] - 1e-6
        rides = rides_with_beat(settings, state["speed"])
        shown = ""  # a new tenth's event, sent in this heartbeat's round trip
        if pct // 10 > last_pct // 10 and pct < 100 and time.monotonic() - shown_at >= PROGRESS_GAP_S:
            if beat:
                last_pct, shown_at, shown = pct, time.monotonic(), progress_event(job_id, attempt, pct, now)
            elif not rides:
                last_pct, shown_at = pct, time.monotonic()
                report_progress(r, lab, job_id, attempt, pct, now)
        if now >= end_at - 1e-6 and all(p.poll() is not None for p in procs) and parts.all_ok():
            return
        if beat:
            last_beat = now
        # the clock waits at the attempt's end until ffmpeg is done; past its end, an attempt still waiting
        # on a storage retry holds the clock at that retry instead
        real_work = any(p.poll() is None for p in procs)
        nxt = min(
            end_at if now < end_at - 1e-6 or real_work else math.inf,
            timeout_at,
            parts.next_due(),
            last_beat + settings["heartbeat_interval"] if settings["heartbeat"] else math.inf,
        )
        change = None  # the barrier moves with the heartbeat, in its round trip, when there is one
        stamp = time.monotonic() - fresh_at > REFRESH_S  # the barrier's real-time expiry is due a new stamp
        if nxt == math.inf:
            if barrier is not None:
                change, barrier = clock.barrier_call(lab, "lift", holder), None
        elif nxt != barrier:
            change, barrier = clock.barrier_call(lab, "hold", holder, nxt, refresh=stamp), nxt
            fresh_at = time.monotonic() if stamp else fresh_at
        elif stamp:
            if not clock.refresh(r, lab, holder):  # a long stall let the supervisor lift it: held again at once
                change = clock.barrier_call(lab, "hold", holder, nxt, refresh=False)  # (the refresh stamped it)
            fresh_at = time.monotonic()
        if beat:
            leases.extend_lease(
                r, lab, job_id, attempt, worker_id(), now, settings["heartbeat_extend"], then=change, progress=shown
            )
        elif change is not None:
            clock.apply(r, change)
        # sleep until the next moment this attempt acts at (a barrier, its next tenth of progress unless it rides
        # with a heartbeat, no sooner than PROGRESS_GAP_S after the last) or ffmpeg ends, looking at ffmpeg
        # locally meanwhile: the clock is read only when something is due
        step = start + duration * (last_pct // 10 + 1) / 10 if duration > 0 and not rides else math.inf
        if state["speed"] > 0 and not state["paused"]:
            wait = min(
                (nxt - now) / state["speed"],
                max((step - now) / state["speed"], shown_at + PROGRESS_GAP_S - time.monotonic()),
            )
        else:
            wait = watch.longest
        watch.wait(min(watch.longest, max(0.002, wait)), procs if real_work else [])


class Watch:
    """What a paced attempt knows of its lab's clock and faults hashes, and how it waits for them to change.

    The server's keyspace notifications (switched on by the supervisor's Waker) say when either hash is
    written: a pause, a new speed, a step, the lowest barrier moving (a lifted barrier lets the clock reach
    this attempt's next moment), a fault that begins. The attempt then reads that hash again, and only then,
    so a paced job costs the server nothing between the moments it acts at, yet reacts to any of those at
    once. Subscribed before the first read, so no change between the two is missed. A server that sends no
    notifications (it refused CONFIG SET) is polled every PACE_MAX_S instead, as before.

    The clock's most frequent change, a barrier's move, also publishes the hash as it left it
    (clock.state_channel), after that write's own notification and on the same subscription: the attempt takes
    it as its new reading without a read. Any later write notifies after it, so the last word is always heard.
    """

    def __init__(self, r: redis.Redis, lab: str):
        self.r = r
        self.keys = {"clock": key(lab, "clock"), "faults": key(lab, "faults")}
        self.state: dict[str, dict] = {}
        self.stale = set(self.keys)
        self.ps = None
        if notifies(keyspace_flags(r)):
            self.channels = {keyspace(r, k): name for name, k in self.keys.items()}
            self.published = clock.state_channel(lab)
            # on a connection of its own, not one of `r`'s: closed with the watch, it would otherwise be the next
            # one `r` hands out, and connect again (a handshake per job)
            pool = r.connection_pool
            self.ps = redis.Redis(
                connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
            ).pubsub()
            self.ps.subscribe(*self.channels, self.published)
            for _ in range(len(self.channels) + 1):  # every subscription confirmed before anything is read
                while (msg := self.ps.get_message(timeout=SUBSCRIBE_CONFIRM_S)) is None or msg["type"] != "subscribe":
                    if msg is None:
                        raise RuntimeError("the server did not confirm a keyspace subscription")
        # how long a wait may last with nothing due: with notifications, until the barrier's next refresh
        self.longest = REFRESH_S / 2 if self.ps is not None else PACE_MAX_S

    def _get(self, name: str) -> dict:
        if name in self.stale or self.ps is None:
            names = sorted(self.stale | {name})  # every hash due a read, in one round trip (both, at the start)
            with self.r.pipeline(transaction=False) as pipe:
                for n in names:
                    pipe.hgetall(self.keys[n])
                self.state.update(zip(names, pipe.execute(), strict=True))
            self.stale.clear()
        return self.state[name]

    def clock(self) -> dict:
        """The clock hash as stored now (read again only if it changed)."""
        return self._get("clock")

    def faults(self) -> dict:
        """The faults hash as stored now (read again only if it changed)."""
        return self._get("faults")

    def now(self) -> float:
        """The lab's simulated time now, from the clock as this watch last heard of it (every notification
        received so far taken in first): what a read of the clock would say, without the read."""
        self._heard()
        return clock.reading(self.clock(), time.time())["t_raw"]

    def wait(self, seconds: float, procs: list | None = None) -> bool:
        """Sleep up to `seconds`, or until every one of `procs` has exited if that is sooner; True as soon as
        the clock or faults changed meanwhile.

        Woken by the kernel, not by looking now and then: the moment ffmpeg exits (a pidfd becomes readable)
        or a notification arrives (the subscription's socket does). The attempt's barrier holds the lab's
        clock at its end until ffmpeg is done, so every millisecond between ffmpeg's exit and this attempt
        noticing it is one the lab's other workers wait for too."""
        procs = procs or []
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self._heard():
                return True
            running = [p for p in procs if p.poll() is None]
            if procs and not running:
                return False
            sock = getattr(self.ps.connection, "_sock", None) if self.ps is not None else None
            fds = [sock.fileno()] if sock is not None else []
            pidfd = _pidfd(running[0].pid) if running else None
            # without a pidfd (a kernel before 5.3, not Linux) ffmpeg is looked at every POLL_FFMPEG_S instead
            nap = min(left, POLL_FFMPEG_S) if running and pidfd is None else left
            try:
                if pidfd is None and not fds:
                    time.sleep(nap)
                else:
                    select.select(fds + ([pidfd] if pidfd is not None else []), [], [], nap)
            finally:
                if pidfd is not None:
                    os.close(pidfd)
        return self._heard()

    def _heard(self) -> bool:
        """Take every notification already received (without blocking); True if any came."""
        changed = False
        while self.ps is not None and (msg := self.ps.get_message(timeout=0)) is not None:
            if msg["type"] == "message" and msg["channel"] == self.published:
                self.state["clock"] = json.loads(msg["data"])
                self.stale.discard("clock")
                changed = True
            elif msg["type"] == "message":
                self.stale.add(self.channels[msg["channel"]])
                changed = True
        return changed

    def close(self) -> None:
        if self.ps is not None:
            self.ps.close()


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (it is unreaped: only this process reaps it, so the
    pid is still its own), or None where the system has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class UploadParts:
    """The attempt's output streams to storage as `upload_parts` parallel part uploads (a multipart
    upload), each one a storage call in flight while the job runs.

    A storage outage fails every in-flight call at its first instant; each caller then sleeps the retry
    policy's delay and calls storage again, inside the attempt, as the lesson's workers do — so with
    no jitter every caller that failed together comes back together (1, 3, 7, 15 × base). Each call
    that reaches storage is a `storage.called` event: the arrivals the chapter 4 histogram counts.
    A part that fails `max_attempts` calls fails the attempt (then the job-level retry policy decides).

    A challenge's handler brings its own policy (`plans`: per part, the delays before its 2nd, 3rd, … call, which
    its own retry function computed in the sandbox): a part then gives up when its plan runs out.
    """

    def __init__(
        self,
        r: redis.Redis,
        lab: str,
        job_id: str,
        attempt: int,
        settings: dict,
        start: float,
        rng,
        plans: list[list[float]] | None = None,
    ):
        self.r, self.lab, self.job_id, self.attempt, self.s, self.rng = r, lab, job_id, attempt, settings, rng
        # per part: ok = streaming since `since`; due = when its next call is made (None = none pending)
        count = len(plans) if plans is not None else int(settings.get("upload_parts", 1))
        self.parts = [
            {"ok": False, "since": start, "due": start, "tries": 0, "plan": plans[i] if plans is not None else None}
            for i in range(count)
        ]

    def next_due(self) -> float:
        return min((p["due"] for p in self.parts if p["due"] is not None), default=math.inf)

    def all_ok(self) -> bool:
        return all(p["ok"] for p in self.parts)

    def _schedule(self, p: dict, at: float, why: str) -> float:
        """After a failed call: the policy's delay, or give up (the attempt fails at `at`)."""
        p["ok"], p["tries"] = False, p["tries"] + 1
        if p["plan"] is not None:  # the handler's own policy: its delays, as many calls as it planned
            delay = p["plan"][p["tries"] - 1] if p["tries"] <= len(p["plan"]) else None
            if delay is None:
                raise StorageDown(f"storage unavailable ({why}) after {p['tries']} calls", at=at)
            p["due"] = at + delay
            return delay
        delay = retry.retry_delay(
            self.s["retry_policy"], p["tries"], self.s["retry_base"], self.s["retry_cap"], self.rng
        )
        if delay is None or p["tries"] >= self.s["max_attempts"]:
            raise StorageDown(f"storage unavailable ({why}) after {p['tries']} calls", at=at)
        p["due"] = at + delay
        return delay

    def step(self, now: float, faults: dict) -> None:
        """Make the calls due by `now`, with the lab's faults hash as it stands."""
        events: list = []
        try:
            self._step(now, faults, events)
        finally:
            self._emit(events)

    def _step(self, now: float, faults: dict, events: list) -> None:
        until, since = faults.get("storage_outage_until"), faults.get("storage_outage_from")
        down_from, down_until = (float(since), float(until)) if until and since else (math.inf, -math.inf)
        # calls in flight when the outage began fail at its first instant, all together
        in_flight = [p for p in self.parts if p["ok"] and p["since"] <= down_from <= now]
        if in_flight:
            events.append(
                ("storage.failed", down_from, {"parts": len(in_flight), "t": round(down_from, 3), "delays": []})
            )
            for p in in_flight:
                events[-1][2]["delays"].append(round(self._schedule(p, down_from, "outage"), 3))
        for i, p in enumerate(self.parts):
            if p["due"] is None or now < p["due"] - 1e-6:
                continue
            # The call is made at its due instant of simulated time. A step that runs late (this process
            # waited for a core) must not stack calls due at different instants into one: that bunching
            # would be the host's, not the retry policy's.
            at = p["due"]
            try_no = p["tries"] + 1
            if not retry.breaker_allows(self.r, self.lab, at, self.s):
                self._schedule(p, at, "circuit open: not calling storage")
                continue
            down = down_from <= at < down_until
            self.r.hincrby(key(self.lab, "storage"), "calls", 1)  # the call itself: one round trip to storage
            retry.breaker_record(self.r, self.lab, at, self.s, ok=not down)
            events.append(
                (
                    "storage.called",
                    at,
                    {
                        "part": i + 1,
                        "try": try_no,
                        "ok": not down,
                        "due": round(p["due"], 3),
                        "policy": self.s["retry_policy"],
                        "outcome": "storage down" if down else "ok",
                    },
                )
            )
            if down:
                self._schedule(p, at, "outage")
            else:
                p.update(ok=True, since=at, due=None)

    def _emit(self, events: list) -> None:
        if not events:
            return
        common = {"job_id": self.job_id, "worker_id": worker_id(), "attempt": self.attempt}
        retried = sum(1 for type_, _t, data in events if type_ == "storage.called" and data["try"] > 1)
        stream.emit_all(
            self.r,
            self.lab,
            [(type_, t, {**common, **data}) for type_, t, data in events],
            {stream.STORAGE_RETRIES: retried} if retried else None,
        )
        events.clear()


def store_outputs(r: redis.Redis, lab: str, settings: dict, now: float, faults: dict) -> None:
    """The 'upload to storage' step: fails while a storage outage fault (in the lab's `faults`) is on."""
    if not retry.breaker_allows(r, lab, now, settings):
        raise StorageDown("circuit open: not calling storage")
    if float(faults.get("storage_outage_until") or -1) > now:
        raise StorageDown("storage unavailable (outage fault)")
    retry.breaker_record(r, lab, now, settings, ok=True)


def notify(
    r: redis.Redis, lab: str, job_id: str, attempt: int, settings: dict, now: float, subject: str | None = None
) -> None:
    """The completion email: guarded by a 'notified' CAS flag (SET NX) so it goes out once; the flag, the mail
    and its event in one step."""
    common = {"job_id": job_id, "worker_id": worker_id(), "attempt": attempt}
    mail = json.dumps(
        {
            "job_id": job_id,
            "attempt": attempt,
            "t_sim": round(now, 3),
            "subject": subject or f"Your video (job {job_id}) is ready",
        }
    )
    script(r, _NOTIFY)(
        keys=[key(lab, "notified", job_id), key(lab, "outbox"), key(lab, "events"), key(lab, "counts")],
        args=[
            attempt,
            "1" if settings["notify_guard"] else "0",
            mail,
            stream.encode("email.sent", now, **common, **({"subject": subject} if subject else {})),
            stream.counter("email.sent"),
            stream.encode("email.suppressed", now, **common),
            stream.counter("email.suppressed"),
        ],
    )


# guarded: '1' to guard with the `notified` flag.
_NOTIFY = """
local notified, outbox, events, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local attempt, guarded, mail, sent_ev, sent_counter = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local suppressed_ev, suppressed_counter = ARGV[6], ARGV[7]
if guarded == '1' and not redis.call('SET', notified, attempt, 'NX') then
  emit(events, counts, suppressed_ev, suppressed_counter)
  return 0
end
redis.call('RPUSH', outbox, mail)
emit(events, counts, sent_ev, sent_counter)
return 1
"""
