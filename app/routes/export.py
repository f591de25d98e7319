"""Export a run: its events as JSON Lines and its counts as CSV, for a spreadsheet or a notebook.

Readable with the view token, so a student watching the instructor's lab can take the run home.
The JSONL lines are exactly what `/events` and the WebSocket carry, oldest first.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import redis
from flask import Blueprint, Response

from app.auth import lab_access
from app.store import get_redis
from core import registry, stream

bp = Blueprint("export", __name__)
BATCH = 1000


def all_events(r: redis.Redis, lab: str) -> Iterator[dict]:
    """Every event still in the lab's (capped) stream, read in batches so a long run streams out."""
    after = "0"
    while True:
        batch = stream.read_after(r, lab, after, count=BATCH)
        yield from batch
        if len(batch) < BATCH:
            return
        after = batch[-1]["id"]


def _download(body, mimetype: str, filename: str) -> Response:
    return Response(
        body,
        mimetype=mimetype,
        headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"},
    )


@bp.get("/api/labs/<lab_id>/export.jsonl")
@lab_access(write=False)
def export_events(lab_id: str):
    """The run's events as JSON Lines (one event per line, oldest first), as /events returns them."""
    lines = (json.dumps(ev, separators=(",", ":")) + "\n" for ev in all_events(get_redis(), lab_id))
    return _download(lines, "application/x-ndjson", f"lab-{lab_id}-events.jsonl")


@bp.get("/api/labs/<lab_id>/export.csv")
@lab_access(write=False)
def export_counts(lab_id: str):
    """The run's counts as CSV (`count,value`), the same numbers as the snapshot's `counts`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["count", "value"])
    writer.writerows(registry.counts(get_redis(), lab_id).items())
    return _download(out.getvalue(), "text/csv", f"lab-{lab_id}-counts.csv")
