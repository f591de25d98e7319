"""Who may do what to a lab, from where: tokens, the lab cookie and CSRF, WebSocket origin checks,
and the headers every response carries. Against the real stack."""

from __future__ import annotations

import re
import socket
import time
import urllib.parse

import pytest
import redis
import websocket

from core import media
from tests.integration.test_api import multipart

EVIL = "http://evil.example"


def test_tokens_are_long_random_distinct_and_stored_only_as_hashes(api, stack):
    labs = [api.lab("ch0", speed=20, workers=0) for _ in range(3)]
    tokens = [t for lab in labs for t in (lab["token"], lab["view_token"])]
    assert len(set(tokens)) == len(tokens)
    assert all(len(lab["token"]) >= 32 and len(lab["view_token"]) >= 21 for lab in labs)  # ≥ 192 / 128 bits
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    stored = r.hgetall(f"lab:{labs[0]['lab_id']}:meta")
    assert labs[0]["token"] not in stored.values() and labs[0]["view_token"] not in stored.values()
    assert re.fullmatch(r"[0-9a-f]{64}", stored["token"])


def test_only_the_labs_own_token_changes_it_the_view_token_only_reads(api):
    lab, other = api.lab("ch0", speed=20, workers=0), api.lab("ch0", speed=20, workers=0)
    base = f"/api/labs/{lab['lab_id']}"
    writes = [
        ("PATCH", "/settings", {"vt_seconds": 600}),
        ("POST", "/jobs", {"sample": "carphone_pristine"}),
        ("POST", "/clock", {"action": "pause"}),
        ("POST", "/faults", {"type": "slow"}),
        ("POST", "/dlq/replay", {}),
        ("POST", "/workers/w1/kill", {}),
        ("DELETE", "", None),
    ]
    for method, path, body in writes:
        for token, status in (
            (None, 401),
            (lab["view_token"], 403),
            (other["token"], 403),
            (other["view_token"], 403),
            (lab["token"][:-1], 403),
        ):
            res = api.call(method, base + path, body, token)
            assert res.status == status, (method, path, res.body)
            assert res.json()["error"] in ("missing_token", "forbidden")
    for path in ("", "/jobs", "/events", "/dlq", "/outbox"):
        assert api.call("GET", base + path, token=lab["view_token"]).status == 200
        assert api.call("GET", base + path, token=other["token"]).status == 403
    assert api.snapshot(lab)["counts"]["enqueued"] == 0 and api.snapshot(lab)["clock"]["paused"] is False


def cookie_headers(lab: dict, origin: str | None = None, referer: str | None = None) -> dict:
    h = {"Cookie": f"lab_{lab['lab_id']}={lab['token']}"}
    if origin:
        h["Origin"] = origin
    if referer:
        h["Referer"] = referer
    return h


def test_a_change_authorised_by_the_cookie_must_come_from_our_own_pages(api, stack):
    """CSRF: a foreign page can make the browser send the lab cookie, but not our Origin."""
    lab = api.lab("ch0", speed=20, workers=0)
    path = f"/api/labs/{lab['lab_id']}/settings"
    for hdrs in (
        cookie_headers(lab),
        cookie_headers(lab, origin=EVIL),
        cookie_headers(lab, origin="null"),
        cookie_headers(lab, referer=f"{EVIL}/page"),
    ):
        res = api.call("PATCH", path, {"vt_seconds": 600}, headers=hdrs)
        assert res.status == 403 and res.json()["error"] == "cross_site", hdrs
    # a classic CSRF form post: multipart, cookie only, from a foreign origin
    body, hdrs = multipart("file", "clip.mp4", media.sample_clip("carphone_pristine").read_bytes())
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers={**hdrs, **cookie_headers(lab, EVIL)})
    assert res.status == 403
    form = urllib.parse.urlencode({"sample": "carphone_pristine"}).encode()
    res = api.call(
        "POST",
        f"/api/labs/{lab['lab_id']}/jobs",
        raw=form,
        headers={"Content-Type": "application/x-www-form-urlencoded", **cookie_headers(lab, EVIL)},
    )
    assert res.status == 403
    assert api.snapshot(lab)["settings"]["vt_seconds"] != 600 and api.snapshot(lab)["counts"]["enqueued"] == 0
    # the same change from our own page, or with the token itself, goes through
    assert api.call("PATCH", path, {"vt_seconds": 600}, headers=cookie_headers(lab, origin=stack.url)).status == 200
    assert (
        api.call(
            "PATCH", path, {"vt_seconds": 700}, headers=cookie_headers(lab, referer=f"{stack.url}/chapters/1")
        ).status
        == 200
    )
    assert api.call("PATCH", path, {"vt_seconds": 800}, lab["token"], headers={"Origin": EVIL}).status == 200
    # reads by cookie are fine from anywhere: a foreign page cannot read the answer (no CORS)
    res = api.call("GET", f"/api/labs/{lab['lab_id']}", headers=cookie_headers(lab, EVIL))
    assert res.status == 200 and "Access-Control-Allow-Origin" not in res.headers


def test_a_refused_upload_still_reads_as_a_clear_403_while_the_client_is_still_sending(api, stack):
    """The server refuses before reading the body; it must still take the rest of it, or it closes on
    unread data, the kernel resets the connection and a client still sending sees a broken pipe."""
    lab = api.lab("ch0", speed=20, workers=0)
    clip = media.sample_clip("carphone_pristine").read_bytes()
    body, hdrs = multipart("file", "clip.mp4", clip * 3)  # 1.8 MB: under the test stack's 2 MiB upload cap
    head = "".join(f"{k}: {v}\r\n" for k, v in {**hdrs, **cookie_headers(lab, EVIL)}.items())
    host, port = urllib.parse.urlsplit(stack.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(
            f"POST /api/labs/{lab['lab_id']}/jobs HTTP/1.1\r\nHost: {host}:{port}\r\n{head}"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        step = 64 * 1024
        for i in range(0, len(body), step):
            s.sendall(body[i : i + step])
            time.sleep(0.05)  # a slow uplink: the server has long since decided by the last chunk
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert b'"cross_site"' in answer
    assert api.snapshot(lab)["counts"]["enqueued"] == 0


def ws_url(stack, lab: dict, token: str | None = None) -> str:
    q = f"?token={token}" if token else ""
    return stack.url.replace("http", "ws") + f"/ws/labs/{lab['lab_id']}{q}"


def refused(url: str, **kw) -> int:
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(url, timeout=10, **kw)
    return e.value.status_code


def test_websocket_origin_and_token_rules(api, stack):
    """Cross-site WebSocket hijacking: a foreign Origin is refused even with the cookie or a token; a
    client without Origin (not a browser) must present the token itself."""
    lab = api.lab("ch0", speed=20, workers=0)
    cookie = f"lab_{lab['lab_id']}={lab['token']}"
    assert refused(ws_url(stack, lab), origin=EVIL, cookie=cookie) == 403
    assert refused(ws_url(stack, lab, lab["token"]), origin=EVIL) == 403
    assert refused(ws_url(stack, lab, lab["token"]), origin="null") == 403
    assert refused(ws_url(stack, lab), suppress_origin=True, cookie=cookie) == 401
    assert refused(ws_url(stack, lab, "x" * 32), suppress_origin=True) == 403
    other = api.lab("ch0", speed=20, workers=0)
    assert refused(ws_url(stack, lab, other["token"]), origin=stack.url) == 403
    for kw in (
        {"origin": stack.url, "cookie": cookie},  # our page, riding its cookie
        {"suppress_origin": True, "header": [f"Authorization: Bearer {lab['token']}"]},
        {"suppress_origin": True, "url": ws_url(stack, lab, lab["view_token"])},
    ):
        ws = websocket.create_connection(kw.pop("url", ws_url(stack, lab)), timeout=10, **kw)
        assert ws.connected
        ws.close()


PAGES = [
    "/",
    "/chapters/1",
    "/chapters/4",
    "/api/meta",
    "/api/labs/nope",
    "/no/such/page",
    "/static/js/widget/index.js",
    "/healthz",
    "/api/openapi.json",
]


@pytest.mark.parametrize("path", PAGES)
def test_every_response_carries_the_security_headers(api, path):
    res = api.call("GET", path)
    csp = res.headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";") if d.strip())
    assert directives["script-src"] == "'self'" and "unsafe" not in directives["script-src"]
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert res.headers["X-Content-Type-Options"] == "nosniff"
    assert res.headers["Referrer-Policy"] == "same-origin"
    assert res.headers["X-Frame-Options"] == "DENY"


@pytest.mark.parametrize("path", ["/", "/chapters/1", "/chapters/2", "/chapters/4", "/chapters/5"])
def test_pages_have_no_inline_script_for_the_csp_to_block(api, path):
    html = api.call("GET", path).body.decode()
    for attrs, body in re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.S):
        assert "src=" in attrs and not body.strip(), attrs
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler attribute"
