"""The API's self-description: the widget's vocabulary (`/api/meta`), the numbers model and the OpenAPI
document."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

import chapters
from app.errors import ApiError
from core import numbers, settings, stream
from core.events import EVENT_TYPES, FAULTS, SAMPLES

bp = Blueprint("meta", __name__)


@bp.get("/api/model")
def model():
    """The numbers model as JSON (inputs, specs, figures); query parameters override inputs."""
    given = {k: v for k, v in request.args.items() if v != ""}
    try:
        inputs = numbers.inputs_from_mapping(given)
    except numbers.InputError as e:
        raise ApiError(422, "invalid_inputs", e.errors) from None
    return jsonify(chapters.to_json(inputs))


@bp.get("/api/openapi.json")
def openapi_document():
    """This API as an OpenAPI 3.1 document, generated from the routes themselves."""
    from app.openapi import document

    return jsonify(document(current_app))


@bp.get("/api/meta")
def meta():
    """Settings schema, presets, event vocabulary, scenario buttons, guided steps, sample clips, fault labels and
    the event stream's cap: the widget builds itself from these and repeats none of them.

    ?preset= keeps only that preset's scenario buttons and steps (a chapter's widget shows no other: about a
    third of the answer's bytes, on every chapter page's first load)."""
    buttons, steps = chapters.BUTTONS, chapters.steps_public()
    preset = request.args.get("preset")
    if preset is not None:
        if preset not in chapters.PRESETS:
            raise ApiError(422, "invalid_preset", {"preset": f"one of {', '.join(chapters.PRESETS)}"})
        buttons, steps = {preset: buttons.get(preset, [])}, {preset: steps.get(preset, [])}
    resp = jsonify(
        settings=settings.schema_json(),
        presets=chapters.PRESETS,
        events={t: {"counter": c, "text": text} for t, (c, text) in EVENT_TYPES.items()},
        faults=list(FAULTS),
        scenario_buttons=buttons,
        steps=steps,
        fault_text={f: {"label": label, "doc": doc} for f, (label, doc) in FAULTS.items()},
        samples=[{"name": n, "label": label} for n, label in SAMPLES.items()],
        stream_cap=stream.MAXLEN,
    )
    # the same for every visitor until a deploy: a reload revalidates it (304, no body), never re-reads it
    resp.add_etag()
    resp.cache_control.no_cache = True
    return resp.make_conditional(request)
