"""The lab registry: create a lab from a preset, read its snapshot, touch it, tear it down.

A lab is an isolated sandbox: its own key prefix, RQ queue, workers, settings, clock and event
stream. Tokens are random and stored only as hashes; comparing hashes in constant time means a
leaked key dump or timing probe does not reveal a usable token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, cast

import redis

from core import archive, blobs, clock, slots, stream
from core.backoff import retry_bucket_s
from core.config import WORKER_READY_S
from core.events import COUNTERS
from core.keys import LABS, PARKED, job, key, lab_dir, msg, queue_name
from core.settings import DEFAULTS, LabSettings

BOOT = "boot"  # a new lab's barrier at its first moment, until a pass has started its workers (workers/pool.py)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_id() -> str:
    return secrets.token_hex(5)


def create(
    r: redis.Redis,
    preset: str,
    speed: float,
    settings: LabSettings,
    t0: float = 0.0,
    meta: dict[str, Any] | None = None,
    lab: str | None = None,
) -> dict[str, Any]:
    """Register a lab; the supervisor sees it in `labs` and starts its workers. Its clock starts at `t0` held
    there (`BOOT`) until the supervisor's first pass has started them, whose own start barriers then hold it
    until each is ready: a busy host delays a new lab in real time, never in simulated time.

    A branch (app/branch_seed.py) passes its own settings, a clock starting at the parent's moment and
    the meta fields that remember its parent. `lab`: the id its running-lab slot was reserved under
    (core/slots.py), which also held the deployment's and the client's caps on labs.
    """
    lab = lab or new_id()
    token, view_token = secrets.token_urlsafe(24), secrets.token_urlsafe(16)
    settings = settings.copy()
    settings["speed"] = speed
    with r.pipeline(transaction=True) as pipe:
        pipe.hset(
            key(lab, "meta"),
            mapping={
                "preset": preset,
                "created": time.time(),
                "last_active": time.time(),
                "token": _hash(token),
                "view_token": _hash(view_token),
                "seq": 0,
                **(meta or {}),
            },
        )
        pipe.set(key(lab, "settings"), json.dumps(settings))
        pipe.sadd(LABS, lab)
        pipe.execute()
    clock.start(r, lab, speed, t0, holder=BOOT, ttl=WORKER_READY_S)
    return {"lab_id": lab, "token": token, "view_token": view_token, "settings": settings}


def exists(r: redis.Redis, lab: str) -> bool:
    return bool(r.sismember(LABS, lab))


def check_token(r: redis.Redis, lab: str, token: str | None, allow_view: bool = False) -> str | None:
    """'owner' or 'viewer' if the token opens this lab, else None (constant-time compare)."""
    return access(r, lab, token, allow_view).role


class Access(NamedTuple):
    """What a call at a lab's door learns in one round trip: whether the lab exists, the token's role there
    (None: it opens nothing), when its owner last called (0: never) and whether it is parked."""

    exists: bool
    role: str | None
    last: float
    parked: bool


def access(r: redis.Redis, lab: str, token: str | None, allow_view: bool = False) -> Access:
    """The lab's `Access` for `token` (as `check_token`), read in one round trip."""
    with r.pipeline(transaction=False) as pipe:
        pipe.sismember(LABS, lab)
        pipe.hmget(key(lab, "meta"), "token", "view_token", "last_active")
        pipe.sismember(PARKED, lab)
        exists, stored, parked = pipe.execute()
    last = float(stored[2] or 0)
    given = _hash(token) if token else None
    role = (
        "owner"
        if given and stored[0] and hmac.compare_digest(stored[0], given)
        else "viewer"
        if given and allow_view and stored[1] and hmac.compare_digest(stored[1], given)
        else None
    )
    return Access(bool(exists), role, last, bool(parked))


def touch(r: redis.Redis, lab: str, last: float | None = None, gap: float = 0.0) -> None:
    """The owner called: the lab is in use (parking, idle expiry). With `last` (the stored time, as `access`
    read it), a call within `gap` seconds of it writes nothing: a busy lab's owner calls every second or two,
    and parking counts in tens of seconds."""
    now = time.time()
    if last is None or now - last >= gap:
        r.hset(key(lab, "meta"), "last_active", now)


def settings(r: redis.Redis, lab: str) -> LabSettings:
    return parse_settings(r.get(key(lab, "settings")))


def parse_settings(raw: str | None) -> LabSettings:
    """A lab's settings from their stored form (read in a pipeline with other keys, as a supervisor pass does);
    the schema defaults if none are stored."""
    # Stored only by create and update_settings, from the schema's defaults and validated values.
    return cast(LabSettings, json.loads(raw) if raw else dict(DEFAULTS))


def update_settings(r: redis.Redis, lab: str, changes: dict[str, Any]) -> LabSettings:
    current = cast(LabSettings, {**settings(r, lab), **changes})  # changes: settings.validate's clean values
    with r.pipeline(transaction=True) as pipe:
        pipe.set(key(lab, "settings"), json.dumps(current))
        # a new retry base or cap moves the retry histogram's bar: the event carries the new one
        bar = (
            {"retry_bucket_s": retry_bucket_s(current["retry_base"], current["retry_cap"])}
            if {"retry_base", "retry_cap"} & changes.keys()
            else {}
        )
        stream.append(pipe, lab, "settings.changed", clock.now(r, lab), changes=changes, **bar)
        pipe.execute()
    if "speed" in changes:
        clock.set_speed(r, lab, changes["speed"])
    return current


def next_job_number(r: redis.Redis, lab: str) -> int:
    """Jobs are numbered 1, 2, 3 … per lab so the narration can say 'job 7'."""
    return int(r.hincrby(key(lab, "meta"), "seq", 1))


def workers(r: redis.Redis, lab: str) -> list[dict]:
    return _sorted_workers(r.hgetall(key(lab, "workers")))


PROGRESS_LOOKBACK = 200
"""Newest events a snapshot reads for its busy workers' progress (a job.progress event per job about once a real
second: workers/tasks.py progress_event); a worker with none among them shows none until its next one."""
PROGRESS_FIRST = 32
"""Of those, the newest read with the rest of the snapshot: a busy lab's busy workers have their newest tenths
among them; only a worker with none there (an attempt just begun) has the rest read, in a second round trip."""


def _sorted_workers(rows: dict[str, str]) -> list[dict]:
    """The worker rows in id order."""
    return sorted((json.loads(v) for v in rows.values()), key=lambda w: int(w["id"].lstrip("w") or 0))


def _show_progress(workers: list[dict], recent: list, missing: set[tuple] | None = None) -> set[tuple]:
    """Each busy worker's progress in the attempt it runs now, from the lab's `recent` events (newest first, as
    XREVRANGE gives them): its newest job.progress event for that attempt. Only the rows `missing` names (all
    busy ones if None); the ones still without one are returned."""
    busy = {(w["id"], w.get("job_id"), w.get("attempt")): w for w in workers if w.get("state") == "busy"}
    if missing is not None:
        busy = {k: w for k, w in busy.items() if k in missing}
    for _id, fields in recent:
        if busy and '"job.progress"' in fields["e"]:
            ev = json.loads(fields["e"])
            w = busy.pop((ev.get("worker_id"), ev.get("job_id"), ev.get("attempt")), None)
            if w is not None:
                w["progress"] = ev["data"]["percent"]
    return set(busy)


def read_job(r: redis.Redis, lab: str, job_id: str) -> dict | None:
    found = read_jobs(r, lab, [job_id])
    return found[0] if found else None


JOB_READS = 3  # replies `_queue_job_reads` queues per job


def _queue_job_reads(pipe: redis.client.Pipeline, lab: str, ids: list[str]) -> None:
    """What the views of jobs `ids` fold, queued on `pipe`: each one's record, attempts and broker message
    (JOB_READS replies a job), then their leases' deadlines in one ZMSCORE."""
    for i in ids:
        pipe.hgetall(job(lab, i))
        pipe.hgetall(job(lab, i) + ":attempts")
        pipe.hgetall(msg(lab, i))
    if ids:
        pipe.zmscore(key(lab, "leases"), ids)


def _fold_job(job_id: str, deadline: float | None, raw: dict, attempt_rows: dict, m: dict) -> dict | None:
    if not raw:
        return None
    attempts = sorted((json.loads(v) for v in attempt_rows.values()), key=lambda a: a["attempt"])
    out = {k: v for k, v in raw.items() if k not in ("payload", "outputs", "source")}
    out["payload"] = json.loads(raw.get("payload", "{}"))
    out["attempt"] = int(raw.get("attempt", 0))
    out["attempts"] = attempts
    out["outputs"] = json.loads(raw.get("outputs", "{}"))
    for f in ("created_at", "claimed_at", "finished_at"):
        if f in out:
            out[f] = float(out[f])
    # the broker's message, kept apart from the record: visibility and receive count
    out["message"] = {"state": m.get("state", "deleted"), "receives": int(m.get("receives", 0)), "deadline": deadline}
    if out["message"]["state"] == "inflight" and deadline is not None:
        out["lease_deadline"] = deadline
    return out


def read_jobs(r: redis.Redis, lab: str, ids: list[str]) -> list[dict]:
    """The jobs `ids` in that order (gone ones left out), read in one atomic round trip."""
    with r.pipeline(transaction=True) as pipe:
        _queue_job_reads(pipe, lab, ids)
        raw = pipe.execute()
    return _fold_jobs(ids, raw)


def _fold_jobs(ids: list[str], raw: list) -> list[dict]:
    """The jobs from the replies `_queue_job_reads` queued for `ids` (gone ones left out)."""
    deadlines = raw[JOB_READS * len(ids)] if ids else []
    return [
        j
        for j in (_fold_job(i, deadlines[n], *raw[JOB_READS * n : JOB_READS * (n + 1)]) for n, i in enumerate(ids))
        if j
    ]


def list_jobs(r: redis.Redis, lab: str, limit: int = 200) -> list[dict]:
    """Newest first."""
    return read_jobs(r, lab, r.zrevrange(key(lab, "jobs"), 0, limit - 1))


def jobs_with_prefix(r: redis.Redis, lab: str, prefix: str, limit: int = 25) -> list[dict]:
    """Jobs whose number starts with `prefix`, newest first, however old (the snapshot holds 200).

    Job numbers are the scores of the `jobs` index, so the ids starting with "12" are a few score
    ranges (12, 120–129, 1200–1299, …): each one a ZREVRANGEBYSCORE, longest numbers first.
    """
    newest = int(r.hget(key(lab, "meta"), "seq") or 0)
    p = int(prefix)
    ranges, width = [], 1
    while p * width <= newest:
        ranges.append((p * width, min(newest, (p + 1) * width - 1)))
        width *= 10
    ids: list[str] = []
    for lo, hi in reversed(ranges):
        ids += r.zrevrangebyscore(key(lab, "jobs"), hi, lo, start=0, num=limit - len(ids))
        if len(ids) >= limit:
            break
    return read_jobs(r, lab, ids)


def counts(r: redis.Redis, lab: str) -> dict[str, int]:
    """Gauges from the state machine, counters from the event stream (same atomic writes)."""
    return _fold_counts(r.hgetall(key(lab, "states")), r.hgetall(key(lab, "counts")))


def counts_of(r: redis.Redis, lab_ids: list[str]) -> dict[str, dict[str, int] | None]:
    """Counts of many labs in one round trip (a room's dashboard polls every student's); None = lab gone."""
    with r.pipeline(transaction=False) as pipe:
        for lab in lab_ids:
            pipe.sismember(LABS, lab)
            pipe.hgetall(key(lab, "states"))
            pipe.hgetall(key(lab, "counts"))
        raw = pipe.execute()
    return {lab: _fold_counts(raw[3 * i + 1], raw[3 * i + 2]) if raw[3 * i] else None for i, lab in enumerate(lab_ids)}


def _fold_counts(state_rows: dict[str, str], counter_rows: dict[str, str]) -> dict[str, int]:
    states = {k: int(v) for k, v in state_rows.items()}
    counters = {k: int(v) for k, v in counter_rows.items()}
    out = {name: counters.get(name, 0) for name in COUNTERS}
    out.update(
        {
            "queued": states.get("queued", 0) + states.get("retrying", 0),
            "running": states.get("running", 0),
            "retrying": states.get("retrying", 0),
            "done": states.get("done", 0),
            "dlq": states.get("dlq", 0),
            "lost": states.get("lost", 0),
            "failed": counters.get("failed", 0),
            "redelivered": counters.get("redelivered", 0),
            "duplicates_blocked": counters.get("duplicates_blocked", 0),
            stream.STORAGE_RETRIES: counters.get(stream.STORAGE_RETRIES, 0),
        }
    )
    return out


SNAPSHOT_READS = 10  # replies `snapshot` queues after its jobs'


def snapshot(r: redis.Redis, lab: str, limit: int = 200) -> dict[str, Any]:
    """The lab at one instant: jobs, counts, workers, faults, settings and clock read in one MULTI/EXEC (after
    the job index), so a count never disagrees with the job list beside it (a job that finishes between two
    reads would otherwise be counted done while listed as running)."""
    ids = r.zrevrange(key(lab, "jobs"), 0, limit - 1)
    with r.pipeline(transaction=True) as pipe:
        _queue_job_reads(pipe, lab, ids)
        pipe.hgetall(key(lab, "states"))
        pipe.hgetall(key(lab, "counts"))
        pipe.hgetall(key(lab, "workers"))
        pipe.hgetall(key(lab, "faults"))
        pipe.hgetall(key(lab, "breaker"))
        pipe.xrevrange(key(lab, "events"), count=PROGRESS_FIRST)
        pipe.get(key(lab, "settings"))
        pipe.hmget(key(lab, "meta"), "preset", "outputs_cleared")
        pipe.hgetall(key(lab, "clock"))
        pipe.xinfo_stream(key(lab, "events"))
        raw = pipe.execute(raise_on_error=False)
    real = time.time()
    state_rows, counter_rows, worker_rows, faults, breaker, recent, stored, (preset, cleared), clock_state, info = raw[
        -SNAPSHOT_READS:
    ]
    for reply in raw[:-1]:  # the stream's info is an error while the lab has no events yet: none trimmed
        if isinstance(reply, Exception):
            raise reply
    s = parse_settings(stored)
    workers = _sorted_workers(worker_rows)
    missing = _show_progress(workers, recent)
    if missing and len(recent) == PROGRESS_FIRST:  # the older ones, as one read of PROGRESS_LOOKBACK would give
        older = r.xrevrange(key(lab, "events"), max=f"({recent[-1][0]}", count=PROGRESS_LOOKBACK - PROGRESS_FIRST)
        _show_progress(workers, older, missing)
    return {
        "lab_id": lab,
        "preset": preset,
        "settings": s,
        "retry_bucket_s": retry_bucket_s(s["retry_base"], s["retry_cap"]),
        "clock": clock.reading(clock_state, real),
        "counts": _fold_counts(state_rows, counter_rows),
        "workers": workers,
        "jobs": _fold_jobs(ids, raw),
        "faults": faults,
        "breaker": breaker or {"state": "closed"},
        "last_event_id": recent[0][0] if recent else "0",
        "events_trimmed": 0 if isinstance(info, Exception) else events_trimmed(info),
        # blobs.make_room took the earlier jobs' outputs (a term's old parked lab): when, and the sentence its page says
        "outputs_cleared": {"at": float(cleared), "note": blobs.cleared_sentence(float(cleared))} if cleared else None,
    }


def events_trimmed(info: dict) -> int:
    """Events the stream no longer holds (it keeps about the newest 20,000), from its XINFO STREAM reply: a view
    rebuilt from it cannot show the lab before its first kept event, and says so."""
    return max(0, int(info.get("entries-added", info["length"])) - int(info["length"]))


TMP_PREFIX = ".tmp-"
"""Partial outputs of an attempt in progress (workers.tasks.output_paths): never counted, swept when orphaned."""


EXPIRED = "labs:expired"  # lab → when it expired (a sorted set: the ids are members, never key names)
EXPIRED_KEEP_S = 30 * 24 * 3600
"""How long the note that a lab expired outlives it, so its page can say so instead of a bare 404."""


def expire(r: redis.Redis, lab: str, var_dir: Path) -> None:
    """Remove a lab that went unused past LAB_IDLE_TTL, noting when (`gone_why`)."""
    teardown(r, lab, var_dir)
    now = time.time()
    with r.pipeline(transaction=False) as pipe:
        pipe.zadd(EXPIRED, {lab: now})
        pipe.zremrangebyscore(EXPIRED, "-inf", now - EXPIRED_KEEP_S)
        pipe.execute()


def gone_why(r: redis.Redis, lab: str, idle_ttl: float) -> str | None:
    """The plain sentence an expired lab's page shows, or None if the lab never existed (or expired long ago)."""
    if r.zscore(EXPIRED, lab) is None:
        return None
    return (
        f"This lab was removed after {_span(idle_ttl)} without a visit, and its history with it. A fresh lab starts "
        "in its place."
    )


def _span(seconds: float) -> str:
    """A lifetime in words: whole days from two days up, whole hours from two hours up, else minutes (at least 1)."""
    for unit, size in (("day", 86400), ("hour", 3600)):
        if (n := round(seconds / size)) >= 2:
            return f"{n} {unit}s"
    n = max(1, round(seconds / 60))
    return f"{n} minute{'s' if n != 1 else ''}"


def teardown(r: redis.Redis, lab: str, var_dir: Path) -> None:
    """Remove every key and file the lab owns (its workers are the supervisor's to stop)."""
    r.srem(LABS, lab)
    slots.forget(r, lab)
    r.srem(PARKED, lab)
    archive.forget(r, lab)
    blobs.forget_lab(r, lab)  # its uploads and outputs (swept below with every lab:{id}: key)
    # media:valid:<path> remembers which uploads passed the decode check; their paths name the lab.
    for pattern in (
        f"lab:{lab}:*",
        f"rq:*{queue_name(lab)}*",
        f"rq:job:{lab}-*",
        f"media:valid:{lab_dir(var_dir, lab)}/*",
    ):
        batch = list(r.scan_iter(match=pattern, count=500))
        for i in range(0, len(batch), 500):
            r.delete(*batch[i : i + 500])
    shutil.rmtree(lab_dir(var_dir, lab), ignore_errors=True)


def status_body(j: dict, lab_id: str) -> dict[str, Any]:
    """What a client needs to know, and nothing that changes while nothing happens (no lease deadline)."""
    done = j["state"] == "done"
    return {
        "job_id": j["id"],
        "status": j["state"],
        "attempt_count": j["attempt"],
        "result_urls": j["outputs"] if done else None,
        "status_url": f"/api/labs/{lab_id}/jobs/{j['id']}/status",
    }


def processes_of(lab_settings: Mapping[str, Any]) -> int:
    """Processes a lab with these settings runs: its rq workers (chapter 6's fleets are some of them) and
    chapter 7's scheduler replicas."""
    return int(lab_settings.get("workers", 0)) + int(lab_settings.get("scheduler_replicas", 0))


def workers_in_use(r: redis.Redis, exclude: str | None = None) -> int:
    """Processes every live lab asks for (what the supervisor will run: workers and scheduler
    replicas), leaving out `exclude`."""
    return sum(processes_of(settings(r, lab)) for lab in r.smembers(LABS) if lab != exclude)
