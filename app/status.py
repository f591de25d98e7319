"""Chapter 3's status resource: the small body a client polls, conditional GETs, and long-polls.

`GET .../status` answers the lesson's status body (job id, status, attempt count, result) with an
ETag of exactly that body, so a poll that learns nothing gets a bodiless 304. `?wait=N` turns the
same GET into a long-poll. The hold blocks on the lab's event stream (XREAD BLOCK): every state
change is appended to that stream in the same atomic step as the change, so a held request wakes
the moment its job moves, with no re-check loop. A held request costs a gthread thread, so held
polls are capped per web process (503) and per lab (429): beyond the cap the client is told to
fall back to plain polling rather than left hanging.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from flask import Blueprint, current_app, jsonify, request

from app.api import _job_or_404, lab_access
from app.errors import ApiError
from app.store import get_redis, get_rq
from workers.broker import reaper
from workers.broker.keys import key

bp = Blueprint("status", __name__)

MAX_WAIT_S = 25.0  # the lesson's hold time; a longer hold only ties a thread up longer
# One XREAD blocks at most this long, then the hold blocks again: redis-py reads with a 5 s socket
# timeout, so a single 25 s block would be cut off (and a loaded box adds to any block's length).
BLOCK_CHUNK_S = 2.0
CLIENTS = ("poll", "etag", "long")  # ?client= labels, so the lab can tally each watcher's load
MAX_BATCH = 50  # job ids one multi-job status request may name

_held: Counter[str] = Counter()  # lab → long-polls held now in this process ("" = all labs)
_held_lock = threading.Lock()


def status_body(j: dict, lab_id: str) -> dict[str, Any]:
    """What a client needs to know, and nothing that changes while nothing happens (no lease deadline)."""
    done = j["state"] == "done"
    return {"job_id": j["id"], "status": j["state"], "attempt_count": j["attempt"],
            "result_urls": j["outputs"] if done else None,
            "status_url": f"/api/labs/{lab_id}/jobs/{j['id']}/status"}


def etag_of(body: dict) -> str:
    """A strong validator of exactly this body: equal bodies, equal tags, so unchanged polls get 304."""
    return '"' + hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16] + '"'


@contextmanager
def long_poll_slot(lab_id: str) -> Iterator[None]:
    """Hold one of the process's long-poll slots for the duration, or refuse clearly."""
    cfg = current_app.config["LAB"]
    with _held_lock:
        if _held[""] >= cfg.long_poll_max:
            raise ApiError(503, "long_poll_capacity", f"this server already holds {cfg.long_poll_max} long-polls; "
                           "poll without ?wait for now", {"Retry-After": "2"})
        if _held[lab_id] >= cfg.long_poll_per_lab:
            raise ApiError(429, "long_poll_limit", f"this lab already holds {cfg.long_poll_per_lab} long-polls; "
                           "poll without ?wait for now", {"Retry-After": "2"})
        _held[""] += 1
        _held[lab_id] += 1
    try:
        yield
    finally:
        with _held_lock:
            _held[""] -= 1
            _held[lab_id] -= 1
            if not _held[lab_id]:
                del _held[lab_id]


def parse_wait(raw: str | None) -> float:
    """Seconds to hold (0 = answer now), clipped to the lesson's 25 s."""
    try:
        wait = float(raw or 0)
    except ValueError:
        raise ApiError(422, "invalid_wait", {"wait": f"must be a number of seconds (0–{MAX_WAIT_S:g})"}) from None
    if wait != wait or wait < 0:
        raise ApiError(422, "invalid_wait", {"wait": f"must be a number of seconds (0–{MAX_WAIT_S:g})"})
    return min(MAX_WAIT_S, wait)


def hold_until_changed(r: redis.Redis, lab_id: str, job_ids: set[str], client_tag: str | None, wait_s: float,
                       view: Callable[[], tuple[Any, str]]) -> tuple[Any, str, bool]:
    """Return (view, tag, held) as soon as `view()`'s tag differs from `client_tag`, or when `wait_s` runs out.

    The hold re-reads only when an event names one of `job_ids`. The stream position is taken
    *before* the first read, so a change landing between that read and the XREAD is still seen:
    it is an entry after that position.
    """
    events = key(lab_id, "events")
    top = r.xrevrange(events, count=1)
    last = top[0][0] if top else "0-0"
    shown, tag = view()
    if not wait_s or tag != client_tag:
        return shown, tag, False
    with long_poll_slot(lab_id):
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0.001:
            try:
                reply = r.xread({events: last}, count=500, block=max(1, int(min(left, BLOCK_CHUNK_S) * 1000)))
            except redis.RedisError as e:
                raise ApiError(503, "status_store_unavailable", f"the event stream did not answer ({e}); "
                               "ask again", {"Retry-After": "1"}) from None
            if not reply:
                continue
            entries = reply[0][1]
            last = entries[-1][0]
            if any(json.loads(f["e"]).get("job_id") in job_ids for _, f in entries):
                shown, tag = view()
                if tag != client_tag:
                    break
    return shown, tag, True


def conditional(r: redis.Redis, lab_id: str, job_ids: set[str], view: Callable[[], tuple[Any, str]]):
    """The shared GET: validate ?wait and ?client, hold if asked, answer 304 or 200 with the ETag."""
    client = request.args.get("client")
    if client is not None and client not in CLIENTS:
        raise ApiError(422, "invalid_client", {"client": f"must be one of {', '.join(CLIENTS)}"})
    wait_s = parse_wait(request.args.get("wait"))
    client_tag = request.headers.get("If-None-Match")  # none yet: the first answer comes at once
    body, tag, held = hold_until_changed(r, lab_id, job_ids, client_tag, wait_s, view)
    # the server's clock, so a browser can line its own up with the events' t_real (NTP-style)
    headers = {"ETag": tag, "Cache-Control": "no-cache", "Lab-Server-Time": f"{time.time():.4f}"}
    if held:
        headers["Long-Poll"] = "changed" if tag != client_tag else "timeout"
    if tag == client_tag:
        if client:
            tally(r, lab_id, client, 304, 0)
        return "", 304, headers
    resp = jsonify(body)
    resp.headers.update(headers)
    if client:
        tally(r, lab_id, client, 200, resp.content_length or 0)
    return resp


def tally(r: redis.Redis, lab_id: str, client: str, status: int, nbytes: int) -> None:
    """Per-watcher server-side counts: what the status path cost, beside what the browser measured."""
    k = key(lab_id, "status_load")
    with r.pipeline(transaction=False) as pipe:
        pipe.hincrby(k, f"{client}:requests", 1)
        pipe.hincrby(k, f"{client}:bytes", nbytes)
        if status == 304:
            pipe.hincrby(k, f"{client}:not_modified", 1)
        pipe.execute()


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
        body = status_body(_job_or_404(lab_id, job_id), lab_id)
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
        body = {"jobs": [status_body(_job_or_404(lab_id, i), lab_id) for i in ids]}
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
    with _held_lock:
        held = _held[lab_id]
    return jsonify(clients=out, long_polls_held=held, long_poll_cap=current_app.config["LAB"].long_poll_per_lab)


@bp.post("/api/labs/<lab_id>/jobs/<job_id>/late-delivery")
@lab_access(write=True)
def late_delivery(lab_id: str, job_id: str):
    """Send the job's current attempt to the workers once more, as an at-least-once broker may.

    A real worker takes it and tries the queued → running compare-and-swap; on a finished job the CAS
    finds `done` and refuses (`job.claim_refused`): the invalid done → running transition, caught.
    """
    j = _job_or_404(lab_id, job_id)
    reaper.send(get_rq(), lab_id, job_id, j["attempt"])
    return jsonify(job_id=job_id, attempt=j["attempt"], state=j["state"]), 202
