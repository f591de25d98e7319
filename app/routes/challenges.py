"""The challenge routes: run a learner's handler on a chapter's workload in their lab, and read the verdict.

`POST /api/labs/{lab}/challenge` checks the code (a syntax error answers 422 with a verdict that names its line,
never a 500), applies the challenge's settings and starts the run (core/challenges/run.py); the pool's work
horses run each attempt in the sandbox. `GET …/challenge` answers `running` until the run settles, then the
checker's verdict. Where the sandbox cannot be made, both answer 503 `sandbox_unavailable`: a learner's code
never runs unconfined.
"""

from __future__ import annotations

import ast
from typing import Any

from flask import Blueprint, jsonify

import chapters
from app import bodies, limits
from app.auth import lab_access
from app.errors import ApiError
from app.http import json_body, parse
from app.store import get_redis, get_rq
from core import registry
from core.challenges import box, describe
from core.challenges import run as runs

bp = Blueprint("challenges", __name__)


def _sandbox() -> None:
    why = box.confined()
    if why:
        raise ApiError(
            503,
            "sandbox_unavailable",
            "challenges are off on this server: a learner's handler runs only "
            f"in a sandbox, and this host cannot make one ({why[:200]})",
        )


@bp.get("/api/challenges")
def list_challenges():
    return jsonify(challenges=[describe(k, v) for k, v in chapters.CHALLENGES.items()], sandbox=box.confined() == "")


def code_error(code: str) -> dict[str, Any] | None:
    """Why this code cannot be a handler (a syntax error and its line, no `handle`), or None. Parsed only:
    nothing of it runs in this process."""
    try:
        tree = ast.parse(code, "handler.py")
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", None)
        return {
            "error": "syntax_error",
            "line": line,
            "detail": f"SyntaxError{f' on line {line}' if line else ''}: {getattr(e, 'msg', str(e))}",
        }
    if not any(isinstance(n, ast.FunctionDef) and n.name == "handle" for n in tree.body):
        return {"error": "no_handle", "line": None, "detail": "the handler must define `def handle(ctx):`"}
    return None


@bp.post("/api/labs/<lab_id>/challenge")
@lab_access(write=True)
def run_challenge(lab_id: str):
    body = parse(json_body(), bodies.CHALLENGE)
    _sandbox()
    spec = chapters.CHALLENGES[body["challenge"]]
    bad = code_error(body["code"])
    if bad:
        verdict = {"state": "error", "passed": False, "error": bad["detail"], "line": bad["line"]}
        return jsonify(error=bad["error"], detail=bad["detail"], verdict=verdict), 422
    r = get_redis()
    if runs.read(r, lab_id).get("state") == "running":
        raise ApiError(409, "challenge_running", "a run of this lab's challenge is still going: wait for its verdict")
    limits.check_rate(r, "challenges")
    if "workers" in spec["settings"]:
        try:
            limits.resize(r, lab_id, registry.processes_of({**registry.settings(r, lab_id), **spec["settings"]}))
        except ApiError:
            limits.refund(r, "challenges")  # a run the host has no room for spends none of the client's runs
            raise
    registry.update_settings(r, lab_id, spec["settings"])
    started = runs.start(r, get_rq(), lab_id, body["challenge"], spec, body["code"])
    return jsonify(**started, verdict_url=f"/api/labs/{lab_id}/challenge"), 202


@bp.get("/api/labs/<lab_id>/challenge")
@lab_access(write=False)
def challenge_verdict(lab_id: str):
    r = get_redis()
    row = runs.read(r, lab_id)
    spec = chapters.CHALLENGES.get(row.get("challenge", ""))
    return jsonify(runs.verdict(r, lab_id, spec))
