"""Request helpers every blueprint shares: the JSON body and its declared fields, stream ids, ids, a job by id.

The generic protections live here, once, below every route's own validation: a JSON body is
size- and depth-limited before it is parsed, its integers are range-checked, its strings must be
encodable (no lone surrogates) and it may not hold NaN/Infinity; path and query values are checked
for encoding before any route sees them; stream ids are parsed strictly. A hostile input is a 4xx,
never a 500.
"""

from __future__ import annotations

import json
import math
import re

from flask import current_app, request

from app.bodies import Body
from app.errors import ApiError
from app.store import get_redis
from core import registry

MAX_INT = 2**53
"""Largest magnitude an integer in a JSON body may have (what a browser's JSON.parse keeps exactly)."""
STREAM_ID = re.compile(r"^([0-9]{1,20})(?:-([0-9]{1,20}))?$")
U64 = 2**64 - 1
ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
"""What any id in a path may look like (lab ids are hex, job ids digits, workers w1…): ASCII only."""


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate such as \ud800
        return False
    return True


def _depth_ok(raw: bytes, limit: int) -> bool:
    """Is the JSON text nested no deeper than `limit`? Counted on the bytes, before any parser recurses."""
    depth, in_str, esc = 0, False, False
    for b in raw:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:  # backslash
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return False
        elif b in (0x5D, 0x7D):
            depth -= 1
    return True


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def check_value(value, path: str = "body") -> None:
    """Walk a parsed JSON value: integers within ±2^53, finite numbers, encodable strings and keys."""
    stack = [(value, path)]
    while stack:
        v, where = stack.pop()
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            if abs(v) > MAX_INT:
                raise ApiError(422, "invalid_body", {where: "integers must be within ±2^53"})
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ApiError(422, "invalid_body", {where: "numbers must be finite"})
        elif isinstance(v, str):
            if not _encodable(v):
                raise ApiError(400, "invalid_text", {where: "text must be valid Unicode (no lone surrogates)"})
        elif isinstance(v, dict):
            for k, item in v.items():
                if not _encodable(k):
                    raise ApiError(400, "invalid_text", {where: "keys must be valid Unicode (no lone surrogates)"})
                stack.append((item, f"{where}.{k}"[:80]))
        elif isinstance(v, list):
            stack.extend((item, f"{where}[{i}]"[:80]) for i, item in enumerate(v))


def parse_json(raw: bytes):
    """Bytes → a JSON value under the generic limits (size, depth, ranges, encoding); ApiError otherwise."""
    cfg = current_app.config["LAB"]
    if len(raw) > cfg.max_json_bytes:
        raise ApiError(413, "body_too_large", f"JSON bodies are limited to {cfg.max_json_bytes} bytes")
    if not _depth_ok(raw, cfg.max_json_depth):
        raise ApiError(400, "too_deep", f"JSON nested deeper than {cfg.max_json_depth} levels is refused")
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # includes UnicodeDecodeError and ints past Python's digit limit
        raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
    check_value(data)
    return data


def json_body() -> dict:
    length = request.content_length
    cfg = current_app.config["LAB"]
    if length is not None and length > cfg.max_json_bytes:
        raise ApiError(413, "body_too_large", f"JSON bodies are limited to {cfg.max_json_bytes} bytes")
    raw = request.get_data(cache=True)
    if not raw.strip():
        return {}
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    return data


def parse_after(value: str | None) -> str:
    """A stream id `ms` or `ms-seq` (ASCII digits, each part < 2^64), or 0; anything else is a 422.

    The largest id, 2^64-1 with sequence 2^64-1, is refused too: "strictly after" it is a range the server
    cannot even express (XRANGE answers an error), and no event can ever carry a later id."""
    value = value or "0"
    m = STREAM_ID.match(value)
    if not m or int(m.group(1)) > U64 or (m.group(2) is not None and int(m.group(2)) > U64):
        raise ApiError(422, "invalid_after", {"after": "must be an event id like 1700000000000-0"})
    if int(m.group(1)) == U64 and m.group(2) is not None and int(m.group(2)) == U64:
        raise ApiError(422, "invalid_after", {"after": "is the largest possible event id: nothing can follow it"})
    return value


def valid_id(value: str) -> bool:
    """An id fit to reach Redis: short, ASCII letters, digits and -_.: only."""
    return isinstance(value, str) and bool(ID.match(value))


def guard_request() -> None:
    """Before any route: path values and query strings must be valid Unicode (a lone surrogate or an
    undecodable byte is a 400, not a crash further down)."""
    for name, v in (request.view_args or {}).items():
        if isinstance(v, str) and not _encodable(v):
            raise ApiError(400, "invalid_text", {name: "must be valid Unicode"})
    for name, v in request.args.items(multi=True):
        if not (_encodable(name) and _encodable(v)) or "\x00" in v:
            raise ApiError(400, "invalid_text", {"query": "query values must be valid Unicode"})


def job_or_404(lab_id: str, job_id: str) -> dict:
    j = registry.read_job(get_redis(), lab_id, job_id) if len(job_id) <= 20 and valid_id(job_id) else None
    if j is None:
        raise ApiError(404, "unknown_job", f"no job {job_id[:24]!r} in this lab")
    return j


def parse(body: dict, spec: Body, **defaults) -> dict:
    """The body's clean values as `spec` declares them (app/bodies.py), or a 422 naming each bad field.

    `defaults` supplies what only the request knows (the lab's own job duration, the deployment's speed).
    """
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    clean, errors, first = spec.check(body, defaults)
    if errors:
        error, status = first or (spec.error, 422)
        raise ApiError(status, error, errors)
    return clean


def finish_reading_body(resp):
    """Read what is left of a request body the route refused without reading (a 403 before an upload):
    a server that answers and closes with the body unread resets the connection, and a client still
    sending sees a broken pipe instead of our clear error. Bodies over the upload cap are not read
    (the 413 already ends them)."""
    length = request.content_length
    if length and length <= (current_app.config.get("MAX_CONTENT_LENGTH") or 0):
        request.stream.exhaust()
    return resp
