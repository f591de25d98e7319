"""The worker route: kill a lab's worker (and its horse) mid-job, as a crash would."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app import limits
from app.auth import lab_access
from app.errors import ApiError
from app.pool import ask_pool
from app.store import get_redis
from core import registry
from core.keys import key

bp = Blueprint("workers", __name__)


@bp.post("/api/labs/<lab_id>/workers/<worker_id>/kill")
@lab_access(write=True)
def kill_worker(lab_id: str, worker_id: str):
    """Ask the supervisor (which owns the processes) to SIGKILL the worker and its horse."""
    r = get_redis()
    limits.check_rate(r, "kills")
    if worker_id == "random":
        busy = [w["id"] for w in registry.workers(r, lab_id) if w.get("state") == "busy"]
        if not busy:
            raise ApiError(409, "no_busy_worker", "no worker is busy right now")
        worker_id = busy[0]
    if not r.hexists(key(lab_id, "workers"), worker_id):
        raise ApiError(404, "unknown_worker", f"no worker {worker_id!r} in this lab")
    return jsonify(ask_pool(r, {"cmd": "kill", "lab": lab_id, "worker": worker_id}))
