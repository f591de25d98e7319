"""Routes for branched runs: what a lab was branched from, and two runs side by side (`/compare`)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template, request

import chapters
from app.auth import lab_access
from app.branch_seed import info
from app.store import get_redis
from core import registry, settings
from core.keys import key

bp = Blueprint("branch", __name__)


@bp.get("/api/labs/<lab_id>/branch")
@lab_access(write=False)
def get_branch(lab_id: str):
    """What this lab was branched from: parent lab, event, simulated time and the settings changed."""
    return jsonify(branch=info(get_redis(), lab_id))


def _shown(value: Any) -> str:
    """A setting as the widget shows it: on/off, 1200 rather than 1200.0."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    return "–" if value is None else str(value)


@bp.get("/compare")
def compare():
    """Two runs side by side (a run and its branch, or any two labs), each opened with its view token."""
    r = get_redis()
    back = request.args.get("back", "")
    back = back if back.startswith("/chapters/") else ""  # only ever a link back into the course
    runs = []
    for side in ("a", "b"):
        lab, token = request.args.get(side, ""), request.args.get(f"{side}v", "")
        if not lab or len(lab) > 32 or not registry.exists(r, lab) or registry.check_token(r, lab, token, True) is None:
            return render_template(
                "compare.html",
                runs=[],
                chapters=chapters.all_chapters(),
                error=f"Run {side.upper()} is not a lab this link opens (it may have expired).",
            ), 404
        runs.append(
            {
                "side": side,
                "wid": f"run-{side}",
                "lab": lab,
                "view": token,
                "settings": registry.settings(r, lab),
                "branch": info(r, lab),
                "preset": r.hget(key(lab, "meta"), "preset"),
            }
        )
    diff = [
        {
            "name": n,
            "label": settings.BY_NAME[n].label or n,
            "unit": settings.BY_NAME[n].unit,
            "a": _shown(runs[0]["settings"].get(n)),
            "b": _shown(runs[1]["settings"].get(n)),
        }
        for n in settings.BY_NAME
        if runs[0]["settings"].get(n) != runs[1]["settings"].get(n)
    ]
    return render_template(
        "compare.html", runs=runs, diff=diff, error=None, back=back, chapters=chapters.all_chapters()
    )
