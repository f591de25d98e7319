"""JSON errors `{error, detail}` for the API; no request ends in an HTML 500 page for bad input."""

from __future__ import annotations

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException


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

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException):
        if not _wants_json():
            return e
        name = (e.name or "error").lower().replace(" ", "_")
        return jsonify(error=name, detail=e.description), e.code
