"""The event route: a lab's event stream after an id (the polling twin of `WS /ws/labs/{lab}`)."""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.auth import lab_access
from app.http import parse_after
from app.store import get_redis
from core import stream

bp = Blueprint("events", __name__)


@bp.get("/api/labs/<lab_id>/events")
@lab_access(write=False)
def get_events(lab_id: str):
    after = parse_after(request.args.get("after"))
    return jsonify(events=stream.read_after(get_redis(), lab_id, after))
