"""JSON errors `{error, detail}` for the API; no request ends in an HTML 500 page for bad input."""

from __future__ import annotations

import redis
from flask import Flask, jsonify, request
from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import HTTPException

RETRY_AFTER_S = 2
"""What a client is told to wait while the Redis-protocol server is down (the launcher restarts it)."""


class ApiError(Exception):
    """An error the API answers with a status and a JSON body, raised anywhere below a route."""

    def __init__(self, status: int, error: str, detail: object = None, headers: dict | None = None):
        super().__init__(error)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers or {}


def _wants_json() -> bool:
    return request.path.startswith(("/api/", "/ws/", "/healthz", "/metrics"))


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def api_error(e: ApiError):
        return jsonify(error=e.error, detail=e.detail), e.status, e.headers

    @app.errorhandler(redis.ConnectionError)
    @app.errorhandler(redis.TimeoutError)
    def store_down(e: Exception):
        """The Redis-protocol server is down or restarting (BusyLoadingError is a ConnectionError):
        every call says so with 503 and Retry-After, never a 500 — the launcher brings it back."""
        headers = {"Retry-After": str(RETRY_AFTER_S)}
        if not _wants_json():
            return ("<!doctype html><title>Restarting</title><p>The lab's data store is restarting; "
                    "this page will work again in a few seconds.</p>", 503, headers)
        return jsonify(error="unavailable", detail="the lab's data store is restarting; try again in a few "
                       "seconds"), 503, headers

    @app.errorhandler(ParseException)
    @app.errorhandler(NoMoreData)
    def bad_framing(e: Exception):
        """The body's HTTP framing is broken (a chunk size such as `zz`, a missing chunk terminator, a body
        cut short): gunicorn's reader raises only when a route reads the body, so it surfaces here. The
        connection's framing is lost with it, so it is closed rather than reused for another request."""
        close_after_response()
        return jsonify(error="invalid_framing", detail=f"the request body is not valid HTTP framing: {e}"[:200]), 400

    from app.http import close_after_response, guard_request

    app.before_request(guard_request)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException):
        if not _wants_json():
            return e
        name = (e.name or "error").lower().replace(" ", "_")
        return jsonify(error=name, detail=e.description), e.code
