"""Branching a run: "try again from here with different settings".

A branch is a new lab seeded from one moment of another lab's event stream: the jobs that were not
yet finished at that event are enqueued again as new jobs (same video, same renditions), under the
settings the parent had then with the learner's changes on top. Folding the stream (rather than
copying the parent's keys) is what lets any past moment be a starting point, and keeps the branch
honest: it starts from exactly what the scrubber showed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis
from flask import current_app

import chapters
from app import limits
from app.auth import request_token
from app.errors import ApiError
from app.store import get_redis, get_rq
from core import archive, blobs, clock, media, registry, slots, stream
from core.broker import producer
from core.keys import job, key

# the job states a fold of the stream ends in; the first three are "not yet done"
_UNFINISHED = ("queued", "running", "retrying")
_MOVES = {
    "job.enqueued": "queued",
    "job.claimed": "running",
    "job.redelivered": "queued",
    "job.resumed": "queued",
    "job.retry_started": "queued",
    "job.replayed": "queued",
    "job.retry_scheduled": "retrying",
    "job.succeeded": "done",
    "job.duplicate_completed": "done",
    "job.dead_lettered": "dlq",
    "job.lost": "lost",
}


def moment(r: redis.Redis, lab: str, at_event: str) -> dict[str, Any]:
    """The lab as it stood just after `at_event`: settings then, t_sim then, and each job's state.

    Raises LookupError if the stream does not hold that event (never existed, or trimmed away).
    """
    meta = r.hgetall(key(lab, "meta"))
    current = registry.settings(r, lab)
    # the lab started from its preset; settings.changed events carry every change since
    at_settings = chapters.settings_for(meta.get("preset") or chapters.DEFAULT_PRESET)
    at_settings.update(json.loads(meta["branch_settings"]) if meta.get("branch_settings") else {})
    at_settings["speed"] = current.get("speed", at_settings["speed"])
    jobs: dict[str, dict[str, Any]] = {}
    found = None
    after = "0"
    while found is None and (batch := stream.read_after(r, lab, after, count=2000)):
        after = batch[-1]["id"]
        for ev in batch:
            kind, data = ev["type"], ev.get("data") or {}
            if kind == "settings.changed":
                at_settings.update(data.get("changes") or {})
            elif kind == "job.enqueued":
                jobs[ev["job_id"]] = {
                    "job_id": ev["job_id"],
                    "state": "queued",
                    "job_type": data.get("job_type"),
                    "video_id": data.get("video_id"),
                    "duration_s": data.get("duration_s"),
                    "poison": _poison(data.get("poison")),
                }
            elif kind in _MOVES and ev.get("job_id") in jobs:
                jobs[ev["job_id"]]["state"] = _MOVES[kind]
            if ev["id"] == at_event:
                found = ev
                break
    if found is None:
        raise LookupError(at_event)
    return {"event": found, "t": found["t_sim"], "settings": at_settings, "jobs": list(jobs.values())}


def _poison(value: Any) -> str:
    """The job record's poison mode ("" or "crash"): the enqueued event writes False for none."""
    return value if isinstance(value, str) else ""


def unfinished(m: dict[str, Any]) -> list[dict[str, Any]]:
    """The moment's queue contents: jobs queued, running or waiting to retry, oldest first."""
    return sorted((j for j in m["jobs"] if j["state"] in _UNFINISHED), key=lambda j: int(j["job_id"]))


def _source(r: redis.Redis, parent: str, branch: str, j: dict[str, Any], var_dir: Path) -> tuple[str, list[str]]:
    """The parent job's input file and renditions; an upload is copied so the branch outlives its parent."""
    rec = r.hgetall(job(parent, j["job_id"]))
    payload = json.loads(rec.get("payload", "{}"))
    resolutions = payload.get("resolutions") or ["240p", "144p"]
    src = rec.get("source") or str(media.sample_clip(j["video_id"]) or media.sample_clip())
    if blobs.is_blob(src) and not blobs.copy(r, parent, branch, src[len(blobs.PREFIX) :]):
        # the parent's upload is gone (the parent ended and was swept): run the sample clip instead
        src = str(media.sample_clip(j["video_id"]) or media.sample_clip())
    return src, resolutions


def create_branch(
    r: redis.Redis,
    rq_conn: redis.Redis,
    parent: str,
    at_event: str,
    changes: dict[str, Any],
    speed: float | None,
    var_dir: Path,
    lab: str | None = None,
) -> dict[str, Any]:
    """A new lab from `parent` at `at_event`: that moment's settings + `changes`, its unfinished jobs again
    (`lab`: the id its running-lab slot was reserved under)."""
    m = moment(r, parent, at_event)
    new_settings = {**m["settings"], **changes}
    if speed is not None:
        new_settings["speed"] = speed
    preset = r.hget(key(parent, "meta"), "preset") or chapters.DEFAULT_PRESET
    seed = unfinished(m)
    created = registry.create(
        r,
        preset,
        new_settings["speed"],
        settings=new_settings,
        t0=m["t"],
        meta={
            "branch_of": parent,
            "branch_at": at_event,
            "branch_t": m["t"],
            "hold_until_ready": 1,
            "branch_changes": json.dumps(changes),
            "branch_settings": json.dumps(new_settings),
        },
        lab=lab,
    )
    lab = created["lab_id"]
    # held still until its workers are up (the supervisor resumes it), so a seeded job does not
    # seem to wait in the queue for the seconds worker processes take to start
    clock.pause(r, lab)
    try:
        sources = [_source(r, parent, lab, j, var_dir) for j in seed]
    except blobs.BlobFull:
        registry.teardown(r, lab, var_dir)  # nothing seeded yet: no half-made branch is left behind
        raise
    seeded = []
    for j, (source, resolutions) in zip(seed, sources, strict=True):
        payload = producer.enqueue_job(
            r,
            rq_conn,
            lab,
            job_type=j["job_type"] or "transcode",
            video_id=j["video_id"] or "bigbuckbunny",
            source=source,
            duration_s=j["duration_s"] or new_settings["job_duration"],
            resolutions=resolutions,
            idempotency_key=None,
            poison=j["poison"],
        )
        seeded.append({"job_id": payload["job_id"], "parent_job_id": j["job_id"], "was": j["state"]})
    stream.emit(
        r,
        lab,
        "lab.branched",
        m["t"],
        parent=parent,
        at_event=at_event,
        at=m["t"],
        changes=changes,
        jobs=len(seeded),
        seeded=seeded,
    )
    created["branch"] = {"parent": parent, "at_event": at_event, "at_t": m["t"], "changes": changes, "seeded": seeded}
    return created


def info(r: redis.Redis, lab: str) -> dict[str, Any] | None:
    """What a branch remembers of its parent (None for a lab that is not a branch)."""
    meta = r.hgetall(key(lab, "meta"))
    if not meta.get("branch_of"):
        return None
    return {
        "parent": meta["branch_of"],
        "at_event": meta["branch_at"],
        "at_t": float(meta["branch_t"]),
        "changes": json.loads(meta.get("branch_changes") or "{}"),
    }


# --- HTTP ------------------------------------------------------------------------------------


def branch_from_request(body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """POST /api/labs with `branch_of`: the body as `bodies.BRANCH` parsed it; check the parent's
    existence and token, then branch.

    Reading the parent's history needs its token (or view token), like any read of that lab.
    """
    r = get_redis()
    parent, at_event, clean, speed = body["branch_of"], body["at_event"], body.get("settings", {}), body.get("speed")
    if not registry.exists(r, parent):
        raise ApiError(404, "unknown_lab", f"no lab {parent!r} to branch from")
    token = request_token(parent)
    if not token:
        raise ApiError(
            401,
            "missing_token",
            "send the parent lab's token: Authorization: Bearer <token>",
            {"WWW-Authenticate": "Bearer"},
        )
    if registry.check_token(r, parent, token, allow_view=True) is None:
        raise ApiError(403, "forbidden", "this token does not open the lab to branch from")
    cfg = current_app.config["LAB"]
    archive.restore(r, parent)  # a parked parent folded away: its history is read below
    [lab] = limits.open_labs(r, [registry.processes_of({**registry.settings(r, parent), **clean})])
    try:
        created = create_branch(r, get_rq(), parent, at_event, clean, speed, cfg.var_dir, lab=lab)
        limits.opened(r, [lab])
    except LookupError:
        slots.forget(r, lab)
        raise ApiError(
            422,
            "unknown_event",
            {"at_event": f"lab {parent} holds no event {at_event} (never written, or trimmed from the capped stream)"},
        ) from None
    except blobs.BlobFull as e:
        slots.forget(r, lab)
        raise ApiError(
            507,
            "server_storage_full",
            f"copying the parent's uploads into the branch would pass "
            f"the {e.scope} storage cap of {e.cap} bytes; try again when other labs have ended",
        ) from None
    return created, 201
