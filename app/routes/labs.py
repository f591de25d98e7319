"""The lab routes: open one (from a preset, or as a branch of a run), read it, park it, delete it.

Read calls accept the lab's token or its view token; mutating calls need the lab token.
Every bad input answers with `{error, detail}` and a 4xx status, never a 500.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify

import chapters
from app import bodies, branch_seed, limits
from app.auth import lab_access, refuse_foreign_origin
from app.http import json_body, parse
from app.store import get_redis
from core import parking, registry
from core.keys import PARKED

bp = Blueprint("labs", __name__)


@bp.post("/api/labs")
def create_lab():
    """Open a lab from a preset; with `branch_of` + `at_event` (+ `settings`), branch an existing run.

    A lab costs processes, so opening one is limited like any resource: a foreign page's form post is
    refused (403), and each client has a concurrency and a rate limit (429 + Retry-After)."""
    refuse_foreign_origin()
    body = json_body()
    r = get_redis()
    if "branch_of" in body or "at_event" in body:
        created, status = branch_seed.branch_from_request(parse(body, bodies.BRANCH))
        return _lab_created(created, status)
    cfg = current_app.config["LAB"]
    clean = parse(body, bodies.NEW_LAB, speed=cfg.speed)
    preset = clean["preset"]
    [lab] = limits.open_labs(r, [registry.processes_of(chapters.settings_for(preset))])
    created = registry.create(r, preset, clean["speed"], chapters.settings_for(preset), lab=lab)
    limits.opened(r, [lab])
    created["preset"] = preset
    # what GET /api/labs/{lab} would answer now: the page that opened the lab starts from it without a
    # second round trip before its first live event
    created["snapshot"] = registry.snapshot(r, created["lab_id"])
    return _lab_created(created, 201)


def _lab_created(created: dict, status: int):
    lab = created["lab_id"]
    created["ws_url"] = f"/ws/labs/{lab}"
    resp = jsonify(created)
    resp.status_code = status
    resp.set_cookie(
        f"lab_{lab}", created["token"], httponly=True, samesite="Strict", max_age=current_app.config["LAB"].lab_idle_ttl
    )
    return resp


@bp.get("/api/labs/<lab_id>")
@lab_access(write=False)
def get_lab(lab_id: str):
    return jsonify(registry.snapshot(get_redis(), lab_id))


@bp.delete("/api/labs/<lab_id>")
@lab_access(write=True, resume=False)
def delete_lab(lab_id: str):
    registry.teardown(get_redis(), lab_id, current_app.config["LAB"].var_dir)
    return "", 204


@bp.post("/api/labs/<lab_id>/park")
@lab_access(write=True, resume=False)
def park_lab(lab_id: str):
    """Park this lab now (the owner's choice, e.g. to make room under the running-lab cap): its processes
    stop and its slot is freed; its history stays, and opening its page again resumes it. A race's lane parks
    with every other lane of its race (core/parking.py). `parked` says what
    happened: false if it was parked already, or a page resumed it while this call was parking it."""
    r = get_redis()
    did = parking.park(r, lab_id, parking.OWNER_WHY, by_owner=True)
    return jsonify(lab_id=lab_id, parked=did, state="parked" if r.sismember(PARKED, lab_id) else "running")
