"""The clock route: pause, resume or step a lab's simulated clock, or change its speed."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app import bodies
from app.auth import lab_access
from app.errors import ApiError
from app.http import json_body, parse
from app.store import get_redis
from core import clock, registry, stream

bp = Blueprint("clock", __name__)


@bp.post("/api/labs/<lab_id>/clock")
@lab_access(write=True)
def clock_action(lab_id: str):
    body = parse(json_body(), bodies.CLOCK)
    r = get_redis()
    action = body.get("action")
    actions = {"pause": ("clock.paused", clock.pause), "resume": ("clock.resumed", clock.resume)}
    if action in actions:
        ev, fn = actions[action]
        stream.emit(r, lab_id, ev, fn(r, lab_id))
    elif action == "step":
        stream.emit(r, lab_id, "clock.stepped", clock.step(r, lab_id, body["seconds"]))
    elif "speed" not in body:
        raise ApiError(422, "invalid_action", {"action": "must be pause, resume or step"})
    if "speed" in body:
        registry.update_settings(r, lab_id, {"speed": body["speed"]})
    return jsonify(clock=clock.read(r, lab_id))
