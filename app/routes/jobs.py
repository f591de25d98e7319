"""The job routes: enqueue a job (a sample clip or an upload), list, read and long-poll jobs, fetch
their outputs, and read what their side effects left (the outbox, the idempotency keys)."""

from __future__ import annotations

import hashlib
import io
import json
import time

import redis
from flask import Blueprint, jsonify, request, send_file
from redis.client import Pipeline

from app import bodies, idempotency, internals, limits
from app.auth import lab_access
from app.errors import ApiError
from app.http import job_or_404, json_body, parse
from app.job_sources import source_from_sample, source_from_upload
from app.longpoll import etag_of, hold_until_changed, parse_wait
from app.store import get_redis, get_rq
from core import blobs, registry
from core.broker import producer
from core.keys import key

bp = Blueprint("jobs", __name__)


@bp.post("/api/labs/<lab_id>/jobs")
@lab_access(write=True)
def create_job(lab_id: str):
    r = get_redis()
    limits.check_rate(r, "jobs")
    lab_settings = registry.settings(r, lab_id)
    claim = idempotency.begin(r, lab_id, lab_settings)  # before the body: a resend mid-upload gets 409
    try:
        return _create_job(r, lab_id, lab_settings, claim)
    except Exception:
        if claim:
            claim.abandon()  # no job was made: free the key so the client may retry
        raise


def _create_job(r: redis.Redis, lab_id: str, lab_settings: dict, claim: idempotency.Claim | None):
    is_upload = (request.content_type or "").startswith("multipart/")
    body = dict(request.form) if is_upload else json_body()
    replayed = claim.replay(body) if claim else None
    if replayed:
        return replayed
    clean = parse(body, bodies.JOB, duration_s=lab_settings["job_duration"])
    job_type, sample = clean["job_type"], clean["sample"]
    started = time.perf_counter()
    if is_upload:
        source, video_id = source_from_upload(lab_id)
    else:
        source, video_id = source_from_sample(lab_id, sample)

    def accepted(payload: dict) -> dict:
        return {
            "job_id": payload["job_id"],
            "status_url": f"/api/labs/{lab_id}/jobs/{payload['job_id']}",
            "payload": payload,
            "enqueue_ms": round((time.perf_counter() - started) * 1000, 2),
        }

    response: dict = {}

    def remember(pipe: Pipeline, payload: dict) -> None:
        """The answer, and the key's record of it in the job's own transaction: a web process killed between
        the two cannot leave a job whose key still reads "in progress" (a resend would make it twice)."""
        response.update(accepted(payload))
        if claim:
            claim.made(pipe, body, response)

    producer.enqueue_job(
        r,
        get_rq(),
        lab_id,
        job_type=job_type,
        video_id=video_id,
        source=source,
        duration_s=clean["duration_s"],
        resolutions=["240p", "144p"],
        idempotency_key=request.headers.get("Idempotency-Key"),
        also=remember,
    )
    resp = jsonify(response)
    resp.status_code = 202
    return claim.checked(resp) if claim else resp


@bp.get("/api/labs/<lab_id>/jobs")
@lab_access(write=False)
def list_jobs(lab_id: str):
    """The newest 200 jobs; ?prefix=12 finds jobs whose number starts with 12, however old (?limit ≤ 200)."""
    prefix, limit = request.args.get("prefix"), request.args.get("limit", "25")
    if prefix is None:
        return jsonify(jobs=registry.list_jobs(get_redis(), lab_id))
    prefix = prefix.strip().lstrip("#")
    if not prefix.isdigit() or prefix.startswith("0") or len(prefix) > 12:
        raise ApiError(422, "invalid_prefix", {"prefix": "must be the leading digits of a job number, like 12"})
    if not limit.isdigit() or not 1 <= int(limit) <= 200:
        raise ApiError(422, "invalid_limit", {"limit": "must be a whole number from 1 to 200"})
    return jsonify(jobs=registry.jobs_with_prefix(get_redis(), lab_id, prefix, int(limit)))


@bp.get("/api/labs/<lab_id>/jobs/<job_id>")
@lab_access(write=False)
def get_job(lab_id: str, job_id: str):
    """Status with ETag; If-None-Match → 304; ?wait=N holds up to N s (≤ 25) until it changes.

    ?include=history adds `history`: every attempt with its fence, the CAS refusals, retry delays drawn
    and files written, folded from the event stream (the inspect panel reads this).
    """
    job_or_404(lab_id, job_id)
    include = request.args.get("include", "")
    if include not in ("", "history"):
        raise ApiError(422, "invalid_include", {"include": "the only value is 'history'"})
    client_tag = request.headers.get("If-None-Match")

    def view() -> tuple[dict, str]:
        j = job_or_404(lab_id, job_id)
        return j, etag_of(j)

    j, tag, _ = hold_until_changed(
        get_redis(), lab_id, {job_id}, client_tag, parse_wait(request.args.get("wait")), view
    )
    if client_tag == tag:
        return "", 304, {"ETag": tag}
    resp = jsonify(dict(j, history=internals.job_history(get_redis(), lab_id, job_id)) if include else j)
    resp.headers["ETag"] = tag
    resp.headers["Cache-Control"] = "no-cache"
    return resp


@bp.get("/api/labs/<lab_id>/jobs/<job_id>/outputs/<name>")
@lab_access(write=False)
def get_output(lab_id: str, job_id: str, name: str):
    job_or_404(lab_id, job_id)
    if "/" in name or name.startswith(".") or not name.endswith((".mp4", ".jpg")):
        raise ApiError(404, "unknown_output", f"no output {name!r}")
    r = get_redis()
    data = blobs.get(r, lab_id, f"transcoded/{job_id}/{name}")  # any web process, any host
    if data is None and (cleared := blobs.cleared_at(r, lab_id)) is not None:
        raise ApiError(410, "output_cleared", blobs.cleared_sentence(cleared))
    if data is None:
        raise ApiError(404, "unknown_output", f"no output {name!r} for job {job_id}")
    return send_file(
        io.BytesIO(data),
        mimetype="video/mp4" if name.endswith(".mp4") else "image/jpeg",
        conditional=True,
        etag=hashlib.sha256(data).hexdigest()[:32],
        download_name=name,
    )


@bp.get("/api/labs/<lab_id>/outbox")
@lab_access(write=False)
def outbox(lab_id: str):
    return jsonify(emails=[json.loads(e) for e in get_redis().lrange(key(lab_id, "outbox"), 0, -1)])


@bp.get("/api/labs/<lab_id>/idempotency")
@lab_access(write=False)
def idempotency_status(lab_id: str):
    """Idempotency keys held and their memory, beside the model's dedup window (VT + p99)."""
    return jsonify(idempotency.status(get_redis(), lab_id))
