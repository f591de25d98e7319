"""The OpenAPI document, generated from the real routes so it cannot drift from them.

Paths, methods and path parameters come from Flask's URL map; summaries from each view's
docstring; request schemas for settings from the settings schema itself.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask

from app import presets, settings

_KIND = {"int": {"type": "integer"}, "float": {"type": "number"}, "bool": {"type": "boolean"}}
ERROR = {"type": "object", "required": ["error"],
         "properties": {"error": {"type": "string"}, "detail": {}}}


def settings_schema() -> dict[str, Any]:
    props = {}
    for s in settings.SCHEMA:
        prop = dict(_KIND.get(s.kind, {"type": "string"}), description=s.doc, default=s.default)
        if s.kind == "choice":
            prop["enum"] = list(s.choices)
        elif s.kind in ("int", "float"):
            prop.update(minimum=s.min, maximum=s.max)
        props[s.name] = prop
    return {"type": "object", "properties": props, "additionalProperties": False}


BODIES: dict[str, dict[str, Any]] = {
    "api.create_lab": {"type": "object", "properties": {
        "preset": {"type": "string", "enum": list(presets.PRESETS)},
        "speed": settings_schema()["properties"]["speed"],
        "branch_of": {"type": "string", "description": "branch this lab (send its token or view token): "
                      "the new lab starts from that lab's moment `at_event`"},
        "at_event": {"type": "string", "description": "an event id of `branch_of`; the jobs not yet done then "
                     "are enqueued again as new jobs"},
        "settings": {**settings_schema(), "description": "settings changed for the branch (on top of the "
                     "parent's settings at `at_event`)"}}},
    "api.patch_settings": settings_schema(),
    "api.clock_action": {"type": "object", "properties": {
        "action": {"type": "string", "enum": ["pause", "resume", "step"]},
        "seconds": {"type": "number", "minimum": 10, "maximum": 7200},
        "speed": settings_schema()["properties"]["speed"]}},
    "api.create_job": {"type": "object", "properties": {
        "sample": {"type": "string", "enum": ["bigbuckbunny", "bikes", "carphone_pristine", "poison"]},
        "job_type": {"type": "string", "enum": ["transcode", "thumbnail"]},
        "duration_s": {"type": "number", "minimum": 1, "maximum": 7200}}},
    "api.inject_fault": {"type": "object", "required": ["type"], "properties": {
        "type": {"type": "string", "enum": ["storage_outage", "poison", "slow"]},
        "duration_s": {"type": "number", "minimum": 1, "maximum": 7200}}},
    "api.replay_dlq": {"type": "object", "properties": {"reason": {"type": "string"}}},
    "loadgen.control_loadgen": {"type": "object", "required": ["action"], "properties": {
        "action": {"type": "string", "enum": ["start", "stop", "rate", "peak", "unpeak"]},
        "rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 5},
        "seed": {"type": "integer", "minimum": 0}}},
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
                "operationId": f"{rule.endpoint}_{method.lower()}", "summary": doc,
                "parameters": [{"name": a, "in": "path", "required": True, "schema": {"type": "string"}}
                               for a in sorted(rule.arguments)],
                "responses": {"default": {"description": "error",
                                          "content": {"application/json": {"schema": ERROR}}},
                              "200": {"description": "ok"}},
            }
            if rule.rule.startswith("/api/labs/<"):
                op["security"] = [{"bearer": []}]
            if rule.endpoint in BODIES and method in ("POST", "PATCH"):
                op["requestBody"] = {"content": {"application/json": {"schema": BODIES[rule.endpoint]}}}
            paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Async Work Lab API", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": dict(sorted(paths.items())),
    }
