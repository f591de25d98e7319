"""Chapter 0's inline demo: one request held while a real ffmpeg transcode runs, until the gateway gives up."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid

import redis
from flask import Blueprint, current_app, jsonify

from app import bodies
from app.auth import lab_access
from app.errors import ApiError
from app.http import json_body, parse
from app.store import get_redis
from core import clock, media, registry, stream
from core.keys import key, lab_dir

bp = Blueprint("inline", __name__)
INLINE_REAL_CAP_S = 300.0  # a request is never held longer than this in real time (a paused clock)
INLINE_HOLDER = "inline"  # the barrier an inline transcode holds on its lab's clock (one at a time: the lock)


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
            stream.emit(
                r,
                lab_id,
                "inline.gateway_timeout",
                t0 + gateway,
                gateway=gateway,
                duration=duration,
                unheard=round(max(0.0, duration - gateway), 3),
            )
            threading.Thread(
                target=_finish_for_nobody, args=(r, lab_id, lock, proc, out, t0, duration, poll), daemon=True
            ).start()
            return jsonify(
                error="gateway_timeout",
                detail=f"the gateway gave up after {gateway:g} s (simulated) without a response; the "
                f"server is still transcoding for nobody, {max(0.0, duration - gateway):g} s to go",
                gateway_timeout_s=gateway,
                simulated_s=gateway,
                duration_s=duration,
                elapsed_ms=round((time.perf_counter() - started_real) * 1000, 1),
                sample=sample,
            ), 504
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
    return jsonify(
        simulated_s=round(simulated, 3),
        duration_s=duration,
        gateway_timeout_s=gateway,
        elapsed_ms=round(real_s * 1000, 1),
        output_bytes=size,
        sample=sample,
        speed=speed,
        running_speed=round(running, 1),
        clock_slowed=running < clock.SLOWED_BELOW * speed,
    )


def _keep_holding(r: redis.Redis, lab_id: str, kept: float) -> float:
    """Refresh the inline barrier about once a real second (it lapses BARRIER_TTL after the last)."""
    if time.monotonic() - kept < 1.0:
        return kept
    clock.refresh(r, lab_id, INLINE_HOLDER)
    return time.monotonic()


def _finish_for_nobody(
    r: redis.Redis, lab_id: str, lock: str, proc: subprocess.Popen, out, t0: float, duration: float, poll: float
) -> None:
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
        stream.emit(
            r,
            lab_id,
            "inline.finished",
            clock.now(r, lab_id),
            simulated=round(clock.now(r, lab_id) - t0, 3),
            answered=False,
        )
    except redis.RedisError:
        pass  # the lab was torn down meanwhile
    finally:
        out.unlink(missing_ok=True)
        try:
            clock.lift(r, lab_id, INLINE_HOLDER)
            r.delete(lock)
        except redis.RedisError:
            pass
