"""Idempotency-Key on job creation (lesson chapter 5): one logical upload makes one job, however
often a client on a flaky network resends it.

The key is claimed (SET NX) before the body is read, so a resend that arrives while the first
request is still uploading gets 409 instead of racing it; a finished key replays the stored
response; a key reused with a different body is a client bug (422). Keys live for the window the
numbers model derives from VT + transcode p99 (rounded up), measured on the lab's clock. When the
dedup store is unavailable (the `dedup_outage` fault) the lab's `dedup_fail_mode` decides: open
(proceed unchecked and risk a duplicate) or closed (refuse with 503 and let the client retry).

A claim names the web process that holds it. Each web process beats (`heartbeat`, a key that lapses
`ALIVE_TTL_S` after its last beat): when a resend meets a claim whose process no longer beats (a web worker
killed mid-request), the claim is taken over at once instead of answering 409 until the window ends. A
process that does not beat (a test client, a dev server) holds its claims for the whole window.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import socket
import time
from functools import cache

import redis
from flask import Response, jsonify, request
from redis.client import Pipeline

import chapters
from app.errors import ApiError
from core import clock, registry, stream
from core.keys import key, web_alive

MAX_KEY_CHARS = 200
ALIVE_EVERY_S = 2.0
"""How often a web process beats."""
ALIVE_TTL_S = 6
"""How long a beat lasts: a killed web process's claims are taken over this long after its last beat."""
_beating: str | None = None  # this process's name in its claims, while its heartbeat is written


def heartbeat(r: redis.Redis) -> None:
    """Beat for this web process, forever (runtime/web_worker.py runs it in a greenlet of its own)."""
    global _beating
    name = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    while True:
        try:
            r.set(web_alive(name), 1, ex=ALIVE_TTL_S)
            _beating = name
        except redis.RedisError:
            _beating = None  # unproven while the server is away: claims made meanwhile hold for the window
        time.sleep(ALIVE_EVERY_S)


def holder_gone(r: redis.Redis, prior: dict) -> bool:
    """True if the claim's web process has stopped beating (killed mid-request): nobody will finish it."""
    return bool(prior.get("holder")) and not r.exists(web_alive(prior["holder"]))


@cache
def model() -> dict:
    """The model's dedup window and memory cost at the lesson's default inputs."""
    return chapters.figures_of("idempotency")


def store_down(r: redis.Redis, lab: str, now: float) -> bool:
    """True while the lab's `dedup_outage` fault is on: the key store is treated as unreachable."""
    return float(r.hget(key(lab, "faults"), "dedup_outage_until") or -1) > now


class Claim:
    """One request's hold on an Idempotency-Key: owner (will store its response) or replayer."""

    def __init__(self, r: redis.Redis, lab: str, redis_key: str | None, prior: dict | None, now: float):
        self.r, self.lab, self.redis_key, self.prior, self.now = r, lab, redis_key, prior, now

    def replay(self, body: dict) -> Response | None:
        """The stored response if this key already finished with this body; 422 for another body."""
        if self.prior is None:
            return None
        if self.prior["fingerprint"] != fingerprint(body):
            stream.emit(self.r, self.lab, "idempotency.mismatch", self.now)
            raise ApiError(422, "idempotency_key_reused", "this Idempotency-Key was used with a different body")
        stream.emit(self.r, self.lab, "idempotency.replayed", self.now, job_id=self.prior["response"]["job_id"])
        resp = jsonify(self.prior["response"])
        resp.status_code, resp.headers["Idempotent-Replayed"] = 202, "true"
        return resp

    def abandon(self) -> None:
        """The request failed before a job existed: free the key so the client may retry (an owner
        only: a replayer must not delete the finished record it was replaying)."""
        if self.redis_key and self.prior is None:
            self.r.delete(self.redis_key)

    def made(self, pipe: Pipeline, body: dict, response: dict) -> None:
        """Remember the response for the window, written in the job's own transaction (`pipe`)."""
        if self.redis_key is not None:
            pipe.set(self.redis_key, record(fingerprint(body), response, self.now), ex=real_ttl(self.r, self.lab))

    def checked(self, resp: Response) -> Response:
        """Mark an unchecked (fail-open) request as such."""
        if self.redis_key is None:
            resp.headers["Idempotency-Checked"] = "false"
        return resp


def fingerprint(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def record(fp: str | None, response: dict | None, now: float) -> str:
    """A key's stored value: in progress (no response yet, held by this process) or finished."""
    held = {"holder": _beating} if response is None and _beating else {}
    return json.dumps({"fingerprint": fp, "response": response, "expires_sim": now + model()["dedup_window_s"], **held})


def real_ttl(r: redis.Redis, lab: str) -> int:
    """Redis's own expiry is a backstop a minute past the window in real seconds; the rule is the
    lab-clock expiry stored in the record (so a paused clock does not age keys)."""
    return math.ceil(model()["dedup_window_s"] / clock.read(r, lab)["speed"]) + 60


def begin(r: redis.Redis, lab: str, settings: dict) -> Claim | None:
    """Claim the request's Idempotency-Key (None when the request sent none)."""
    idem = request.headers.get("Idempotency-Key")
    if idem is None:
        return None
    if not 0 < len(idem) <= MAX_KEY_CHARS:
        raise ApiError(422, "invalid_idempotency_key", f"Idempotency-Key must be 1–{MAX_KEY_CHARS} characters")
    now = clock.now(r, lab)
    if store_down(r, lab, now):
        if settings["dedup_fail_mode"] == "closed":
            stream.emit(r, lab, "idempotency.refused", now)
            raise ApiError(
                503,
                "dedup_store_unavailable",
                "the idempotency store is down and this lab fails closed: retry later with the same key",
                {"Retry-After": "1"},
            )
        stream.emit(r, lab, "idempotency.unchecked", now)
        return Claim(r, lab, None, None, now)
    k = key(lab, "idem", hashlib.sha256(idem.encode()).hexdigest())
    for _ in range(2):
        if r.set(k, record(None, None, now), nx=True, ex=real_ttl(r, lab)):
            return Claim(r, lab, k, None, now)
        raw = r.get(k)
        prior = json.loads(raw) if raw else None
        if prior is None or prior["expires_sim"] <= now:
            r.delete(k)  # outlived its window on the lab's clock: a new operation
            continue
        if prior["response"] is None and holder_gone(r, prior):
            r.delete(k)  # its request died with its web process before any job existed (a job and its key's
            continue  # answer are written in one transaction: a claim still in progress made no job)
        if prior["response"] is None:
            stream.emit(r, lab, "idempotency.conflict", now)
            raise ApiError(409, "request_in_progress", "a request with this Idempotency-Key is still in progress")
        return Claim(r, lab, k, prior, now)
    raise ApiError(409, "request_in_progress", "a request with this Idempotency-Key is still in progress")


def status(r: redis.Redis, lab: str) -> dict:
    """Keys held now and their real memory, beside the model's window and memory cost."""
    held = list(r.scan_iter(match=key(lab, "idem", "*"), count=500))
    m = model()
    return {
        "window_s": m["dedup_window_s"],
        "worst_case_duplicate_gap_s": m["worst_case_duplicate_gap_s"],
        "fixed_vt_s": m["fixed_vt_s"],
        "transcode_p99_s": m["transcode_p99_s"],
        "model_keys_in_window": m["keys_in_window"],
        "model_key_bytes": m["idempotency_key_bytes"],
        "model_key_store_mb": m["key_store_mb"],
        "keys_held": len(held),
        "keys_held_bytes": sum(int(r.memory_usage(k) or 0) for k in held),
        "fail_mode": registry.settings(r, lab)["dedup_fail_mode"],
        "store_down": store_down(r, lab, clock.now(r, lab)),
    }
