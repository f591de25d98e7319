"""Fuzz the whole HTTP API from its own OpenAPI document (schemathesis), against the real stack.

Every operation in the document gets generated requests, valid and invalid; each answer must be no
5xx, a status the document lists, a documented content type and a body matching the documented
schema. Path parameters name a real lab (with its token), so the fuzzing gets past the 404 at the door
and reaches validation; the seed is fixed, so a failure replays.
"""

from __future__ import annotations

import json
import socket
import urllib.parse

import pytest
import redis
import schemathesis
import websocket
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import create_app
from app.openapi import document
from core.config import Config
from core.keys import LABS, key
from core.settings import DEFAULTS
from tests.conftest import Api

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzz_lab(stack):
    """A lab with no workers: fuzzed jobs queue without spending CPU on transcodes."""
    client = Api(stack.url)
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    before = r.smembers(LABS)
    lab = client.lab("ch0", speed=20, workers=0)
    yield lab
    for made in client.created:
        client.call("DELETE", f"/api/labs/{made['lab_id']}", token=made["token"])
    left = {made: r.hget(key(made, "meta"), "preset") for made in r.smembers(LABS) - before}
    assert not left, f"the fuzzer left labs open (each holds workers a later module's lab needs): {left}"


# The document as the app builds it (the same code serves /api/openapi.json; checked below). Loaded
# at import, because schemathesis' lazy fixture loader does not run under this pytest.
DOC = document(create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0")))
# Chapter 0's inline transcode holds its request for the job's simulated duration by design (up to a real
# cap of minutes at a slow clock): its bad inputs are fuzzed below with the other JSON endpoints, and its
# timing is the lesson suite's (tests/lesson/test_ch0.py).
schema = schemathesis.openapi.from_dict(DOC).exclude(path_regex=r".*/inline$")


def test_the_served_document_is_the_one_fuzzed(api):
    assert api.call("GET", "/api/openapi.json").json() == DOC


def cheap(body):
    """Keep what a fuzzer may ask of the machine small: valid worker counts become 0, speeds ≤ 20,
    clips the smallest one (invalid values pass through untouched: validation is what is fuzzed)."""
    if isinstance(body, dict):
        if body.get("sample") in ("bigbuckbunny", "bikes"):
            body["sample"] = "carphone_pristine"
        if isinstance(body.get("workers"), int) and not isinstance(body["workers"], bool) and body["workers"] > 0:
            body["workers"] = 0
        if isinstance(body.get("speed"), int | float) and not isinstance(body["speed"], bool) and body["speed"] > 20:
            body["speed"] = 20
    return body


def drop_labs(api: Api, method: str, status: int, body, keep: dict) -> None:
    """Delete the labs a request opened as fast as the fuzzer makes them (a lab, a branch, a race's lanes, a
    room's lab, a student's seat): left alive, each holds workers, the pool's host fills, and a later module's
    lab gets none. `keep`: the module's own lab."""
    if method == "POST" and status in (200, 201):  # 200: a branch asked for again
        for made in labs_in(body()):
            if made["lab_id"] != keep["lab_id"]:
                api.call("DELETE", f"/api/labs/{made['lab_id']}", token=made["token"])


def labs_in(body) -> list[dict]:
    """Every lab (a dict with its id and owner token) anywhere in a response body."""
    if isinstance(body, list):
        return [lab for item in body for lab in labs_in(item)]
    if not isinstance(body, dict):
        return []
    found = [body] if isinstance(body.get("lab_id"), str) and isinstance(body.get("token"), str) else []
    return found + [lab for value in body.values() for lab in labs_in(value)]


@schema.parametrize()
@settings(max_examples=20, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_the_api_holds_to_its_document_under_generated_requests(case, fuzz_lab, stack):
    if "lab_id" in (case.path_parameters or {}) and case.method != "DELETE":
        case.path_parameters["lab_id"] = fuzz_lab["lab_id"]
    if "lab" in (case.path_parameters or {}):
        case.path_parameters["lab"] = fuzz_lab["lab_id"]
    case.body = cheap(case.body)
    response = case.call(base_url=stack.url, headers={"Authorization": f"Bearer {fuzz_lab['token']}"}, timeout=60)
    drop_labs(Api(stack.url), case.method, response.status_code, response.json, fuzz_lab)
    checks = CHECKS
    if (
        case.path.endswith("/inline")
        and response.status_code == 504
        and response.json().get("error") == "gateway_timeout"
    ):
        # chapter 0's lesson, documented: the gateway gives up on a request held past `gateway_timeout`
        checks = [c for c in CHECKS if c is not not_a_server_error]
    case.validate_response(response, checks=checks)


# --- hostile classes over every JSON endpoint (issue 23): nested JSON, huge integers, lone surrogates ----


def json_operations() -> list[tuple[str, str]]:
    """(METHOD, path template) of every operation whose request body is JSON, from the document itself."""
    ops = []
    for path, item in DOC["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "application/json" in (op.get("requestBody") or {}).get("content", {}):
                ops.append((method.upper(), path))
    return sorted(ops)


JSON_OPS = json_operations()
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.integers(min_value=10**300, max_value=10**400),
    st.just("\ud800"),
    st.just("x\udfffy"),
)
hostile_json = st.recursive(
    json_leaf,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=6), kids, max_size=3)),
    max_leaves=12,
)


def fill(path: str, lab: dict) -> str:
    return (
        path.replace("{lab_id}", lab["lab_id"])
        .replace("{lab}", lab["lab_id"])
        .replace("{job_id}", "1")
        .replace("{worker_id}", "w1")
        .replace("{code}", "ABCDEFGHJK")
        .replace("{name}", "240p.mp4")
        .replace("{replica}", "r1")
    )


def deep(n: int) -> bytes:
    return b'{"a":' * n + b"1" + b"}" * n


FIXED_BODIES = {
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "nested objects 5,000 deep": deep(5000),
    "400-digit integer": b'{"count": ' + b"9" * 400 + b', "workers": -' + b"7" * 400 + b"}",
    "5,000-digit integer": b'{"speed": ' + b"1" * 5000 + b"}",
    "lone surrogate value": b'{"preset": "\\ud800", "lab_id": "\\ud800", "reason": "\\udfff"}',
    "lone surrogate key": b'{"\\ud800": 1}',
    "NaN and Infinity": b'{"speed": NaN, "rate": Infinity, "seconds": -Infinity}',
    "not UTF-8": b'{"preset": "\xff\xfe"}',
    "float overflow": b'{"speed": 1e999, "rate": -1e999}',
}


@pytest.mark.parametrize(("method", "path"), JSON_OPS, ids=[f"{m} {p}" for m, p in JSON_OPS])
def test_no_json_endpoint_answers_500_to_hostile_bodies(method, path, fuzz_lab, stack):
    api = Api(stack.url)
    url = fill(path, fuzz_lab)
    if path.endswith("/inline"):  # held for simulated time: a running fast clock and the default gateway keep it short
        api.call(
            "PATCH",
            f"/api/labs/{fuzz_lab['lab_id']}/settings",
            {"speed": 1000, "gateway_timeout": DEFAULTS["gateway_timeout"]},
            fuzz_lab["token"],
        )
        api.call("POST", f"/api/labs/{fuzz_lab['lab_id']}/clock", {"action": "resume"}, fuzz_lab["token"])
    for label, raw in FIXED_BODIES.items():
        res = api.call(method, url, raw=raw, token=fuzz_lab["token"], headers={"Content-Type": "application/json"})
        assert res.status < 500 or gateway_gave_up(path, res), (
            f"{method} {url} with {label} → {res.status} {res.body[:200]!r}"
        )
        drop_labs(api, method, res.status, res.json, fuzz_lab)

    @given(hostile_json)
    @settings(max_examples=15, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def generated(body):
        raw = json.dumps(body).encode()  # ensure_ascii: a lone surrogate travels as \ud800, as a browser sends it
        res = api.call(method, url, raw=raw, token=fuzz_lab["token"], headers={"Content-Type": "application/json"})
        assert res.status < 500 or gateway_gave_up(path, res), (
            f"{method} {url} with {raw[:200]!r} → {res.status} {res.body[:200]!r}"
        )
        drop_labs(api, method, res.status, res.json, fuzz_lab)

    if not path.endswith("/inline"):  # most generated bodies are valid there and each holds a real transcode:
        generated()  # its bad inputs are the fixed ones above, its timing the lesson suite's


def gateway_gave_up(path: str, res) -> bool:
    """Chapter 0's inline transcode held past the lab's gateway timeout: a documented 504, the lesson itself.
    (Hostile keys are ignored, so a body of them is a valid inline request.)"""
    return path.endswith("/inline") and res.status == 504 and res.json().get("error") == "gateway_timeout"


HOSTILE_IDS = ["%ED%A0%80", "%F0%28%8C%28", "%00", "a" * 300, "..%2F..", "%FF"]
HOSTILE_AFTER = [
    "5-",
    "-5",
    "5--1",
    "18446744073709551616",
    "18446744073709551615-18446744073709551616",
    "18446744073709551615-18446744073709551615",
    "18446744073709551616-0",
    "99999999999999999999-1",
    "1" * 400,
    "%C2%B2",
    "%ED%A0%80",
    "0x10",
    "1.5",
    "%205",
]
"""Stream ids a stranger may send: past 2^64 in either part, the largest id itself (nothing can follow it),
malformed, not ASCII digits."""


def test_ids_and_stream_ids_from_strangers_never_answer_500(fuzz_lab, stack):
    api = Api(stack.url)
    lab, token = fuzz_lab["lab_id"], fuzz_lab["token"]
    paths = [
        "/api/labs/{}",
        f"/api/labs/{lab}/jobs/{{}}",
        f"/api/labs/{lab}/jobs/{{}}/status",
        "/api/rooms/{}",
        f"/api/labs/{lab}/jobs/1/outputs/{{}}",
        "/join/{}",
        "/rooms/{}",
    ]
    for template in paths:
        for bad in HOSTILE_IDS:
            for tok in (token, None):
                res = api.call("GET", template.format(bad), token=tok)
                assert res.status < 500, f"GET {template.format(bad)} → {res.status} {res.body[:200]!r}"
    for after in HOSTILE_AFTER:
        res = api.call("GET", f"/api/labs/{lab}/events?after={after}", token=token)
        assert res.status in (400, 422), f"after={after!r} → {res.status} {res.body[:200]!r}"
    assert api.call("GET", f"/api/labs/{lab}/events?after=18446744073709551615-0", token=token).status == 200
    assert api.call("GET", f"/api/labs/{lab}/events?after=5", token=token).status == 200


def ws_handshake_status(stack, path: str, extra: bytes = b"", body: bytes = b"") -> tuple[int, bytes]:
    """A WebSocket upgrade sent by hand (a client library would refuse to send these): the status and body."""
    return raw_http(
        stack,
        b"GET " + path.encode() + b" HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + extra,
        body,
    )


def raw_http(stack, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send a request whose framing no HTTP client would produce; read the first response to the end.
    The write side is shut after the body, so a body cut short reaches the server as end of stream."""
    host, port = urllib.parse.urlsplit(stack.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head + f"Host: {host}:{port}\r\n\r\n".encode() + body)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head_part, _, rest = answer.partition(b"\r\n\r\n")
    assert head_part.startswith(b"HTTP/1.1 "), answer[:300]
    length = next(
        int(v)
        for k, _, v in (h.partition(b":") for h in head_part.split(b"\r\n")[1:])
        if k.strip().lower() == b"content-length"
    )
    assert len(rest) == length, f"more than one answer on one connection: {answer[:600]!r}"
    return int(head_part.split()[1]), rest


def test_stream_ids_past_2_64_on_the_websocket_are_a_4xx_before_the_upgrade(fuzz_lab, stack):
    lab, token = fuzz_lab["lab_id"], fuzz_lab["token"]
    for after in HOSTILE_AFTER:
        status, body = ws_handshake_status(stack, f"/ws/labs/{lab}?after={after}&token={token}")
        assert status in (400, 422), f"WS after={after!r} → {status} {body[:200]!r}"
        assert json.loads(body)["error"] in ("invalid_after", "invalid_text"), body[:200]
    ws = websocket.create_connection(
        stack.ws_base + f"/ws/labs/{lab}?after=18446744073709551615-0&token={token}", timeout=10, suppress_origin=True
    )
    assert ws.connected  # the largest id with a sequence below 2^64-1 is still an id to read after
    ws.close()


CHUNKED = b"POST /api/labs HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
MALFORMED_CHUNKED = {
    "chunk size zz": b"zz\r\n{}\r\n0\r\n\r\n",
    "chunk size 0x2": b"0x2\r\n{}\r\n0\r\n\r\n",
    "negative chunk size": b"-2\r\n{}\r\n0\r\n\r\n",
    "empty chunk size": b"\r\n{}\r\n0\r\n\r\n",
    "chunk longer than its size": b"2\r\n{}}}\r\n0\r\n\r\n",
    "bare CR in an extension": b"2;a=\rb\r\n{}\r\n0\r\n\r\n",
    "cut short mid-chunk": b'10\r\n{"pre',
    "cut short before the last chunk": b"2\r\n{}\r\n",
}


@pytest.mark.parametrize("label", MALFORMED_CHUNKED)
def test_a_malformed_chunked_body_is_a_clear_4xx(label, stack):
    status, body = raw_http(stack, CHUNKED, MALFORMED_CHUNKED[label])
    assert 400 <= status < 500, f"{label} → {status} {body[:200]!r}"
    # a body cut short is werkzeug's ClientDisconnected, a plain 400; broken framing is gunicorn's, named
    assert json.loads(body)["error"] in ("invalid_framing", "bad_request"), body[:200]


def test_a_websocket_upgrade_carrying_a_chunked_body_is_refused(fuzz_lab, stack):
    """An upgrade is a GET with no body: bytes after its head would be read as WebSocket frames."""
    lab, token = fuzz_lab["lab_id"], fuzz_lab["token"]
    for body in (MALFORMED_CHUNKED["chunk size zz"], b"2\r\n{}\r\n0\r\n\r\n"):
        status, answer = ws_handshake_status(
            stack, f"/ws/labs/{lab}?token={token}", b"Transfer-Encoding: chunked\r\n", body
        )
        assert status == 400 and json.loads(answer)["error"] in ("invalid_framing", "body_not_allowed"), answer[:200]
