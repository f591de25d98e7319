"""The JSON API: the public contract in DESIGN.md that widgets, tests and benchmarks share.

Read calls accept the lab's token or its view token; mutating calls need the lab token.
Every bad input answers with `{error, detail}` and a 4xx status, never a 500.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import redis
from flask import Blueprint, current_app, jsonify, request, send_file

from app import branching, idempotency, internals, limits, scenarios
from app.auth import lab_access
from app.errors import ApiError
from app.http import job_or_404, json_body, parse_after
from app.longpoll import etag_of, hold_until_changed, parse_wait
from app.pool import ask_pool
from app.store import get_redis, get_rq
from core import clock, numbers, presets, registry, settings, stream
from core.events import EVENT_TYPES, FAULTS, SAMPLES
from core.keys import LABS, key
from workers import media
from workers.broker import dlq, leases, producer

bp = Blueprint("api", __name__)
CLIPS = [s for s in SAMPLES if s != "poison"]  # real clips (the poison pill is made from one)


@bp.get("/healthz")
def healthz():
    """Web is up if this answers; Redis reachability is checked, not assumed."""
    try:
        get_redis().ping()
        redis_state = "ok"
    except redis.RedisError as e:
        redis_state = f"error: {e.__class__.__name__}"
    ok = redis_state == "ok"
    return jsonify(ok=ok, web="ok", redis=redis_state), 200 if ok else 503


@bp.get("/api/model")
def model():
    """The numbers model as JSON (inputs, specs, figures); query parameters override inputs."""
    given = {k: v for k, v in request.args.items() if v != ""}
    try:
        inputs = numbers.inputs_from_mapping(given)
    except numbers.InputError as e:
        raise ApiError(422, "invalid_inputs", e.errors) from None
    return jsonify(numbers.to_json(inputs))


@bp.get("/api/openapi.json")
def openapi_document():
    """This API as an OpenAPI 3.1 document, generated from the routes themselves."""
    from app.openapi import document

    return jsonify(document(current_app))


@bp.get("/metrics")
def metrics():
    """Prometheus text format: each live lab's counts, labelled by lab."""
    r = get_redis()
    samples: dict[str, list[str]] = {}
    for lab in sorted(r.smembers(LABS)):
        for name, value in registry.counts(r, lab).items():
            samples.setdefault(name, []).append(f'asyncworklab_{name}{{lab="{lab}"}} {value}')
    lines = ["# TYPE asyncworklab_labs gauge", f"asyncworklab_labs {r.scard(LABS)}"]
    for name, rows in samples.items():
        lines += [f"# TYPE asyncworklab_{name} gauge", *rows]
    return "\n".join(lines) + "\n", 200, {"Content-Type": "text/plain; version=0.0.4"}


@bp.get("/api/meta")
def meta():
    """Settings schema, presets, event vocabulary and scenario buttons: the widget builds itself from these."""
    return jsonify(settings=settings.schema_json(), presets=presets.PRESETS,
                   events={t: {"counter": c, "text": text} for t, (c, text) in EVENT_TYPES.items()},
                   faults=list(FAULTS), fault_text=FAULTS, samples=SAMPLES,
                   stream_cap=stream.MAXLEN, scenario_buttons=scenarios.BUTTONS)















# --- labs -----------------------------------------------------------------------------------

@bp.post("/api/labs")
def create_lab():
    """Open a lab from a preset; with `branch_of` + `at_event` (+ `settings`), branch an existing run."""
    body = json_body()
    if "branch_of" in body or "at_event" in body:
        created, status = branching.branch_from_request(body)
        return _lab_created(created, status)
    preset = body.get("preset", presets.DEFAULT_PRESET)
    if not isinstance(preset, str) or preset not in presets.PRESETS:
        raise ApiError(422, "invalid_preset", {"preset": f"must be one of {', '.join(presets.PRESETS)}"})
    cfg = current_app.config["LAB"]
    speed_value = body.get("speed", cfg.speed)
    clean, errors = settings.validate({"speed": speed_value})
    if errors:
        raise ApiError(422, "invalid_settings", errors)
    limits.check_workers(get_redis(), int(presets.settings_for(preset)["workers"]))
    try:
        created = registry.create(get_redis(), preset, clean["speed"], cfg.max_labs)
    except registry.LabFull:
        raise limits.labs_full(cfg.max_labs) from None
    created["preset"] = preset
    return _lab_created(created, 201)


def _lab_created(created: dict, status: int):
    lab = created["lab_id"]
    created["ws_url"] = f"/ws/labs/{lab}"
    resp = jsonify(created)
    resp.status_code = status
    resp.set_cookie(f"lab_{lab}", created["token"], httponly=True, samesite="Strict",
                    max_age=current_app.config["LAB"].lab_idle_ttl)
    return resp


@bp.get("/api/labs/<lab_id>")
@lab_access(write=False)
def get_lab(lab_id: str):
    return jsonify(registry.snapshot(get_redis(), lab_id))


@bp.delete("/api/labs/<lab_id>")
@lab_access(write=True)
def delete_lab(lab_id: str):
    registry.teardown(get_redis(), lab_id, current_app.config["LAB"].var_dir)
    return "", 204


@bp.patch("/api/labs/<lab_id>/settings")
@lab_access(write=True)
def patch_settings(lab_id: str):
    clean, errors = settings.validate(json_body())
    if errors:
        raise ApiError(422, "invalid_settings", errors)
    if "workers" in clean:
        limits.check_workers(get_redis(), clean["workers"], lab_id)
    return jsonify(settings=registry.update_settings(get_redis(), lab_id, clean))


@bp.post("/api/labs/<lab_id>/clock")
@lab_access(write=True)
def clock_action(lab_id: str):
    body = json_body()
    r = get_redis()
    action = body.get("action")
    actions = {"pause": ("clock.paused", clock.pause), "resume": ("clock.resumed", clock.resume)}
    if not isinstance(action, str | None):
        raise ApiError(422, "invalid_action", {"action": "must be pause, resume or step"})
    if action in actions:
        ev, fn = actions[action]
        stream.emit(r, lab_id, ev, fn(r, lab_id))
    elif action == "step":
        clean, errors = settings.validate({"vt_seconds": body.get("seconds", 30)})
        if errors:
            raise ApiError(422, "invalid_step", {"seconds": errors["vt_seconds"]})
        stream.emit(r, lab_id, "clock.stepped", clock.step(r, lab_id, clean["vt_seconds"]))
    elif "speed" not in body:
        raise ApiError(422, "invalid_action", {"action": "must be pause, resume or step"})
    if "speed" in body:
        clean, errors = settings.validate({"speed": body["speed"]})
        if errors:
            raise ApiError(422, "invalid_settings", errors)
        registry.update_settings(r, lab_id, clean)
    return jsonify(clock=clock.read(r, lab_id))


# --- jobs -----------------------------------------------------------------------------------

def _source_from_upload(lab_id: str) -> tuple[str, str]:
    """Save an uploaded file after sniffing its bytes; returns (path, video_id)."""
    f = request.files.get("file")
    if f is None:
        raise ApiError(422, "missing_file", {"file": "send the video in the multipart field 'file'"})
    cfg = current_app.config["LAB"]
    head = f.stream.read(64)
    if not head:
        raise ApiError(422, "empty_file", {"file": "the file is empty"})
    if media.sniff(head) is None:
        raise ApiError(415, "not_a_video", {"file": "the file's bytes are not an MP4, WebM or AVI "
                                                    "container (the filename is not trusted)"})
    video_id = uuid.uuid4().hex[:12]
    path = registry.lab_dir(cfg.var_dir, lab_id) / "uploads" / f"{video_id}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    room = cfg.max_lab_bytes - registry.disk_usage(cfg.var_dir, lab_id)
    size = len(head)
    with open(path, "wb") as out:
        out.write(head)
        while chunk := f.stream.read(1 << 16):
            size += len(chunk)
            if size > min(cfg.max_upload_bytes, room):
                out.close()
                path.unlink()
                if size > cfg.max_upload_bytes:
                    raise ApiError(413, "too_large", f"uploads are limited to {cfg.max_upload_bytes} bytes")
                raise ApiError(413, "lab_storage_full", f"this lab's files may take {cfg.max_lab_bytes} bytes "
                               "and this upload would pass that; reset the lab to start afresh")
            out.write(chunk)
    try:
        media.check_upload(path)
    except media.InvalidMedia as e:
        path.unlink()
        raise ApiError(422, "undecodable_video", {"file": f"refused before queueing: {e}"}) from None
    return str(path), video_id


def _source_from_sample(lab_id: str, sample: str) -> tuple[str, str]:
    cfg = current_app.config["LAB"]
    if sample == "poison":
        # A truncated MP4 (moov missing): passes the byte sniff, fails to decode every time.
        path = registry.lab_dir(cfg.var_dir, lab_id) / "uploads" / "poison.bin"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(media.sample_clip().read_bytes()[:150_000])
        return str(path), "poison"
    clip = media.sample_clip(sample)
    if clip is None:
        raise ApiError(422, "unknown_sample", {"sample": f"must be one of {', '.join(SAMPLES)}"})
    return str(clip), sample


@bp.post("/api/labs/<lab_id>/jobs")
@lab_access(write=True)
def create_job(lab_id: str):
    r = get_redis()
    limits.check_rate(r, "jobs")
    claim = idempotency.begin(r, lab_id, registry.settings(r, lab_id))  # before the body: a resend mid-upload gets 409
    try:
        return _create_job(r, lab_id, claim)
    except Exception:
        if claim:
            claim.abandon()  # no job was made: free the key so the client may retry
        raise


def _create_job(r: redis.Redis, lab_id: str, claim: idempotency.Claim | None):
    lab_settings = registry.settings(r, lab_id)
    is_upload = (request.content_type or "").startswith("multipart/")
    body = dict(request.form) if is_upload else json_body()
    replayed = claim.replay(body) if claim else None
    if replayed:
        return replayed
    errors = {}
    job_type = body.get("job_type", "transcode")
    if job_type not in producer.JOB_TYPES:
        errors["job_type"] = f"must be one of {', '.join(producer.JOB_TYPES)}"
    sample = body.get("sample", "bigbuckbunny")
    if not isinstance(sample, str) or sample not in SAMPLES:
        errors["sample"] = f"must be one of {', '.join(SAMPLES)}"
    duration = body.get("duration_s", lab_settings["job_duration"])
    clean, errs = settings.validate({"job_duration": duration})
    if errs:
        errors["duration_s"] = errs["job_duration"]
    if errors:
        raise ApiError(422, "invalid_job", errors)
    started = time.perf_counter()
    if is_upload:
        source, video_id = _source_from_upload(lab_id)
    else:
        source, video_id = _source_from_sample(lab_id, sample)
    payload = producer.enqueue_job(
        r, get_rq(), lab_id, job_type=job_type, video_id=video_id, source=source,
        duration_s=clean["job_duration"], resolutions=["240p", "144p"],
        idempotency_key=request.headers.get("Idempotency-Key"))
    response = {"job_id": payload["job_id"], "status_url": f"/api/labs/{lab_id}/jobs/{payload['job_id']}",
                "payload": payload, "enqueue_ms": round((time.perf_counter() - started) * 1000, 2)}
    resp = jsonify(response)
    resp.status_code = 202
    return claim.finish(body, response, resp) if claim else resp


@bp.post("/api/labs/<lab_id>/inline")
@lab_access(write=True)
def inline_transcode(lab_id: str):
    """Chapter 0's anti-pattern, for real: transcode inside the request while the client waits."""
    r = get_redis()
    lock = key(lab_id, "inline")
    if not r.set(lock, 1, nx=True, ex=120):
        raise ApiError(409, "inline_busy", "an inline transcode is already holding a request thread")
    try:
        sample = json_body().get("sample", "bigbuckbunny")
        if sample not in CLIPS:
            raise ApiError(422, "unknown_sample", {"sample": f"must be one of {', '.join(CLIPS)}"})
        src = media.sample_clip(sample)
        out = registry.lab_dir(current_app.config["LAB"].var_dir, lab_id) / "inline" / f"{uuid.uuid4().hex}.mp4"
        started = time.perf_counter()
        media.probe(src)
        proc = media.start_transcode(src, out, media.RENDITIONS["240p"])
        try:
            code = proc.wait(timeout=media.LIMITS.ffmpeg_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise ApiError(504, "transcode_timeout", "the inline transcode passed its time limit") from None
        if code != 0:
            raise ApiError(422, "transcode_failed", proc.stderr.read().decode()[:200])
        elapsed = (time.perf_counter() - started) * 1000
        size = out.stat().st_size
        out.unlink()
        return jsonify(elapsed_ms=round(elapsed, 1), output_bytes=size, sample=sample)
    finally:
        r.delete(lock)




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
    j, tag, _ = hold_until_changed(get_redis(), lab_id, {job_id}, client_tag, parse_wait(request.args.get("wait")),
                                   view)
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
    base = registry.lab_dir(current_app.config["LAB"].var_dir, lab_id) / "transcoded" / job_id
    path = base / name
    if not path.is_file():
        raise ApiError(404, "unknown_output", f"no output {name!r} for job {job_id}")
    return send_file(path, mimetype="video/mp4" if name.endswith(".mp4") else "image/jpeg",
                     conditional=True)


@bp.get("/api/labs/<lab_id>/outbox")
@lab_access(write=False)
def outbox(lab_id: str):
    return jsonify(emails=[json.loads(e) for e in get_redis().lrange(key(lab_id, "outbox"), 0, -1)])


@bp.get("/api/labs/<lab_id>/idempotency")
@lab_access(write=False)
def idempotency_status(lab_id: str):
    """Idempotency keys held and their memory, beside the model's dedup window (VT + p99)."""
    return jsonify(idempotency.status(get_redis(), lab_id))


# --- workers, faults, DLQ, events -------------------------------------------------------------

@bp.post("/api/labs/<lab_id>/workers/<worker_id>/kill")
@lab_access(write=True)
def kill_worker(lab_id: str, worker_id: str):
    """Ask the supervisor (which owns the processes) to SIGKILL the worker and its horse."""
    r = get_redis()
    limits.check_rate(r, "kills")
    if worker_id == "random":
        busy = [w["id"] for w in registry.workers(r, lab_id) if w.get("state") == "busy"]
        if not busy:
            raise ApiError(409, "no_busy_worker", "no worker is busy right now")
        worker_id = busy[0]
    if not r.hexists(key(lab_id, "workers"), worker_id):
        raise ApiError(404, "unknown_worker", f"no worker {worker_id!r} in this lab")
    return jsonify(ask_pool(r, {"cmd": "kill", "lab": lab_id, "worker": worker_id}))


@bp.post("/api/labs/<lab_id>/jobs/<job_id>/lease/expire")
@lab_access(write=True)
def expire_lease(lab_id: str, job_id: str):
    """Fault injection by clicking the thing that fails: this lease runs out now, as if its worker
    had gone quiet, while the worker itself keeps running the attempt."""
    r = get_redis()
    limits.check_rate(r, "kills")
    job_or_404(lab_id, job_id)
    if not leases.cut(r, lab_id, job_id, clock.now(r, lab_id)):
        raise ApiError(409, "no_lease", f"job {job_id} holds no lease right now (it is not running, or it was "
                                        "acked early)")
    return jsonify(job=registry.read_job(r, lab_id, job_id))




@bp.post("/api/labs/<lab_id>/faults")
@lab_access(write=True)
def inject_fault(lab_id: str):
    body = json_body()
    fault = body.get("type")
    if fault not in FAULTS:
        raise ApiError(422, "invalid_fault", {"type": f"must be one of {', '.join(FAULTS)}"})
    clean, errors = settings.validate({"job_duration": body.get("duration_s", 120)})
    if errors:
        raise ApiError(422, "invalid_fault", {"duration_s": errors["job_duration"]})
    r = get_redis()
    now = clock.now(r, lab_id)
    duration = clean["job_duration"]
    if fault in ("poison", "poison_crash"):
        # poison: the lesson's pill, a real undecodable upload whose every attempt FAILS (an error the
        # handler sees, so the retry policy decides); poison_crash: a job that kills its process, so only
        # the lease brings it back (redeliveries until max receives)
        crash = fault == "poison_crash"
        source = str(media.sample_clip()) if crash else _source_from_sample(lab_id, "poison")[0]
        payload = producer.enqueue_job(
            r, get_rq(), lab_id, job_type="transcode", video_id="crashing-pill" if crash else "poison-pill",
            source=source, duration_s=registry.settings(r, lab_id)["job_duration"],
            resolutions=["240p", "144p"], idempotency_key=None, poison="crash" if crash else "")
        stream.emit(r, lab_id, "fault.started", now, fault=fault, duration=0, job_id=payload["job_id"])
        return jsonify(fault=fault, job_id=payload["job_id"]), 202
    r.hset(key(lab_id, "faults"), mapping={f"{fault}_until": now + duration, f"{fault}_from": now})
    stream.emit(r, lab_id, "fault.started", now, fault=fault, duration=duration)
    return jsonify(fault=fault, until=now + duration), 202


@bp.get("/api/labs/<lab_id>/dlq")
@lab_access(write=False)
def get_dlq(lab_id: str):
    return jsonify(dead_letters=dlq.list_dead(get_redis(), lab_id))


@bp.post("/api/labs/<lab_id>/dlq/replay")
@lab_access(write=True)
def replay_dlq(lab_id: str):
    body = json_body()
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ApiError(422, "invalid_reason", {"reason": "must be text"})
    rate = body.get("rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                             or not 0.001 <= rate <= 1000):
        raise ApiError(422, "invalid_rate", {"rate": "must be a number of jobs per simulated second, "
                                                    "0.001–1000 (omit it for an unpaced replay)"})
    r = get_redis()
    return jsonify(replayed=dlq.replay(r, lab_id, clock.now(r, lab_id), reason or None, rate=rate),
                   rate=rate)




@bp.get("/api/labs/<lab_id>/events")
@lab_access(write=False)
def get_events(lab_id: str):
    after = parse_after(request.args.get("after"))
    return jsonify(events=stream.read_after(get_redis(), lab_id, after))
