"""The OpenAPI document, generated from the real routes so it cannot drift from them.

Paths, methods and path parameters come from Flask's URL map; summaries from each view's
docstring; request bodies from their declarations in app/bodies.py (the same ones the routes parse
with), whose settings fields come from the settings schema itself.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask

import chapters
from app import bodies

ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}, "detail": {}}}


def upload_schema() -> dict[str, Any]:
    """A job with its own video: the multipart form carries the same fields as the JSON body, and the file."""
    schema = bodies.document_schema("jobs.create_job") or {"properties": {}}
    return {
        "type": "object",
        "required": ["file"],
        "properties": {
            "file": {"type": "string", "format": "binary", "description": "the video; its bytes decide, not its name"},
            **schema["properties"],
        },
    }


def _json(description: str, schema: dict | None = None) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or {"type": "object"}}}}


def _query(name: str, schema: dict, doc: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": doc}


_STREAM_ID = {"type": "string", "pattern": r"^\d+(-\d+)?$"}
QUERY: dict[str, list[dict[str, Any]]] = {
    "events.get_events": [_query("after", _STREAM_ID, "only events after this id")],
    "meta.meta": [
        _query(
            "preset",
            {"type": "string", "enum": list(chapters.PRESETS)},
            "only this preset's scenario buttons and steps",
        )
    ],
    "jobs.get_job": [
        _query("wait", {"type": "number", "minimum": 0, "maximum": 25}, "long-poll seconds"),
        _query("include", {"type": "string", "enum": ["history"]}, "add every attempt's internals"),
    ],
    "jobs.list_jobs": [
        _query(
            "prefix",
            {"type": "string", "pattern": r"^[1-9][0-9]{0,11}$"},
            "jobs whose number starts with these digits, however old",
        ),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 200}, "most matches (default 25)"),
    ],
    "loadgen.get_loadgen": [
        _query("window", {"type": "number", "minimum": 10, "maximum": 86400}, "simulated seconds measured over")
    ],
    "retries.get_retries": [
        _query("bucket_s", {"type": "number", "minimum": 0.01, "maximum": 3600}, "histogram bucket, simulated seconds")
    ],
    "ws.lab_events": [
        _query("after", _STREAM_ID, "resume after this id"),
        _query("token", {"type": "string"}, "the lab or view token"),
    ],
}
# What a call answers when it succeeds, where that is not "200 with a JSON object". Errors are
# always `{error, detail}` JSON (4XX, and 503 when a dependency is down).
SUCCESS: dict[str, dict[str, Any]] = {
    "labs.create_lab": {
        "201": _json(
            "the new lab; one from a preset also carries its `snapshot` (as GET answers it)",
            {"type": "object", "required": ["lab_id", "token", "view_token", "settings", "ws_url"]},
        )
    },
    "labs.delete_lab": {"204": {"description": "removed with its keys, files and workers"}},
    "jobs.create_job": {"202": _json("queued", {"type": "object", "required": ["job_id", "status_url"]})},
    "faults.inject_fault": {"202": _json("fault started", {"type": "object", "required": ["fault"]})},
    "inline.inline_transcode": {
        "200": _json("the inline transcode answered before the gateway gave up"),
        "504": _json("the gateway timeout passed first (the server transcodes on for nobody)", ERROR),
    },
    "jobs.get_job": {"200": _json("the job"), "304": {"description": "unchanged since If-None-Match"}},
    "jobs.get_output": {
        "200": {"description": "the file", "content": {"video/mp4": {}, "image/jpeg": {}}},
        "206": {"description": "a byte range", "content": {"video/mp4": {}, "image/jpeg": {}}},
        "304": {"description": "unchanged"},
    },
    "labs.park_lab": {
        "200": _json("the lab is parked: its processes stop, its history stays; opening its page again resumes it")
    },
    "health.metrics": {"200": {"description": "Prometheus text", "content": {"text/plain": {}}}},
    "health.healthz": {"200": _json("healthy"), "503": _json("Redis unreachable")},
    "ws.lab_events": {"101": {"description": "switching to the WebSocket protocol"}},
    "export.export_events": {
        "200": {"description": "the events, one JSON object per line", "content": {"application/x-ndjson": {}}}
    },
    "export.export_counts": {"200": {"description": "the counts as count,value rows", "content": {"text/csv": {}}}},
    "fairness.submit_jobs": {"202": _json("queued on the tier's queue")},
    "fairness.noisy_neighbour": {"202": _json("the burst and the nine quiet jobs queued")},
    "fairness.spike": {"202": _json("the tier's arrival rate raised until `until`")},
    "fairness.poison": {"202": _json("poison jobs queued on the tier's queue")},
    "status.late_delivery": {"202": _json("the finished job sent to a worker once more")},
    "rooms.create_room": {"201": _json("the new room, its join code and the instructor token")},
    "rooms.follow_room": {"201": _json("the student's own lab, a copy of the room's")},
    "rooms.join_room": {"201": _json("this page's seat in the room (`client`), for its presence and guesses")},
    "rooms.close_room": {"204": {"description": "the room is gone; its labs stay until they idle out"}},
    "webhooks.unregister": {"204": {"description": "no webhook any more"}},
    "races.create_race": {"201": _json("the race: one lab per variant, paused at t = 0, and the token to start it")},
}
ERRORS = {
    "4XX": _json("bad input, unknown thing, or not allowed", ERROR),
    "503": _json("a dependency (Redis, the worker pool) is unavailable", ERROR),
}

_PUBLIC = ("/api/", "/ws/", "/healthz", "/metrics")


def document(app: Flask) -> dict[str, Any]:
    paths: dict[str, dict] = {}
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(_PUBLIC):
            continue
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        view = app.view_functions[rule.endpoint]
        doc = (view.__doc__ or rule.endpoint).strip().splitlines()[0]
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            op: dict[str, Any] = {
                "operationId": f"{rule.endpoint}_{method.lower()}",
                "summary": doc,
                "parameters": [
                    {"name": a, "in": "path", "required": True, "schema": {"type": "string"}}
                    for a in sorted(rule.arguments)
                ]
                + QUERY.get(rule.endpoint, []),
                "responses": {**SUCCESS.get(rule.endpoint, {"200": _json("ok")}), **ERRORS},
            }
            if rule.rule.startswith("/api/labs/<"):
                op["security"] = [{"bearer": []}]
            body = bodies.document_schema(rule.endpoint)
            if body and method in ("POST", "PATCH", "PUT"):
                op["requestBody"] = {"content": {"application/json": {"schema": body}}}
            if rule.endpoint == "jobs.create_job":
                op["requestBody"]["content"]["multipart/form-data"] = {"schema": upload_schema()}
            paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Async Work Lab API", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": dict(sorted(paths.items())),
    }
