"""The JSON API: the public contract in DESIGN.md that widgets, tests and benchmarks share.

Read calls accept the lab's token or its view token; mutating calls need the lab token.
Every bad input answers with `{error, detail}` and a 4xx status, never a 500.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import subprocess
import threading
import time
import uuid

import redis
from flask import Blueprint, current_app, jsonify, request, send_file

import chapters
from app import bodies, branching, idempotency, internals, limits
from app.auth import bearer_token, lab_access, refuse_foreign_origin
from app.errors import ApiError
from app.http import job_or_404, json_body, parse, parse_after
from app.longpoll import etag_of, hold_until_changed, parse_wait
from app.pool import ask_pool
from app.store import get_redis, get_rq
from core import blobs, clock, numbers, parking, registry, settings, slots, stream
from core.events import EVENT_TYPES, FAULTS, SAMPLES
from core.keys import LABS, host_running, key, lab_dir
from workers import hosts, media
from workers.broker import dlq, leases, producer

bp = Blueprint("api", __name__)


@bp.get("/healthz")
def healthz():
    """Web is up if this answers; Redis reachability is checked, not assumed. `master` is the pid of the
    gunicorn master this worker was forked from: the launcher starts only when it hears its own."""
    try:
        get_redis().ping()
        redis_state = "ok"
    except redis.RedisError as e:
        redis_state = f"error: {e.__class__.__name__}"
    ok = redis_state == "ok"
    return jsonify(ok=ok, web="ok", redis=redis_state, master=os.getppid()), 200 if ok else 503


@bp.get("/api/model")
def model():
    """The numbers model as JSON (inputs, specs, figures); query parameters override inputs."""
    given = {k: v for k, v in request.args.items() if v != ""}
    try:
        inputs = numbers.inputs_from_mapping(given)
    except numbers.InputError as e:
        raise ApiError(422, "invalid_inputs", e.errors) from None
    return jsonify(chapters.to_json(inputs))


@bp.get("/api/openapi.json")
def openapi_document():
    """This API as an OpenAPI 3.1 document, generated from the routes themselves."""
    from app.openapi import document

    return jsonify(document(current_app))


@bp.get("/metrics")
def metrics():
    """Prometheus text format. Without the METRICS_TOKEN (Authorization: Bearer) only machine-wide totals,
    never a lab id; with it, each live lab's counts labelled by lab."""
    r = get_redis()
    want = current_app.config["LAB"].metrics_token
    given = bearer_token() or ""
    per_lab = bool(want) and hmac.compare_digest(want.encode(), given.encode())
    if given and not per_lab:
        raise ApiError(403, "forbidden", "this is not the metrics token")
    labs = sorted(r.smembers(LABS))
    samples: dict[str, list[str]] = {}
    totals: dict[str, int] = {}
    for lab in labs:
        for name, value in registry.counts(r, lab).items():
            totals[name] = totals.get(name, 0) + value
            if per_lab:
                samples.setdefault(name, []).append(f'asyncworklab_{name}{{lab="{lab}"}} {value}')
    parked = len(parking.parked(r) & set(labs))
    lines = ["# TYPE asyncworklab_labs gauge", f"asyncworklab_labs {len(labs)}",
             "# TYPE asyncworklab_labs_running gauge", f"asyncworklab_labs_running {len(labs) - parked}",
             "# TYPE asyncworklab_labs_parked gauge", f"asyncworklab_labs_parked {parked}",
             "# TYPE asyncworklab_processes gauge", f"asyncworklab_processes {running_processes(r)}"]
    if per_lab:
        for name, rows in samples.items():
            lines += [f"# TYPE asyncworklab_{name} gauge", *rows]
    else:
        for name, value in totals.items():
            lines += [f"# TYPE asyncworklab_{name}_total gauge", f"asyncworklab_{name}_total {value}"]
    return "\n".join(lines) + "\n", 200, {"Content-Type": "text/plain; version=0.0.4"}


def running_processes(r: redis.Redis) -> int:
    """Lab processes (rq workers, scheduler replicas) the live pool hosts report running now: what really
    runs, not what the labs' settings ask for."""
    hosts_now = sorted(hosts.live_hosts(r))
    return sum(int(n or 0) for n in r.mget([host_running(h) for h in hosts_now])) if hosts_now else 0


@bp.get("/api/meta")
def meta():
    """Settings schema, presets, event vocabulary, scenario buttons, guided steps, sample clips, fault labels and
    the event stream's cap: the widget builds itself from these and repeats none of them.

    ?preset= keeps only that preset's scenario buttons and steps (a chapter's widget shows no other: about a
    third of the answer's bytes, on every chapter page's first load)."""
    buttons, steps = chapters.BUTTONS, chapters.steps_public()
    preset = request.args.get("preset")
    if preset is not None:
        if preset not in chapters.PRESETS:
            raise ApiError(422, "invalid_preset", {"preset": f"one of {', '.join(chapters.PRESETS)}"})
        buttons, steps = {preset: buttons.get(preset, [])}, {preset: steps.get(preset, [])}
    resp = jsonify(settings=settings.schema_json(), presets=chapters.PRESETS,
                   events={t: {"counter": c, "text": text} for t, (c, text) in EVENT_TYPES.items()},
                   faults=list(FAULTS), scenario_buttons=buttons, steps=steps,
                   fault_text={f: {"label": label, "doc": doc} for f, (label, doc) in FAULTS.items()},
                   samples=[{"name": n, "label": label} for n, label in SAMPLES.items()],
                   stream_cap=stream.MAXLEN)
    # the same for every visitor until a deploy: a reload revalidates it (304, no body), never re-reads it
    resp.add_etag()
    resp.cache_control.no_cache = True
    return resp.make_conditional(request)


# --- labs -----------------------------------------------------------------------------------

@bp.post("/api/labs")
def create_lab():
    """Open a lab from a preset; with `branch_of` + `at_event` (+ `settings`), branch an existing run.

    A lab costs processes, so opening one is limited like any resource: a foreign page's form post is
    refused (403), and each client has a concurrency and a rate limit (429 + Retry-After)."""
    refuse_foreign_origin()
    body = json_body()
    r = get_redis()
    if "branch_of" in body or "at_event" in body:
        created, status = branching.branch_from_request(parse(body, bodies.BRANCH))
        return _lab_created(created, status)
    cfg = current_app.config["LAB"]
    clean = parse(body, bodies.NEW_LAB, speed=cfg.speed)
    preset = clean["preset"]
    [lab] = limits.open_labs(r, [registry.processes_of(chapters.settings_for(preset))])
    try:
        created = registry.create(r, preset, clean["speed"], cfg.max_labs, chapters.settings_for(preset), lab=lab)
    except registry.LabFull:
        slots.release(r, lab)
        raise limits.labs_full(cfg.max_labs) from None
    limits.opened(r, [lab])
    created["preset"] = preset
    # what GET /api/labs/{lab} would answer now: the page that opened the lab starts from it without a
    # second round trip before its first live event
    created["snapshot"] = registry.snapshot(r, created["lab_id"])
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
@lab_access(write=True, resume=False)
def delete_lab(lab_id: str):
    registry.teardown(get_redis(), lab_id, current_app.config["LAB"].var_dir)
    return "", 204


@bp.patch("/api/labs/<lab_id>/settings")
@lab_access(write=True)
def patch_settings(lab_id: str):
    clean = parse(json_body(), bodies.SETTINGS)
    if "workers" in clean or "scheduler_replicas" in clean:
        merged = {**registry.settings(get_redis(), lab_id), **clean}
        limits.resize(get_redis(), lab_id, registry.processes_of(merged))
    return jsonify(settings=registry.update_settings(get_redis(), lab_id, clean))


@bp.post("/api/labs/<lab_id>/park")
@lab_access(write=True, resume=False)
def park_lab(lab_id: str):
    """Park this lab now (the owner's choice, e.g. to make room under the running-lab cap): its processes
    stop and its slot is freed; its history stays, and opening its page again resumes it."""
    r = get_redis()
    parking.park(r, lab_id, parking.OWNER_WHY)
    return jsonify(lab_id=lab_id, parked=True)


@bp.post("/api/labs/<lab_id>/clock")
@lab_access(write=True)
def clock_action(lab_id: str):
    body = parse(json_body(), bodies.CLOCK)
    r = get_redis()
    action = body.get("action")
    actions = {"pause": ("clock.paused", clock.pause), "resume": ("clock.resumed", clock.resume)}
    if action in actions:
        ev, fn = actions[action]
        stream.emit(r, lab_id, ev, fn(r, lab_id))
    elif action == "step":
        stream.emit(r, lab_id, "clock.stepped", clock.step(r, lab_id, body["seconds"]))
    elif "speed" not in body:
        raise ApiError(422, "invalid_action", {"action": "must be pause, resume or step"})
    if "speed" in body:
        registry.update_settings(r, lab_id, {"speed": body["speed"]})
    return jsonify(clock=clock.read(r, lab_id))


# --- jobs -----------------------------------------------------------------------------------

def _source_from_upload(lab_id: str) -> tuple[str, str]:
    """Check an uploaded file's bytes, then store it as a blob every host can read; returns (source, video_id).

    The bytes pass through a local temp file only (ffmpeg's one-frame check needs a file), removed
    before the answer: no host relies on this one's disk.
    """
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
    name = f"uploads/{video_id}.bin"
    path = cfg.var_dir / "tmp" / f"upload-{lab_id}-{video_id}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    r = get_redis()
    room = cfg.max_lab_bytes - blobs.usage(r, lab_id)
    size = len(head)
    try:
        with open(path, "wb") as out:
            out.write(head)
            while chunk := f.stream.read(1 << 16):
                size += len(chunk)
                if size > min(cfg.max_upload_bytes, room):
                    if size > cfg.max_upload_bytes:
                        raise ApiError(413, "too_large", f"uploads are limited to {cfg.max_upload_bytes} bytes")
                    raise _storage_full(blobs.BlobFull("lab", cfg.max_lab_bytes))
                out.write(chunk)
        try:
            media.check_upload(path)
        except media.InvalidMedia as e:
            raise ApiError(422, "undecodable_video", {"file": f"refused before queueing: {e}"}) from None
        try:
            blobs.put_file(r, lab_id, name, path)
        except blobs.BlobFull as e:
            raise _storage_full(e) from None
    finally:
        path.unlink(missing_ok=True)
    return blobs.ref(name), video_id


def _storage_full(e: blobs.BlobFull) -> ApiError:
    if e.scope == "lab":
        return ApiError(413, "lab_storage_full", f"this lab's files may take {e.cap} bytes and this upload "
                        "would pass that; reset the lab to start afresh")
    if e.scope == "client":
        return ApiError(507, "client_storage_full", f"the labs one client opens may hold {e.cap} bytes of "
                        "uploads and outputs together, and yours would pass that; delete a lab you no longer "
                        "need (other clients are not held back)")
    return ApiError(507, "server_storage_full", f"the server holds at most {e.cap} bytes of uploads and "
                    "outputs for all labs together; try again when other labs have ended")


def _source_from_sample(lab_id: str, sample: str) -> tuple[str, str]:
    if sample == "poison":
        # A truncated MP4 (moov missing): passes the byte sniff, fails to decode every time.
        r = get_redis()
        name = "uploads/poison.bin"
        if name not in blobs.names(r, lab_id, name):
            try:
                clip = media.sample_clip().read_bytes()
                blobs.put(r, lab_id, name, clip[: len(clip) // 2])
            except blobs.BlobFull as e:
                raise _storage_full(e) from None
        return blobs.ref(name), "poison"
    clip = media.sample_clip(sample)  # installed with the app on every host: a path is fine
    if clip is None:
        raise ApiError(422, "unknown_sample", {"sample": f"must be one of {', '.join(SAMPLES)}"})
    return str(clip), sample


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
        source, video_id = _source_from_upload(lab_id)
    else:
        source, video_id = _source_from_sample(lab_id, sample)
    payload = producer.enqueue_job(
        r, get_rq(), lab_id, job_type=job_type, video_id=video_id, source=source,
        duration_s=clean["duration_s"], resolutions=["240p", "144p"],
        idempotency_key=request.headers.get("Idempotency-Key"))
    response = {"job_id": payload["job_id"], "status_url": f"/api/labs/{lab_id}/jobs/{payload['job_id']}",
                "payload": payload, "enqueue_ms": round((time.perf_counter() - started) * 1000, 2)}
    resp = jsonify(response)
    resp.status_code = 202
    return claim.finish(body, response, resp) if claim else resp


@bp.post("/api/labs/<lab_id>/inline")
@lab_access(write=True)
def inline_transcode(lab_id: str):
    """Chapter 0's anti-pattern, for real and on the lab's clock: the request is held while a real
    ffmpeg transcode runs, paced to the job's simulated duration like a worker's. The proxy in front
    (the `gateway_timeout` setting) gives up on a request silent that long: 504, while the server
    carries on transcoding for nobody (events `inline.gateway_timeout`, then `inline.finished`)."""
    r = get_redis()
    lab_settings = registry.settings(r, lab_id)
    clean = parse(json_body(), bodies.INLINE, duration_s=lab_settings["job_duration"])
    sample, duration, gateway = clean["sample"], clean["duration_s"], float(lab_settings["gateway_timeout"])
    speed = max(float(lab_settings["speed"]), 1e-9)
    hold_real = min(INLINE_REAL_CAP_S, duration / speed) + 60
    lock = key(lab_id, "inline")
    if not r.set(lock, 1, nx=True, ex=int(hold_real) + 1):
        raise ApiError(409, "inline_busy", "an inline transcode is already holding a request thread")
    src = media.sample_clip(sample)
    out = lab_dir(current_app.config["LAB"].var_dir, lab_id) / "inline" / f"{uuid.uuid4().hex}.mp4"
    started_real = time.perf_counter()
    # The honest clock, as a worker's attempt keeps it: held while ffmpeg starts, then at the transcode's
    # end until ffmpeg is done, so a transcode slower in real time than duration ÷ speed slows the clock
    # instead of stretching the request's simulated time.
    clock.hold(r, lab_id, INLINE_HOLDER, 0.0)
    t0 = clock.now(r, lab_id)
    stream.emit(r, lab_id, "inline.started", t0, duration=duration, gateway=gateway, sample=sample)
    try:
        media.probe(src)
        proc = media.start_transcode(src, out, media.RENDITIONS["240p"])
    except Exception:
        clock.lift(r, lab_id, INLINE_HOLDER)
        r.delete(lock)
        raise
    clock.hold(r, lab_id, INLINE_HOLDER, t0 + duration)
    poll, kept = min(0.01, 1 / speed), time.monotonic()
    while True:
        elapsed = clock.now(r, lab_id) - t0
        finished = proc.poll() is not None
        if finished and proc.returncode != 0:
            clock.lift(r, lab_id, INLINE_HOLDER)
            r.delete(lock)
            raise ApiError(422, "transcode_failed", proc.stderr.read().decode()[:200])
        if finished and elapsed >= duration:
            break
        kept = _keep_holding(r, lab_id, kept)
        if elapsed >= gateway or time.perf_counter() - started_real > INLINE_REAL_CAP_S:
            # The proxy's deadline passed first: it answers 504 and closes the connection. The handler
            # does not know and keeps going to the end of the transcode.
            stream.emit(r, lab_id, "inline.gateway_timeout", t0 + gateway, gateway=gateway, duration=duration,
                        unheard=round(max(0.0, duration - gateway), 3))
            threading.Thread(target=_finish_for_nobody, args=(r, lab_id, lock, proc, out, t0, duration, poll),
                             daemon=True).start()
            return jsonify(error="gateway_timeout",
                           detail=f"the gateway gave up after {gateway:g} s (simulated) without a response; the "
                                  f"server is still transcoding for nobody, {max(0.0, duration - gateway):g} s to go",
                           gateway_timeout_s=gateway, simulated_s=gateway, duration_s=duration,
                           elapsed_ms=round((time.perf_counter() - started_real) * 1000, 1), sample=sample), 504
        time.sleep(poll)
    simulated = clock.now(r, lab_id) - t0
    clock.lift(r, lab_id, INLINE_HOLDER)
    real_s = time.perf_counter() - started_real
    stream.emit(r, lab_id, "inline.finished", t0 + simulated, simulated=round(simulated, 3), answered=True)
    size = out.stat().st_size
    out.unlink()
    r.delete(lock)
    # the readout says when the clock waited for ffmpeg: the speed the request really ran at
    running = simulated / max(real_s, 1e-9)
    return jsonify(simulated_s=round(simulated, 3), duration_s=duration, gateway_timeout_s=gateway,
                   elapsed_ms=round(real_s * 1000, 1), output_bytes=size, sample=sample,
                   speed=speed, running_speed=round(running, 1), clock_slowed=running < clock.SLOWED_BELOW * speed)


INLINE_REAL_CAP_S = 300.0  # a request is never held longer than this in real time (a paused clock)
INLINE_HOLDER = "inline"  # the barrier an inline transcode holds on its lab's clock (one at a time: the lock)


def _keep_holding(r: redis.Redis, lab_id: str, kept: float) -> float:
    """Refresh the inline barrier about once a real second (it lapses BARRIER_TTL after the last)."""
    if time.monotonic() - kept < 1.0:
        return kept
    clock.refresh(r, lab_id, INLINE_HOLDER)
    return time.monotonic()


def _finish_for_nobody(r: redis.Redis, lab_id: str, lock: str, proc: subprocess.Popen, out, t0: float,
                       duration: float, poll: float) -> None:
    """After a 504 the handler runs on: finish the transcode on the lab's clock, then record that nobody heard."""
    try:
        deadline = time.monotonic() + INLINE_REAL_CAP_S
        kept = time.monotonic()
        while time.monotonic() < deadline and (proc.poll() is None or clock.now(r, lab_id) - t0 < duration):
            kept = _keep_holding(r, lab_id, kept)
            time.sleep(max(poll, 0.005))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stream.emit(r, lab_id, "inline.finished", clock.now(r, lab_id), simulated=round(clock.now(r, lab_id) - t0, 3),
                    answered=False)
    except redis.RedisError:
        pass  # the lab was torn down meanwhile
    finally:
        out.unlink(missing_ok=True)
        try:
            clock.lift(r, lab_id, INLINE_HOLDER)
            r.delete(lock)
        except redis.RedisError:
            pass


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
    data = blobs.get(get_redis(), lab_id, f"transcoded/{job_id}/{name}")  # any web process, any host
    if data is None:
        raise ApiError(404, "unknown_output", f"no output {name!r} for job {job_id}")
    return send_file(io.BytesIO(data), mimetype="video/mp4" if name.endswith(".mp4") else "image/jpeg",
                     conditional=True, etag=hashlib.sha256(data).hexdigest()[:32], download_name=name)


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
    body = parse(json_body(), bodies.FAULT)
    fault, duration = body["type"], float(body["duration_s"])
    r = get_redis()
    now = clock.now(r, lab_id)
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
    body = parse(json_body(), bodies.REPLAY)
    reason, rate = body.get("reason"), body.get("rate")
    r = get_redis()
    return jsonify(replayed=dlq.replay(r, lab_id, clock.now(r, lab_id), reason or None, rate=rate),
                   rate=rate)


@bp.get("/api/labs/<lab_id>/events")
@lab_access(write=False)
def get_events(lab_id: str):
    after = parse_after(request.args.get("after"))
    return jsonify(events=stream.read_after(get_redis(), lab_id, after))
