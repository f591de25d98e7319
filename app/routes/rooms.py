"""Classroom rooms: an instructor's lab that a room of students watches live or copies to follow along.

A room is a short join code pointing at the instructor's lab. The code is the students' capability:
it resolves to the lab's *view token* (read-only live view) or makes each student a lab of their own
with the instructor's current preset and settings ("follow along"). The instructor holds a separate
instructor token for the room dashboard (viewer count, each student lab's headline counts).

People, not ids: every page in the room first takes a *seat* (`POST /api/rooms/{code}/members`), an id
the room signs with a key of its own, and its presence and its one guess per question are counted under
that seat; an id a client makes up is refused. A seat costs something: one address may take
`rate_room_seats` a window and be `room_viewers_per_client` of a room's viewers (core/config.py), and a
seat is signed for the address that took it, so it counts nowhere else (a page whose address changed is
told to take a new one). The room's caps on viewers,
guesses and follow-along labs are each checked and taken in one server-side step (a Lua script), so
concurrent check-ins cannot pass them together. Presence as the instructor's lab (which keeps the room and
the lab alive) needs the instructor token.

CSRF: every room call is authorised by a bearer token sent in a header (the instructor token, or
none at all for the code-gated calls), never by a cookie, so a cross-site form cannot ride on the
instructor's session; POSTs also refuse a browser Origin that is not this app's host.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import time
from io import BytesIO
from typing import Any
from urllib.parse import urlencode

import redis
import segno
from flask import Blueprint, abort, current_app, jsonify, redirect, render_template, request, url_for

import chapters
from app import bodies, limits, links
from app.auth import refuse_foreign_origin
from app.errors import ApiError
from app.http import json_body, parse, valid_id
from app.store import get_redis
from core import registry
from core.challenges import run as runs
from core.keys import key
from core.registry import _hash as token_hash

bp = Blueprint("rooms", __name__)

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
"""Join-code letters: no 0/O or 1/I, so a code read off a projector is typed right first time."""
CODE_LENGTH = 10
"""32^10 ≈ 1.1·10^15 codes: at RATE_ROOM_LOOKUPS (30 unknown codes a minute per client), a client guessing
for a whole year against 1,000 live rooms hits one with probability ≈ 1.4·10^-5."""
ROOM_TTL = 4 * 3600
"""Real seconds a room lives after the instructor last looked at it or presented: a class period and then some."""
PRESENCE_WINDOW = 30
"""A viewer counts as present if their page checked in within this many real seconds (it does every 10)."""
MAX_VIEWERS = 1000
MAX_STUDENTS = 100
ROOM_PARTS = ("", "viewers", "students", "seen", "round", "guesses")
MAX_GUESSES = MAX_VIEWERS + MAX_STUDENTS
SEAT_NONCE = 16
"""Hex digits of a seat's random part; the room's HMAC of it follows (SEAT_SIG digits)."""
SEAT_SIG = 16
_CODE = re.compile(rf"^[{ALPHABET}]{{{CODE_LENGTH}}}$")
_SEAT = re.compile(bodies.ROOM_CLIENT)
# A member joins a capped set in one step: checking the size and adding in two would let concurrent
# joins pass the cap together. They answer 1 (in: new, or already a member) or 0 (full); the viewers' one
# also keeps each address's own viewers (KEYS[2]) under its cap (ARGV[6], 0: none), else -1.
_JOIN_ZSET = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
  if tonumber(ARGV[6]) > 0 and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) then return -1 end
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return 1
"""
_JOIN_HASH = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""


def rkey(code: str, part: str = "") -> str:
    return f"room:{code}" + (f":{part}" if part else "")


def normalise(code: str) -> str:
    """Codes are shown as ABCDE-FGHJK; students type them in any case, with or without the dash."""
    return re.sub(r"[\s-]", "", code or "").upper()


def new_code(r: redis.Redis) -> str:
    while True:
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        if not r.exists(rkey(code)):
            return code


def pretty(code: str) -> str:
    half = len(code) // 2
    return f"{code[:half]}-{code[half:]}"


def load(r: redis.Redis, code: str) -> dict[str, str]:
    """The room, or a 404 for a code that is malformed, unknown or expired."""
    code = normalise(code)
    limits.check_room_lookup(r)
    room = r.hgetall(rkey(code)) if _CODE.match(code) else {}
    if not room:
        limits.room_miss(r)
        raise ApiError(404, "unknown_room", f"no room with the code {code[:16]!r}: check the code on the screen")
    room["code"] = code
    return room


def require_instructor(r: redis.Redis, code: str) -> dict[str, str]:
    room = load(r, code)
    require_instructor_token(room)
    return room


def join_present(r: redis.Redis, k: str, member: str, now: float, cap: int, who: str = "", per_client: int = 0) -> int:
    """`member` is present in the sorted set `k` at `now` (those older than PRESENCE_WINDOW drop out): 1. Unless
    it is new and `cap` others are (0), or `per_client` others from the same address `who` are (-1). One
    atomic step."""
    return int(r.eval(_JOIN_ZSET, 2, k, f"{k}:{who}", member, now, now - PRESENCE_WINDOW, cap, ROOM_TTL, per_client))


def join_capped(r: redis.Redis, k: str, field: str, value: str, cap: int) -> bool:
    """Set `field` of the hash `k` unless it is a new field and the hash already has `cap`: False then.
    One atomic step."""
    return bool(r.eval(_JOIN_HASH, 1, k, field, value, cap, ROOM_TTL))


def _seat_sig(room: dict[str, str], nonce: str) -> str:
    """The room's signature of a seat's nonce *for the address asking*: the same seat from another address
    does not verify."""
    msg = f"{nonce}|{limits.client()}".encode()
    return hmac.new(room["member_key"].encode(), msg, "sha256").hexdigest()[:SEAT_SIG]


def new_seat(r: redis.Redis, room: dict[str, str]) -> str:
    """A seat id for one page in the room: a random nonce and the room's signature of it for this client's
    address (nothing stored). Each costs one of the client's `rate_room_seats` for the window (429 past it)."""
    limits.check_rate(r, "seats")
    if not room.get("member_key"):  # a room opened before seats existed gets its key now, once
        r.hsetnx(rkey(room["code"]), "member_key", secrets.token_hex(16))
        room["member_key"] = r.hget(rkey(room["code"]), "member_key")
    nonce = secrets.token_hex(SEAT_NONCE // 2)
    return nonce + _seat_sig(room, nonce)


def require_seat(room: dict[str, str], seat: str) -> str:
    """The seat id if this room issued it to this address; 403 for an id a client made up (it would count a second
    person) or one taken from another address (the page takes a new seat)."""
    nonce, sig = seat[:SEAT_NONCE], seat[SEAT_NONCE:]
    if not (
        room.get("member_key")
        and len(seat) == SEAT_NONCE + SEAT_SIG
        and hmac.compare_digest(_seat_sig(room, nonce), sig)
    ):
        raise ApiError(
            403,
            "not_in_room",
            "this page has no seat in the room (an id the room did not issue, or "
            "issued to another address): reload the page to join",
        )
    return seat


def require_instructor_token(room: dict[str, str]) -> None:
    auth = request.headers.get("Authorization", "")
    if not auth.startswith("Bearer "):
        raise ApiError(
            401, "missing_token", "send Authorization: Bearer <instructor token>", {"WWW-Authenticate": "Bearer"}
        )
    if not hmac.compare_digest(room["instructor"], token_hash(auth[7:].strip())):
        raise ApiError(403, "forbidden", "this token is not this room's instructor token")


def join_url(code: str) -> str:
    return request.host_url.rstrip("/") + url_for("rooms.join_page", code=code)


def watch_path(room: dict[str, str]) -> str:
    """The chapter page opened read-only on the instructor's lab (the widget's viewer mode)."""
    return chapter_link(room, lab=room["lab_id"], view=room["view_token"])


def chapter_link(room: dict[str, str], **extra: str) -> str:
    """The room's chapter page for a lab of one's own: the room's code, and its scenario's banner."""
    query = {"room": room["code"], **({"scenario": room["scenario"]} if room.get("scenario") else {}), **extra}
    return f"{links.chapter_path(room['preset'])}?{urlencode(query)}"


def room_title(room: dict[str, str]) -> str:
    """The scenario's name if the room started from one, else the chapter preset's."""
    if room.get("scenario") in chapters.SCENARIOS:
        return f"Scenario: {chapters.SCENARIOS[room['scenario']]['title']}"
    return chapters.PRESETS[room["preset"]]["title"]


def headline(c: dict[str, int] | None) -> dict[str, int] | None:
    """The four numbers an instructor scans a room for: done, redelivered, dead-lettered, lost."""
    return c and {"done": c["done"], "redelivered": c["redelivered"], "dead": c["dlq"], "lost": c["lost"]}


def lab_cookie(resp, lab: str, token: str):
    """The same lab cookie POST /api/labs sets (it lets <video> fetch outputs); SameSite=Strict."""
    resp.set_cookie(
        f"lab_{lab}", token, httponly=True, samesite="Strict", max_age=current_app.config["LAB"].lab_idle_ttl
    )
    return resp


def _keep_alive(r: redis.Redis, code: str) -> None:
    with r.pipeline() as pipe:
        for part in ROOM_PARTS:
            pipe.expire(rkey(code, part), ROOM_TTL)
        pipe.execute()


def _new_lab(r: redis.Redis, preset: str, lab_settings: dict[str, Any]) -> dict[str, Any]:
    """A lab of `preset` carrying `lab_settings` (only what differs from the preset is changed)."""
    cfg = current_app.config["LAB"]
    [lab] = limits.open_labs(r, [registry.processes_of({**chapters.settings_for(preset), **lab_settings})])
    created = registry.create(r, preset, lab_settings.get("speed", cfg.speed), chapters.settings_for(preset), lab=lab)
    limits.opened(r, [lab])
    base = chapters.settings_for(preset)
    changes = {k: v for k, v in lab_settings.items() if k != "speed" and base.get(k) != v}
    if changes:
        created["settings"] = registry.update_settings(r, created["lab_id"], changes)
    created.update(ws_url=f"/ws/labs/{created['lab_id']}", preset=preset)
    return created


def _setup_from(body: dict, scenario: str | None) -> tuple[str, dict[str, Any]]:
    """(preset, settings) of a fresh room lab: the scenario's, else the chapter preset's; `speed` on top."""
    if scenario:
        preset, lab_settings = chapters.SCENARIOS[scenario]["preset"], links.settings_for(scenario)
    else:
        preset = body.get("preset", chapters.DEFAULT_PRESET)
        lab_settings = chapters.settings_for(preset)
    if "speed" in body:
        lab_settings["speed"] = body["speed"]
    return preset, lab_settings


def _adopt_lab(r: redis.Redis, body: dict) -> dict[str, Any]:
    """The caller's own lab, set up beforehand, becomes the room's: its owner token proves it is
    theirs, and its view token (which the server keeps only as a hash) is what students will get."""
    lab_id, view_token = body.get("lab_id"), body.get("view_token")
    if not isinstance(lab_id, str) or not valid_id(lab_id) or len(lab_id) > 32 or not registry.exists(r, lab_id):
        raise ApiError(404, "unknown_lab", f"no lab {str(lab_id)[:40]!r}")
    auth = request.headers.get("Authorization", "")
    token = auth[7:].strip() if auth.startswith("Bearer ") else ""
    if registry.check_token(r, lab_id, token) != "owner":
        raise ApiError(403, "forbidden", "send the lab's own token as Authorization: Bearer <token>")
    if view_token is None or registry.check_token(r, lab_id, view_token, allow_view=True) != "viewer":
        raise ApiError(422, "invalid_view_token", {"view_token": "must be this lab's view token"})
    preset = r.hget(key(lab_id, "meta"), "preset")
    if preset not in links.room_presets():
        raise ApiError(422, "invalid_preset", {"lab_id": f"a room runs a chapter's preset; this lab runs {preset}"})
    registry.touch(r, lab_id)
    return {
        "lab_id": lab_id,
        "token": token,
        "view_token": view_token,
        "ws_url": f"/ws/labs/{lab_id}",
        "preset": preset,
        "settings": registry.settings(r, lab_id),
    }


# --- API ----------------------------------------------------------------------------------------


@bp.get("/api/scenarios")
def list_scenarios():
    """Ready-made scenarios ("VT too short", "retry storm", "poison pill") with their shareable URLs."""
    return jsonify(scenarios=links.all_public())


@bp.post("/api/rooms")
def create_room():
    """Open a room: a fresh instructor lab (a chapter preset or a scenario) or the caller's own lab
    (`lab_id` + `view_token`, with that lab's token as Bearer), a join code and a QR code."""
    refuse_foreign_origin()
    body = parse(json_body(), bodies.ROOM)
    r = get_redis()
    scenario = body.get("scenario")
    if "lab_id" in body:
        limits.check_rate(r, "labs")  # a room on one's own lab costs no processes, but still counts as opened
        lab = _adopt_lab(r, body)
    else:
        lab = _new_lab(r, *_setup_from(body, scenario))
    preset = lab["preset"]
    if scenario and (needs := chapters.SCENARIOS[scenario]["preset"]) != preset:
        raise ApiError(422, "invalid_scenario", {"scenario": f"{scenario} runs on {needs}, this lab on {preset}"})
    code, token = new_code(r), secrets.token_urlsafe(24)
    r.hset(
        rkey(code),
        mapping={
            "lab_id": lab["lab_id"],
            "view_token": lab["view_token"],
            "preset": preset,
            "scenario": scenario or "",
            "instructor": token_hash(token),
            "created": time.time(),
            "member_key": secrets.token_hex(16),
        },
    )
    _keep_alive(r, code)
    resp = jsonify(
        code=code,
        display_code=pretty(code),
        instructor_token=token,
        lab=lab,
        join_url=join_url(code),
        room_url=url_for("rooms.room_page", code=code),
        qr_url=url_for("rooms.room_qr", code=code),
        chapter_url=links.chapter_path(preset),
    )
    resp.status_code = 201
    return lab_cookie(resp, lab["lab_id"], lab["token"])


@bp.get("/api/rooms/<code>")
def get_room(code: str):
    """Resolve a join code: the room's chapter and the instructor lab's id and view token (read-only)."""
    room = load(get_redis(), code)
    path = links.chapter_path(room["preset"])
    return jsonify(
        code=room["code"],
        display_code=pretty(room["code"]),
        preset=room["preset"],
        title=room_title(room),
        scenario=room["scenario"] or None,
        lab_id=room["lab_id"],
        view_token=room["view_token"],
        chapter_url=path,
        watch_url=watch_path(room),
    )


@bp.post("/api/rooms/<code>/follow")
def follow_room(code: str):
    """Follow along: a lab of your own with the instructor lab's preset and current settings."""
    refuse_foreign_origin()
    r = get_redis()
    room = load(r, code)
    name = parse(json_body(), bodies.FOLLOW)["name"]
    if r.hlen(rkey(room["code"], "students")) >= MAX_STUDENTS:  # full already: open no lab (join_capped decides)
        raise ApiError(
            429, "room_full", f"this room already has {MAX_STUDENTS} follow-along labs", {"Retry-After": "60"}
        )
    if not registry.exists(r, room["lab_id"]):
        raise ApiError(410, "room_lab_gone", "the instructor's lab has expired; ask for a new room")
    lab = _new_lab(r, room["preset"], registry.settings(r, room["lab_id"]))
    label = " ".join(name.split()) or f"student {r.hlen(rkey(room['code'], 'students')) + 1}"
    entry = json.dumps({"name": label, "joined": time.time(), "view_token": lab["view_token"]})
    if not join_capped(r, rkey(room["code"], "students"), lab["lab_id"], entry, MAX_STUDENTS):
        registry.teardown(r, lab["lab_id"], current_app.config["LAB"].var_dir)  # others filled it meanwhile
        raise ApiError(
            429, "room_full", f"this room already has {MAX_STUDENTS} follow-along labs", {"Retry-After": "60"}
        )
    r.zadd(rkey(room["code"], "seen"), {lab["lab_id"]: time.time()})
    _keep_alive(r, room["code"])
    resp = jsonify(dict(lab, name=label, chapter_url=chapter_link(room)))
    resp.status_code = 201
    return lab_cookie(resp, lab["lab_id"], lab["token"])


@bp.post("/api/rooms/<code>/members")
def join_room(code: str):
    """A seat in the room for this page: the id its presence and its guesses are counted under."""
    refuse_foreign_origin()
    r = get_redis()
    room = load(r, code)
    return jsonify(client=new_seat(r, room), code=room["code"], display_code=pretty(room["code"])), 201


@bp.post("/api/rooms/<code>/presence")
def room_presence(code: str):
    """A page in the room checks in (every 10 s): a viewer, a follow-along student or the instructor
    (the instructor's lab only with the instructor token)."""
    refuse_foreign_origin()
    r = get_redis()
    room = load(r, code)
    body = parse(json_body(), bodies.PRESENCE)
    client, lab_id = require_seat(room, body["client"]), body.get("lab_id")
    now, code = time.time(), room["code"]
    if lab_id == room["lab_id"]:
        # The projector showing the lab is use, not idleness: a lecture can run 30 minutes without a click.
        # Only the instructor may keep it (and the room) alive that way.
        require_instructor_token(room)
        role = "instructor"
        if registry.exists(r, lab_id):
            registry.touch(r, lab_id)
        _keep_alive(r, code)
    elif lab_id and r.hexists(rkey(code, "students"), lab_id):
        role = "student"
        r.zadd(rkey(code, "seen"), {lab_id: now})
    else:
        role = "viewer"
        per_client = current_app.config["LAB"].room_viewers_per_client
        joined = join_present(r, rkey(code, "viewers"), client, now, MAX_VIEWERS, limits.client(), per_client)
        if joined == 0:
            raise ApiError(429, "room_full", f"this room already has {MAX_VIEWERS} viewers", {"Retry-After": "30"})
        if joined < 0:
            raise ApiError(
                429,
                "room_client_full",
                f"this room already counts {per_client} viewers from your address",
                {"Retry-After": "30"},
            )
    return jsonify(role=role, every_s=10, display_code=pretty(code))


@bp.get("/api/rooms/<code>/status")
def room_status(code: str):
    """The instructor's view: live viewer count and each student lab's done/redelivered/dead/lost."""
    r = get_redis()
    room = require_instructor(r, code)
    code, now = room["code"], time.time()
    seen = dict(r.zrange(rkey(code, "seen"), 0, -1, withscores=True))
    path = links.chapter_path(room["preset"])
    joined = r.hgetall(rkey(code, "students"))
    counts = registry.counts_of(r, [room["lab_id"], *joined])  # one round trip however big the class
    passed = runs.passed_of(r, [room["lab_id"], *joined])  # the checker's passes, as each lab's runs kept them
    students = []
    for lab_id, raw in joined.items():
        info, alive = json.loads(raw), counts[lab_id] is not None
        students.append(
            {
                "lab_id": lab_id,
                "name": info["name"],
                "joined": info["joined"],
                "alive": alive,
                "live": alive and now - seen.get(lab_id, 0) <= PRESENCE_WINDOW,
                "counts": headline(counts[lab_id]),
                "passed": passed[lab_id],
                # the instructor may put a student's run on the projector, read-only
                "watch_url": f"{path}?{urlencode({'lab': lab_id, 'view': info['view_token']})}",
            }
        )
    students.sort(key=lambda s: s["joined"])
    _keep_alive(r, code)
    return jsonify(
        code=code,
        display_code=pretty(code),
        preset=room["preset"],
        lab_id=room["lab_id"],
        lab_alive=counts[room["lab_id"]] is not None,
        counts=headline(counts[room["lab_id"]]),
        passed=passed[room["lab_id"]],
        viewers=r.zcount(rkey(code, "viewers"), now - PRESENCE_WINDOW, "+inf"),
        students=students,
        expires_in=ROOM_TTL,
        join_url=join_url(code),
        round=_round(r, room, True),
        predictions=list(predictions_for(room["preset"]).values()),
        races=links.races_for(room["preset"]),
        race_url=f"/race/{room['race']}" if room.get("race") else None,
    )


# --- prediction rounds (issue 22) ---------------------------------------------------------------
# The instructor asks the class one of the chapter's predictions; every page in the room shows it and
# sends one guess per client (changeable until the answer is in); the instructor's lab posts what it
# measured. The dashboard shows the spread of guesses beside the measurement, live.


def predictions_for(preset: str) -> dict[str, dict[str, Any]]:
    """The chapter's predictions (the scenario buttons' `predict`), by id, each with its scenario's label:
    two scenarios may ask the same question ("How many attempts…?") of different set-ups."""
    return {
        b["predict"]["id"]: dict(b["predict"], scenario=b["label"])
        for b in chapters.BUTTONS.get(preset, [])
        if b.get("predict")
    }


def _clean_guess(spec: dict[str, Any], value: Any) -> Any:
    if spec["kind"] == "choice":
        if isinstance(value, str) and value in {v for v, _ in spec["choices"]}:
            return value
        raise ApiError(422, "invalid_guess", {"value": f"must be one of {', '.join(v for v, _ in spec['choices'])}"})
    lo, hi = spec.get("min", 0), spec.get("max", 10**6)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ApiError(
            422,
            "invalid_guess",
            {"value": f"must be a whole number from {spec.get('min', 0)} to {spec.get('max', 10**6)}"},
        )
    return value


def _round(r: redis.Redis, room: dict[str, str], with_spread: bool = False) -> dict[str, Any] | None:
    raw = r.hgetall(rkey(room["code"], "round"))
    spec = predictions_for(room["preset"]).get(raw.get("prediction", ""))
    if not spec:
        return None
    out: dict[str, Any] = {
        "n": int(raw["n"]),
        "prediction": spec,
        "opened": float(raw["opened"]),
        "measured": json.loads(raw["measured"]) if raw.get("measured") else None,
        "why": raw.get("why") or None,
        "count": r.hlen(rkey(room["code"], "guesses")),
    }
    if with_spread:
        spread: dict[str, int] = {}
        for v in r.hvals(rkey(room["code"], "guesses")):
            spread[v] = spread.get(v, 0) + 1
        out["spread"] = spread
    return out


@bp.post("/api/rooms/<code>/round")
def open_round(code: str):
    """The instructor asks the class a prediction (a new round: earlier guesses are cleared)."""
    refuse_foreign_origin()
    r = get_redis()
    room = require_instructor(r, code)
    pid = parse(json_body(), bodies.ROUND)["prediction"]
    if pid not in predictions_for(room["preset"]):
        raise ApiError(
            422,
            "invalid_prediction",
            {"prediction": f"must be one of {', '.join(predictions_for(room['preset'])) or '(none)'}"},
        )
    n = int(r.hget(rkey(room["code"], "round"), "n") or 0) + 1
    with r.pipeline(transaction=True) as pipe:
        pipe.delete(rkey(room["code"], "round"), rkey(room["code"], "guesses"))
        pipe.hset(rkey(room["code"], "round"), mapping={"n": n, "prediction": pid, "opened": time.time()})
        pipe.execute()
    _keep_alive(r, room["code"])
    return jsonify(round=_round(r, room, True)), 201


@bp.get("/api/rooms/<code>/round")
def get_round(code: str):
    """The open question (anyone with the code), and this client's guess if it sent one (`?client=`)."""
    r = get_redis()
    room = load(r, code)
    client = request.args.get("client", "")
    mine = r.hget(rkey(room["code"], "guesses"), client) if _SEAT.match(client) else None
    race = room.get("race")
    return jsonify(
        round=_round(r, room),
        your_guess=json.loads(mine) if mine else None,
        race_url=f"/race/{race}" if race and r.exists(f"race:{race}") else None,
    )


@bp.post("/api/rooms/<code>/round/guesses")
def round_guess(code: str):
    """One guess per seat for the open round; it may change until the answer is in (then 409)."""
    refuse_foreign_origin()
    r = get_redis()
    room = load(r, code)
    body = parse(json_body(), bodies.GUESS)
    client = require_seat(room, body["client"])
    rnd = _round(r, room)
    if rnd is None or body["n"] != rnd["n"]:
        raise ApiError(409, "no_round", "that question is no longer open; reload the page to see the current one")
    if rnd["measured"] is not None:
        raise ApiError(409, "round_closed", "the answer is already in: guesses are closed for this question")
    value = _clean_guess(rnd["prediction"], body["value"])
    if not join_capped(r, rkey(room["code"], "guesses"), client, json.dumps(value), MAX_GUESSES):
        raise ApiError(429, "room_full", f"this question already has {MAX_GUESSES} guesses", {"Retry-After": "30"})
    return jsonify(ok=True, n=rnd["n"], value=value)


@bp.post("/api/rooms/<code>/round/result")
def round_result(code: str):
    """The instructor's lab measured the answer: it closes the round and goes to every screen."""
    refuse_foreign_origin()
    r = get_redis()
    room = require_instructor(r, code)
    body = parse(json_body(), bodies.ROUND_RESULT)
    rnd = _round(r, room)
    if rnd is None or body["n"] != rnd["n"]:
        raise ApiError(409, "no_round", "no such open question")
    spec = rnd["prediction"]
    measured, why = body["measured"], body["why"]
    if spec["kind"] == "choice":
        measured = _clean_guess(spec, measured)
    elif isinstance(measured, bool) or not isinstance(measured, int) or not -(10**6) <= measured <= 10**6:
        raise ApiError(422, "invalid_result", {"measured": "must be a whole number"})
    r.hset(rkey(room["code"], "round"), mapping={"measured": json.dumps(measured), "why": why})
    return jsonify(round=_round(r, room, True))


@bp.post("/api/rooms/<code>/race")
def room_race(code: str):
    """The instructor points the room at a race (app/routes/races.py): every page in the room links to it."""
    refuse_foreign_origin()
    r = get_redis()
    room = require_instructor(r, code)
    rid = parse(json_body(), bodies.ROOM_RACE)["race_id"]
    if not r.exists(f"race:{rid}"):
        raise ApiError(422, "invalid_race", {"race_id": "must be a race that is still running"})
    r.hset(rkey(room["code"]), "race", rid)
    return jsonify(race_url=f"/race/{rid}")


@bp.get("/api/rooms/<code>/qr.svg")
def room_qr(code: str):
    """The join URL as a QR code (SVG, drawn on the server: no third-party service sees the code)."""
    room = load(get_redis(), code)
    out = BytesIO()
    segno.make(join_url(room["code"]), error="m").save(
        out,
        kind="svg",
        scale=10,
        border=4,
        dark="#000",
        light="#fff",
        xmldecl=False,
        title=f"Join room {pretty(room['code'])}",
    )
    return out.getvalue(), 200, {"Content-Type": "image/svg+xml", "Cache-Control": "private, max-age=3600"}


@bp.delete("/api/rooms/<code>")
def close_room(code: str):
    """Close the room: the code stops working. Labs are left to their idle expiry (students keep theirs)."""
    refuse_foreign_origin()
    r = get_redis()
    room = require_instructor(r, code)
    r.delete(*(rkey(room["code"], part) for part in ROOM_PARTS))
    return "", 204


# --- pages --------------------------------------------------------------------------------------


@bp.app_template_global("classroom_scenarios")
def classroom_scenarios() -> list[dict[str, Any]]:
    """The scenario table for any page (the index lists it too)."""
    return links.all_public()


def _page(template: str, status: int = 200, **ctx):
    return render_template(template, chapters=chapters.all_chapters(), **ctx), status


@bp.get("/rooms")
def rooms_page():
    """Start a room (instructor) or join one by code (student)."""
    return _page(
        "rooms.html",
        room_ttl_hours=ROOM_TTL // 3600,
        presets=[(p, chapters.PRESETS[p]["title"]) for p in links.room_presets()],
        room_preset=chapters.ROOM_PRESET,
    )


@bp.get("/rooms/<code>")
def room_page(code: str):
    """The instructor's room dashboard: code, QR, viewers and every follow-along lab."""
    try:
        room = load(get_redis(), code)
    except ApiError as e:
        return _page("room_join.html", 404, room=None, error=e.detail, code=normalise(code)[:16])
    return _page(
        "room.html",
        room=room,
        display_code=pretty(room["code"]),
        join_url=join_url(room["code"]),
        lab_url=chapter_link(room),
        present_url=chapter_link(room, present="1"),
        title=room_title(room),
    )


@bp.get("/join")
def join_form():
    """`/join?code=ABCDE-FGHJK`, the join form's target, goes to that room's join page."""
    code = normalise(request.args.get("code", ""))
    if code:
        return redirect(url_for("rooms.join_page", code=code[:16]))
    return _page("room_join.html", room=None, error=None, code="")


@bp.get("/join/<code>")
def join_page(code: str):
    """What a student's QR scan opens: watch the instructor's lab, or follow along in your own."""
    try:
        room = load(get_redis(), code)
    except ApiError as e:
        return _page("room_join.html", 404, room=None, error=e.detail, code=normalise(code)[:16])
    path = links.chapter_path(room["preset"])
    return _page(
        "room_join.html",
        room=room,
        error=None,
        code=room["code"],
        display_code=pretty(room["code"]),
        title=room_title(room),
        chapter_url=path,
        watch_url=watch_path(room),
    )


@bp.get("/s/<scenario_id>")
def scenario_link(scenario_id: str):
    """Short scenario link: `/s/vt-too-short` → the chapter page with every setting in the query string."""
    if scenario_id not in chapters.SCENARIOS:
        abort(404)
    return redirect(links.url_for(scenario_id))
