"""The dead-letter queue routes: list a lab's dead letters and replay them."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app import bodies
from app.auth import lab_access
from app.http import json_body, parse
from app.store import get_redis
from core import clock
from core.broker import dlq

bp = Blueprint("dlq", __name__)


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
    return jsonify(replayed=dlq.replay(r, lab_id, clock.now(r, lab_id), reason or None, rate=rate), rate=rate)
