"""RQ job functions: what a real worker process runs for one delivery of one job attempt.

`run_attempt` is the whole worker loop of the lesson in one place: claim (lease), do the work
paced on the lab's clock with heartbeats, write outputs atomically, then ack (CAS to done) and
send the completion email once. It never decides redelivery: that is the reaper's job, which is
exactly why a worker that is killed mid-job still gets its message back.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import redis

from core import blobs, clock, registry, stream
from core.config import Config
from core.keys import job, key
from workers import media
from workers.broker import leases, retry
from workers.broker.retry import NonRetryable, StorageDown
from workers.broker.state import record_attempt
from workers.process import die_with_parent

TICK = 0.05  # real seconds between clock reads while a job is paced
_conn: redis.Redis | None = None


def connection() -> redis.Redis:
    global _conn
    if _conn is None:
        _conn = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
    return _conn


def worker_id() -> str:
    return os.environ.get("LAB_WORKER_ID", "w?")


def set_worker(r: redis.Redis, lab: str, **fields) -> None:
    """Merge fields into this worker's row (the supervisor owns pid and lifecycle states)."""
    k, wid = key(lab, "workers"), worker_id()
    raw = r.hget(k, wid)
    if raw is None:
        return
    row = json.loads(raw)
    if row.get("state") in ("dead", "respawning"):
        return
    row.update(fields)
    r.hset(k, wid, json.dumps(row))


def output_paths(var_dir: Path, lab: str, job_id: str, rendition: str, attempt: int,
                 idempotent: bool, ext: str = "mp4") -> tuple[Path, Path]:
    """(temp, final). Deterministic final path when guarded; per-attempt names when not."""
    base = registry.lab_dir(var_dir, lab) / "transcoded" / job_id
    name = f"{rendition}.{ext}" if idempotent else f"{rendition}-{worker_id()}-a{attempt}.{ext}"
    return base / f".tmp-{worker_id()}-a{attempt}-{rendition}.{ext}", base / name


def run_attempt(lab: str, job_id: str, attempt: int) -> None:
    die_with_parent()  # this work horse goes when its worker goes (RQ's fork clears the setting)
    r = connection()
    if not registry.exists(r, lab):
        return
    settings = registry.settings(r, lab)
    wid = worker_id()
    now = clock.now(r, lab)
    if not leases.claim(r, lab, job_id, attempt, wid, now, settings["vt_seconds"],
                        settings["ack_mode"], os.getpid()):
        return  # a stale delivery: a newer attempt owns the job, or it is finished
    set_worker(r, lab, state="busy", job_id=job_id, attempt=attempt, horse_pid=os.getpid())
    record = {"attempt": attempt, "worker": wid, "pid": os.getpid(), "start": round(now, 3)}
    rec = r.hgetall(job(lab, job_id))
    rng = retry.jitter_rng(settings["jitter_seed"], job_id, attempt)
    try:
        if rec.get("poison") == "1":
            # A poison pill: the handler crashes the process that runs it, every time. The lab
            # narrates the crash (as a crash log would); the lease is left to expire.
            record_attempt(r, lab, job_id, attempt, end=round(now, 3), outcome="crashed")
            stream.emit(r, lab, "job.crashed", now, job_id=job_id, worker_id=wid, attempt=attempt)
            set_worker(r, lab, state="idle", job_id=None, attempt=None, horse_pid=None, progress=None)
            os._exit(70)
        outputs = do_work(r, lab, job_id, attempt, rec, settings, now)
        end = clock.now(r, lab)
        res = leases.complete(r, lab, job_id, attempt, wid, end, settings["cas_guard"],
                              {**record, "end": round(end, 3), "outcome": "succeeded"}, outputs)
        if res == leases.REFUSED:
            record_attempt(r, lab, job_id, attempt, end=round(end, 3), outcome="refused (stale attempt)")
        else:
            notify(r, lab, job_id, attempt, settings, end)
    except Exception as e:  # noqa: BLE001 - every failure is recorded and decided by the retry policy
        end = getattr(e, "at", None) or clock.now(r, lab)
        if isinstance(e, StorageDown):
            retry.breaker_record(r, lab, end, settings, ok=False)
        attempts_used = attempt - int(rec.get("attempt_base", 0))
        first = float(rec.get("created_at", end))
        retry.fail_attempt(r, lab, job_id, attempt, wid, end, settings, e, attempts_used, first,
                           record, rng)
    finally:
        set_worker(r, lab, state="idle", job_id=None, attempt=None, horse_pid=None, progress=None)


def do_work(r: redis.Redis, lab: str, job_id: str, attempt: int, rec: dict, settings: dict,
            start: float) -> dict:
    """Real ffmpeg, paced so the attempt lasts its simulated duration; returns rendition → URL.

    An attempt that fails leaves no partial `.tmp-*` output behind (a crashed one's are swept by the
    supervisor); a published output is counted against the lab's disk share."""
    try:
        return _do_work(r, lab, job_id, attempt, rec, settings, start)
    except BaseException:
        base = registry.lab_dir(Config.from_env().var_dir, lab) / "transcoded" / job_id
        for tmp in base.glob(f"{registry.TMP_PREFIX}{worker_id()}-a{attempt}-*"):
            tmp.unlink(missing_ok=True)
        raise


def _do_work(r: redis.Redis, lab: str, job_id: str, attempt: int, rec: dict, settings: dict,
             start: float) -> dict:
    var_dir = Config.from_env().var_dir
    payload = json.loads(rec["payload"])
    src = source_file(r, lab, rec["source"], var_dir)
    probe_once(r, src)
    idempotent = settings["idempotent_outputs"]
    renditions = payload["resolutions"] if payload["job_type"] == "transcode" else ["thumb"]
    procs = {}
    try:
        for rend in renditions:
            tmp, final = output_paths(var_dir, lab, job_id, rend, attempt, idempotent,
                                      "jpg" if rend == "thumb" else "mp4")
            if rend == "thumb":
                media.thumbnail(src, tmp)
            else:
                procs[rend] = (media.start_transcode(src, tmp, media.RENDITIONS[rend]), tmp, final)
        pace(r, lab, job_id, attempt, settings, start, float(payload["duration_s"]),
             [proc for proc, _tmp, _final in procs.values()])
        for rend, (proc, _tmp, _final) in procs.items():
            if proc.wait(timeout=media.LIMITS.ffmpeg_timeout) != 0:
                raise RuntimeError(f"ffmpeg failed on {rend}: {proc.stderr.read().decode()[:200]}")
    finally:
        for proc, _tmp, _final in procs.values():  # a failed attempt leaves no ffmpeg running
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    store_outputs(r, lab, settings, clock.now(r, lab))
    outputs = {}
    for rend in renditions:
        tmp, final = output_paths(var_dir, lab, job_id, rend, attempt, idempotent,
                                  "jpg" if rend == "thumb" else "mp4")
        publish(r, lab, f"transcoded/{job_id}/{final.name}", tmp, idempotent)
        outputs[rend] = f"/api/labs/{lab}/jobs/{job_id}/outputs/{final.name}"
        stream.emit(r, lab, "output.written", clock.now(r, lab), job_id=job_id, worker_id=worker_id(),
                    attempt=attempt, path=f"transcoded/{job_id}/{final.name}")
    return outputs


def source_file(r: redis.Redis, lab: str, source: str, var_dir: Path) -> Path:
    """The job's input on this host: a blob fetched once into the local cache, or a sample clip."""
    try:
        return blobs.local_path(r, lab, source, var_dir)
    except FileNotFoundError as e:
        raise NonRetryable(f"source gone: {e}") from None


def publish(r: redis.Redis, lab: str, name: str, tmp: Path, atomic: bool) -> None:
    """An output becomes a blob every host and web process can serve. Guarded: one SET of the whole
    file under its deterministic name. Unguarded: written in pieces under a per-attempt name, so a
    crash can leave it half-written (the lesson's bug)."""
    try:
        blobs.put_file(r, lab, name, tmp, atomic=atomic)
    except blobs.BlobFull as e:
        raise NonRetryable(f"output not stored: {e}") from None
    finally:
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


def pace(r: redis.Redis, lab: str, job_id: str, attempt: int, settings: dict, start: float,
         duration: float, procs: list) -> None:
    """Hold the attempt until `duration` simulated seconds have passed and ffmpeg has finished,
    heart-beating all the while (a busy host can make the real work outlast the simulated time)."""
    faults = r.hgetall(key(lab, "faults"))
    if float(faults.get("slow_until", -1)) > start:
        duration *= float(faults.get("slow_factor", 3))
    if not retry.breaker_allows(r, lab, start, settings):
        raise StorageDown("circuit open: not calling storage", at=start)
    last_beat, last_pct, real_start = start, 0, time.monotonic()
    while True:
        now = clock.now(r, lab)
        elapsed = now - start
        storage_check(r, lab, start, now)
        if time.monotonic() - real_start > media.LIMITS.ffmpeg_timeout and any(p.poll() is None for p in procs):
            raise NonRetryable(f"ffmpeg ran longer than {media.LIMITS.ffmpeg_timeout:g} real seconds")
        if settings["exec_timeout"] and elapsed > settings["exec_timeout"]:
            raise TimeoutError(f"execution timeout {settings['exec_timeout']:g} s")
        pct = min(100, int(elapsed / duration * 100)) if duration > 0 else 100
        if pct // 10 > last_pct // 10 and pct < 100:
            last_pct = pct
            set_worker(r, lab, progress=pct)
            stream.emit(r, lab, "job.progress", now, job_id=job_id, worker_id=worker_id(),
                        attempt=attempt, percent=pct)
        if elapsed >= duration and all(p.poll() is not None for p in procs):
            return
        if settings["heartbeat"] and now - last_beat >= settings["heartbeat_interval"]:
            leases.extend_lease(r, lab, job_id, attempt, worker_id(), now, settings["heartbeat_extend"])
            last_beat = now
        time.sleep(TICK)


def storage_check(r: redis.Redis, lab: str, start: float, now: float) -> None:
    """The attempt streams its output to storage while it runs, so an outage fails every in-flight
    attempt at the moment it begins: the synchronized failure that makes retries a herd."""
    until, since = r.hmget(key(lab, "faults"), "storage_outage_until", "storage_outage_from")
    if until and float(until) > now:
        raise StorageDown("storage unavailable (outage fault)", at=max(start, float(since or start)))


def store_outputs(r: redis.Redis, lab: str, settings: dict, now: float) -> None:
    """The 'upload to storage' step: fails while a storage outage fault is on."""
    if not retry.breaker_allows(r, lab, now, settings):
        raise StorageDown("circuit open: not calling storage")
    if float(r.hget(key(lab, "faults"), "storage_outage_until") or -1) > now:
        raise StorageDown("storage unavailable (outage fault)")
    retry.breaker_record(r, lab, now, settings, ok=True)


def notify(r: redis.Redis, lab: str, job_id: str, attempt: int, settings: dict, now: float) -> None:
    """The completion email: guarded by a 'notified' CAS flag (SET NX) so it goes out once."""
    if settings["notify_guard"] and not r.set(key(lab, "notified", job_id), attempt, nx=True):
        stream.emit(r, lab, "email.suppressed", now, job_id=job_id, worker_id=worker_id(),
                    attempt=attempt)
        return
    r.rpush(key(lab, "outbox"), json.dumps({"job_id": job_id, "attempt": attempt, "t_sim": round(now, 3),
                                            "subject": f"Your video (job {job_id}) is ready"}))
    stream.emit(r, lab, "email.sent", now, job_id=job_id, worker_id=worker_id(), attempt=attempt)
