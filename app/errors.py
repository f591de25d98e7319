"""JSON errors `{error, detail}` for the API; no request ends in an HTML 500 page for bad input."""

from __future__ import annotations

import errno

import redis
from flask import Flask, jsonify, request
from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import HTTPException

from core.blobs import LabGone
from core.disk import persist_refused

RETRY_AFTER_S = 2
"""What a client is told to wait while the Redis-protocol server is down (the launcher restarts it)."""
DISK_FULL_RETRY_S = 60
"""What a client is told to wait when a disk is full: someone has to free space first."""
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class ApiError(Exception):
    """An error the API answers with a status and a JSON body, raised anywhere below a route."""

    def __init__(self, status: int, error: str, detail: object = None, headers: dict | None = None):
        super().__init__(error)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers or {}
        self.extra: dict = {}  # more fields for the body (a refusal at the lab cap lists the client's labs)


def _wants_json() -> bool:
    return request.path.startswith(("/api/", "/ws/", "/healthz", "/metrics"))


def close_after_response() -> None:
    """Close the connection once this response is sent, when the request's chunked body is broken or unread.

    gunicorn drops a `Connection: close` the app sets, and it would then discard the rest of the body to
    reach the next request, meet the same bad framing and write a second answer on the same connection;
    its chunked reader holds the request, whose `must_close` it honours."""
    req = getattr(getattr(request.environ.get("wsgi.input"), "reader", None), "req", None)
    if req is not None:
        req.must_close = True


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def api_error(e: ApiError):
        return jsonify(error=e.error, detail=e.detail, **e.extra), e.status, e.headers

    @app.errorhandler(redis.ConnectionError)
    @app.errorhandler(redis.TimeoutError)
    def store_down(e: Exception):
        """The Redis-protocol server is down or restarting (BusyLoadingError is a ConnectionError):
        every call says so with 503 and Retry-After, never a 500 — the launcher brings it back."""
        headers = {"Retry-After": str(RETRY_AFTER_S)}
        if not _wants_json():
            return (
                "<!doctype html><title>Restarting</title><p>The lab's data store is restarting; "
                "this page will work again in a few seconds.</p>",
                503,
                headers,
            )
        return (
            jsonify(error="unavailable", detail="the lab's data store is restarting; try again in a few seconds"),
            503,
            headers,
        )

    @app.errorhandler(redis.exceptions.OutOfMemoryError)
    def store_full(e: Exception):
        """The Redis-protocol server is at its `maxmemory` (noeviction): the write was refused whole (a
        script or MULTI is atomic), so nothing half-done is left; say so, never a 500."""
        return (
            jsonify(
                error="server_memory_full",
                detail="the lab server's memory is full (its maxmemory); "
                "nothing was stored. Try again when other labs have ended",
            ),
            507,
            {"Retry-After": "60"},
        )

    @app.errorhandler(OSError)
    def disk_full(e: OSError):
        """A write to VAR_DIR found its disk full (ENOSPC, or a quota): 507 naming the cause, never a 500.
        Any other OSError is no answer of ours: it goes on to the ordinary 500."""
        if e.errno not in DISK_FULL:
            raise e
        return (
            jsonify(
                error="disk_full",
                detail=f"this server's disk is full ({e.strerror}): nothing was stored. "
                "Try again when space has been freed",
            ),
            507,
            {"Retry-After": str(DISK_FULL_RETRY_S)},
        )

    @app.errorhandler(redis.ResponseError)
    def store_cannot_persist(e: redis.ResponseError):
        """The Redis-protocol server refuses writes because its own disk is full (MISCONF): 507 naming the
        cause, never a 500. Any other server error goes on to the ordinary 500."""
        if not persist_refused(e):
            raise e
        return (
            jsonify(
                error="server_disk_full",
                detail="the lab server cannot write to its disk (it is full), so "
                "it refuses changes: nothing was stored; reading still works. Try again when space has "
                "been freed",
            ),
            507,
            {"Retry-After": str(DISK_FULL_RETRY_S)},
        )

    @app.errorhandler(LabGone)
    def lab_gone(e: Exception):
        """A write for a lab deleted while the request ran (an upload that finished after the delete)."""
        return jsonify(
            error="lab_gone", detail="this lab was deleted (or expired) while the request ran; nothing was stored"
        ), 410

    @app.errorhandler(ParseException)
    @app.errorhandler(NoMoreData)
    def bad_framing(e: Exception):
        """The body's HTTP framing is broken (a chunk size such as `zz`, a missing chunk terminator, a body
        cut short): gunicorn's reader raises only when a route reads the body, so it surfaces here. The
        connection's framing is lost with it, so it is closed rather than reused for another request."""
        close_after_response()
        return jsonify(error="invalid_framing", detail=f"the request body is not valid HTTP framing: {e}"[:200]), 400

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException):
        if not _wants_json():
            return e
        name = (e.name or "error").lower().replace(" ", "_")
        return jsonify(error=name, detail=e.description), e.code
