"""Chapter 3's status resource: the small body a client polls, conditional GETs, and long-polls.

`GET .../status` answers the lesson's status body (job id, status, attempt count, result) with an
ETag of exactly that body, so a poll that learns nothing gets a bodiless 304. `?wait=N` turns the
same GET into a long-poll. The hold blocks on the lab's event stream (XREAD BLOCK): every state
change is appended to that stream in the same atomic step as the change, so a held request wakes
the moment its job moves, with no re-check loop. A held request costs a greenlet and a blocking
server connection, so held polls are capped per web process (503) and per lab (429): beyond the cap
the client is told to fall back to plain polling rather than left hanging.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from app import limits
from app.auth import lab_access
from app.errors import ApiError
from app.http import job_or_404
from app.longpoll import CLIENTS, conditional, etag_of, held_now
from app.store import get_redis, get_rq
from core import registry
from core.broker import leases, reaper
from core.keys import key

bp = Blueprint("status", __name__)

MAX_BATCH = 50  # job ids one multi-job status request may name


@bp.get("/api/labs/<lab_id>/jobs/<job_id>/status")
@lab_access(write=False)
def job_status(lab_id: str, job_id: str):
    """The lesson's status body with an ETag; If-None-Match → 304; ?wait=N (≤ 25 s) long-polls.

    A long-poll answers 200 the moment the status changes, or 304 (nothing changed) when the window
    closes and the client simply asks again. `?client=poll|etag|long` labels the request in the lab's
    server-side tally (GET .../status-load).
    """
    r = get_redis()

    def view() -> tuple[dict, str]:
        body = registry.status_body(job_or_404(lab_id, job_id), lab_id)
        return body, etag_of(body)

    return conditional(r, lab_id, {job_id}, view)


@bp.get("/api/labs/<lab_id>/status")
@lab_access(write=False)
def jobs_status(lab_id: str):
    """Several jobs' status bodies in one answer (?jobs=1,2,3), with one ETag; ?wait=N holds until any changes.

    A browser opens at most six connections to a host, so a page holds one long-poll for all the jobs
    it watches rather than one per job (which would leave it no connection for anything else).
    """
    ids = [i for i in request.args.get("jobs", "").split(",") if i]
    if not ids or len(ids) > MAX_BATCH:
        raise ApiError(422, "invalid_jobs", {"jobs": f"send 1–{MAX_BATCH} job ids, comma-separated"})
    r = get_redis()

    def view() -> tuple[dict, str]:
        body = {"jobs": [registry.status_body(job_or_404(lab_id, i), lab_id) for i in ids]}
        return body, etag_of(body)

    return conditional(r, lab_id, set(ids), view)


@bp.get("/api/labs/<lab_id>/status-load")
@lab_access(write=False)
def status_load(lab_id: str):
    """What each labelled status watcher cost the server: requests, body bytes, 304s, long-polls held now."""
    raw = get_redis().hgetall(key(lab_id, "status_load"))
    out = {c: {"requests": 0, "bytes": 0, "not_modified": 0} for c in CLIENTS}
    for field, value in raw.items():
        client, _, name = field.partition(":")
        if client in out:
            out[client][name] = int(value)
    return jsonify(
        clients=out, long_polls_held=held_now(lab_id), long_poll_cap=current_app.config["LAB"].long_poll_per_lab
    )


@bp.post("/api/labs/<lab_id>/jobs/<job_id>/late-delivery")
@lab_access(write=True)
def late_delivery(lab_id: str, job_id: str):
    """Deliver the job's message once more, as an at-least-once broker may.

    A real worker receives it and tries the queued → running compare-and-swap; on a finished job the CAS
    finds `done` and refuses (`job.claim_refused`): the invalid done → running transition, caught, and
    the message acked and dropped.
    """
    j = job_or_404(lab_id, job_id)
    limits.check_lab_rate(get_redis(), lab_id, "late")
    n = leases.deliver_again(get_redis(), lab_id, job_id)
    reaper.send(get_rq(), lab_id, job_id, n)
    return jsonify(job_id=job_id, attempt=n, state=j["state"]), 202
