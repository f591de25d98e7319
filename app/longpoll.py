"""Conditional GETs and long-polls shared by the job resource (API) and chapter 3's status routes.

A held request blocks on the lab's event stream (XREAD BLOCK): every state change is appended to
that stream in the same atomic step as the change, so a held request wakes the moment its job
moves, with no re-check loop. A held request costs a greenlet and a blocking server connection, so
held polls are capped per web process (503), per lab and per client address (429): beyond a cap the
client is told to fall back to plain polling.
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
from flask import current_app, jsonify, request

from app import limits
from app.errors import ApiError
from core.keys import key

CLIENTS = ("poll", "etag", "long")  # ?client= labels, so the lab can tally each watcher's load
MAX_WAIT_S = 25.0  # the lesson's hold time; a longer hold only ties a connection up longer
# One XREAD blocks at most this long, then the hold blocks again: redis-py reads with a 5 s socket
# timeout, so a single 25 s block would be cut off (and a loaded box adds to any block's length).
BLOCK_CHUNK_S = 2.0

_held: Counter[str] = Counter()  # lab, or "client:" + address → long-polls held now in this process ("" = all)
_held_lock = threading.Lock()


def etag_of(body: dict) -> str:
    """A strong validator of exactly this body: equal bodies, equal tags, so unchanged polls get 304."""
    return '"' + hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16] + '"'


@contextmanager
def long_poll_slot(lab_id: str) -> Iterator[None]:
    """Hold one of the process's long-poll slots for the duration, or refuse clearly. The lab's and the client's
    own caps come before the process's: one address holding its share is told so (429), and the 503 is left
    for a server that many clients together have filled."""
    cfg = current_app.config["LAB"]
    who = f"client:{limits.client()}"
    with _held_lock:
        if _held[lab_id] >= cfg.long_poll_per_lab:
            raise ApiError(
                429,
                "long_poll_limit",
                f"this lab already holds {cfg.long_poll_per_lab} long-polls; poll without ?wait for now",
                {"Retry-After": "2"},
            )
        if cfg.long_poll_per_client > 0 and _held[who] >= cfg.long_poll_per_client:
            raise ApiError(
                429,
                "long_poll_client_limit",
                f"one client may hold {cfg.long_poll_per_client} long-polls "
                "at once across its labs, and you hold them all; poll without ?wait for now",
                {"Retry-After": "2"},
            )
        if _held[""] >= cfg.long_poll_max:
            raise ApiError(
                503,
                "long_poll_capacity",
                f"this server already holds {cfg.long_poll_max} long-polls; poll without ?wait for now",
                {"Retry-After": "2"},
            )
        held = ("", lab_id, who)
        for k in held:
            _held[k] += 1
    try:
        yield
    finally:
        with _held_lock:
            for k in held:
                _held[k] -= 1
                if k and not _held[k]:
                    del _held[k]


def parse_wait(raw: str | None) -> float:
    """Seconds to hold (0 = answer now), clipped to the lesson's 25 s."""
    try:
        wait = float(raw or 0)
    except ValueError:
        raise ApiError(422, "invalid_wait", {"wait": f"must be a number of seconds (0–{MAX_WAIT_S:g})"}) from None
    if wait != wait or wait < 0:
        raise ApiError(422, "invalid_wait", {"wait": f"must be a number of seconds (0–{MAX_WAIT_S:g})"})
    return min(MAX_WAIT_S, wait)


def hold_until_changed(
    r: redis.Redis,
    lab_id: str,
    job_ids: set[str],
    client_tag: str | None,
    wait_s: float,
    view: Callable[[], tuple[Any, str]],
) -> tuple[Any, str, bool]:
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
                raise ApiError(
                    503,
                    "status_store_unavailable",
                    f"the event stream did not answer ({e}); ask again",
                    {"Retry-After": "1"},
                ) from None
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


def held_now(lab_id: str) -> int:
    """Long-polls this process holds for `lab_id` right now."""
    with _held_lock:
        return _held[lab_id]
