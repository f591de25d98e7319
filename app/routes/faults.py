"""The fault routes: inject a fault (a storage or dedup-store outage, slow jobs, a poison pill) or cut a
job's lease now."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app import bodies, limits
from app.auth import lab_access
from app.errors import ApiError
from app.http import job_or_404, json_body, parse
from app.job_sources import source_from_sample
from app.store import get_redis, get_rq
from core import clock, media, registry, stream
from core.broker import leases, producer
from core.keys import key

bp = Blueprint("faults", __name__)


@bp.post("/api/labs/<lab_id>/jobs/<job_id>/lease/expire")
@lab_access(write=True)
def expire_lease(lab_id: str, job_id: str):
    """Fault injection by clicking the thing that fails: this lease runs out now, as if its worker
    had gone quiet, while the worker itself keeps running the attempt."""
    r = get_redis()
    limits.check_rate(r, "kills")
    job_or_404(lab_id, job_id)
    if not leases.cut(r, lab_id, job_id, clock.now(r, lab_id)):
        raise ApiError(
            409, "no_lease", f"job {job_id} holds no lease right now (it is not running, or it was acked early)"
        )
    return jsonify(job=registry.read_job(r, lab_id, job_id))


@bp.post("/api/labs/<lab_id>/faults")
@lab_access(write=True)
def inject_fault(lab_id: str):
    body = parse(json_body(), bodies.FAULT)
    fault, duration = body["type"], float(body["duration_s"])
    r = get_redis()
    now = clock.now(r, lab_id)
    if fault in ("poison", "poison_crash"):
        # poison: the lesson's pill, a real undecodable upload whose every attempt FAILS (an error the
        # handler sees, so the retry policy decides); poison_crash: a job that kills its process, so only
        # the lease brings it back (redeliveries until max receives)
        crash = fault == "poison_crash"
        source = str(media.sample_clip()) if crash else source_from_sample(lab_id, "poison")[0]
        payload = producer.enqueue_job(
            r,
            get_rq(),
            lab_id,
            job_type="transcode",
            video_id="crashing-pill" if crash else "poison-pill",
            source=source,
            duration_s=registry.settings(r, lab_id)["job_duration"],
            resolutions=["240p", "144p"],
            idempotency_key=None,
            poison="crash" if crash else "",
        )
        stream.emit(r, lab_id, "fault.started", now, fault=fault, duration=0, job_id=payload["job_id"])
        return jsonify(fault=fault, job_id=payload["job_id"]), 202
    r.hset(key(lab_id, "faults"), mapping={f"{fault}_until": now + duration, f"{fault}_from": now})
    stream.emit(r, lab_id, "fault.started", now, fault=fault, duration=duration)
    return jsonify(fault=fault, until=now + duration), 202
