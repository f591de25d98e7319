"""Request helpers every blueprint shares: the JSON body and its declared fields, stream ids, a job by id."""

from __future__ import annotations

from flask import request

from app.bodies import Body
from app.errors import ApiError
from app.store import get_redis
from core import registry


def json_body() -> dict:
    data = request.get_json(silent=True)
    if data is None:
        if request.data.strip():
            raise ApiError(400, "invalid_json", "the body is not valid JSON")
        return {}
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    return data


def parse_after(value: str | None) -> str:
    """A stream id `ms-seq` (or 0); anything else is a 422."""
    value = value or "0"
    ms, _, seq = value.partition("-")
    if not ms.isdigit() or (seq and not seq.isdigit()) or len(value) > 40:
        raise ApiError(422, "invalid_after", {"after": "must be an event id like 1700000000000-0"})
    return value


def job_or_404(lab_id: str, job_id: str) -> dict:
    j = registry.read_job(get_redis(), lab_id, job_id) if len(job_id) <= 20 else None
    if j is None:
        raise ApiError(404, "unknown_job", f"no job {job_id!r} in this lab")
    return j


def parse(body: dict, spec: Body, **defaults) -> dict:
    """The body's clean values as `spec` declares them (app/bodies.py), or a 422 naming each bad field.

    `defaults` supplies what only the request knows (the lab's own job duration, the deployment's speed).
    """
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    clean, errors, first = spec.check(body, defaults)
    if errors:
        error, status = first or (spec.error, 422)
        raise ApiError(status, error, errors)
    return clean
