"""The settings route: change a lab's settings live (a new worker count resizes its pool)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app import bodies, limits
from app.auth import lab_access
from app.http import json_body, parse
from app.store import get_redis
from core import registry

bp = Blueprint("settings", __name__)


@bp.patch("/api/labs/<lab_id>/settings")
@lab_access(write=True)
def patch_settings(lab_id: str):
    clean = parse(json_body(), bodies.SETTINGS)
    if "workers" in clean or "scheduler_replicas" in clean:
        merged = {**registry.settings(get_redis(), lab_id), **clean}
        limits.resize(get_redis(), lab_id, registry.processes_of(merged))
    return jsonify(settings=registry.update_settings(get_redis(), lab_id, clean))
