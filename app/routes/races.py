"""Races: one input through two to four real labs that differ in one setting, side by side.

The interactive queueing essays feed one stream of requests into FIFO, LIFO and priority queues at
once; here a race opens N labs of one chapter preset whose settings differ only where the race says,
holds their clocks at t = 0 until every lab's workers are up, then gives each lab the same jobs and
the same fault at the same simulated instant and starts all the clocks together. The lanes' clocks are
linked (clock.link): real work holding one lane's clock holds them all, so every readout on the page is
of the same simulated instant. Jitter draws come
from the labs' shared `jitter_seed`, so what differs between the runs is the setting, not the luck.

A race is a link: `/race/<id>`. The id (96 random bits) is the capability to watch it (the labs'
view tokens are on that page); starting it needs the race token, which only its creator holds
(localStorage, like a room's instructor token). A race's labs count one by one in every budget: RATE_LABS,
MAX_LABS, MAX_CLIENT_LABS, MAX_CLIENT_LIVE_LABS, and every process against MAX_WORKERS.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import time
from typing import Any

import redis
from flask import Blueprint, abort, current_app, jsonify, render_template, request

import chapters
from app import limits, links
from app.auth import refuse_foreign_origin
from app.bodies import Body, Field
from app.errors import ApiError
from app.http import json_body, parse
from app.links import race_public
from app.store import get_redis, get_rq
from chapters import RACES
from core import clock, media, registry, settings, stream
from core.broker import producer
from core.keys import key, queue_name
from core.registry import _hash as token_hash

bp = Blueprint("races", __name__)

SIDES = "abcd"
RACE_TTL_SLACK = 60
_RID = re.compile(r"^[A-Za-z0-9_-]{16}$")


def rkey(rid: str) -> str:
    return f"race:{rid}"


def _load(r: redis.Redis, rid: str) -> dict[str, Any]:
    raw = r.hgetall(rkey(rid)) if _RID.match(rid or "") else {}
    if not raw:
        raise ApiError(404, "unknown_race", "no such race (it may have expired)")
    return {
        "id": rid,
        "race": raw["race"],
        "labs": json.loads(raw["labs"]),
        "owner": raw["owner"],
        "started": float(raw.get("started") or 0),
        "room": raw.get("room") or None,
    }


def _lab_settings(race_id: str, variant: dict) -> dict[str, Any]:
    rc = RACES[race_id]
    clean, errors = settings.validate({**rc["base"], **variant["settings"]})
    if errors:
        raise ValueError(f"race {race_id}: {errors}")
    return {**chapters.settings_for(rc["preset"]), **clean}


def _ready(r: redis.Redis, labs: list[dict]) -> bool:
    """Every lab alive with all its workers up (idle, and listening on the lab's RQ queue), so no lab's
    clock runs while its pool boots and a delivery at t = 0 is received at once."""
    for lab in labs:
        if not registry.exists(r, lab["lab_id"]):
            return False
        want = int(registry.settings(r, lab["lab_id"]).get("workers", 0))
        idle = [w for w in registry.workers(r, lab["lab_id"]) if w.get("state") == "idle" and w.get("pid")]
        if len(idle) < want or r.scard(f"rq:workers:{queue_name(lab['lab_id'])}") < want:
            return False
    return True


def open_race(r: redis.Redis, race_id: str, speed: float, room: str | None = None) -> dict[str, Any]:
    """Open the race's labs, each paused at t = 0, and record the race."""
    cfg = current_app.config["LAB"]
    rc = RACES[race_id]
    per_lab = [_lab_settings(race_id, v) for v in rc["variants"]]
    ids = limits.open_labs(r, [registry.processes_of(s) for s in per_lab])  # a race of 4 is 4 labs in every cap
    labs = []
    for side, variant, lab_settings, lab in zip(SIDES, rc["variants"], per_lab, ids, strict=False):
        created = registry.create(r, rc["preset"], speed, settings=lab_settings, meta={"race": race_id}, lab=lab)
        # held at exactly t = 0 until the start: every lab's inputs land at the same simulated instant
        r.hset(key(created["lab_id"], "clock"), mapping={"base_sim": 0, "base_real": time.time(), "paused": 1})
        labs.append(
            {
                "side": side,
                "label": variant["label"],
                "lab_id": created["lab_id"],
                "token": created["token"],
                "view_token": created["view_token"],
                "settings": {n: created["settings"].get(n) for n in rc["vary"]},
            }
        )
    limits.opened(r, ids)
    clock.link(r, [lab["lab_id"] for lab in labs])  # one timeline: the lanes' clocks move in lockstep
    rid, token = secrets.token_urlsafe(12), secrets.token_urlsafe(24)
    stored = [{k: lab[k] for k in ("side", "label", "lab_id", "view_token", "settings")} for lab in labs]
    r.hset(
        rkey(rid),
        mapping={
            "race": race_id,
            "labs": json.dumps(stored),
            "owner": token_hash(token),
            "created": time.time(),
            "started": 0,
            "room": room or "",
        },
    )
    r.expire(rkey(rid), cfg.lab_idle_ttl + RACE_TTL_SLACK)
    return {"race_id": rid, "token": token, "url": f"/race/{rid}", "race": race_public(race_id), "labs": labs}


def _enqueue_same(r: redis.Redis, lab_id: str, rc: dict[str, Any], now: float) -> list[str]:
    """The race's input for one lab: its fault and its jobs, at simulated time `now` (the clock is held)."""
    if rc.get("fault"):
        fault = rc["fault"]
        r.hset(
            key(lab_id, "faults"),
            mapping={f"{fault['type']}_until": now + fault["duration_s"], f"{fault['type']}_from": now},
        )
        stream.emit(r, lab_id, "fault.started", now, fault=fault["type"], duration=fault["duration_s"])
    ids = []
    job = rc.get("enqueue")
    for _ in range(rc.get("count", 1) if job else 0):
        clip = media.sample_clip(job["sample"])
        payload = producer.enqueue_job(
            r,
            get_rq(),
            lab_id,
            job_type=job["job_type"],
            video_id=job["sample"],
            source=str(clip),
            duration_s=job["duration_s"],
            resolutions=["240p", "144p"],
            idempotency_key=None,
            poison="",
        )
        ids.append(payload["job_id"])
    return ids


def start_race(r: redis.Redis, race: dict[str, Any]) -> dict[str, Any]:
    if race["started"]:
        raise ApiError(409, "already_started", "this race has already started; start a new one to run it again")
    if not _ready(r, race["labs"]):
        raise ApiError(
            409, "not_ready", "the labs' workers are still starting; try again in a second", {"Retry-After": "1"}
        )
    rc = RACES[race["race"]]
    for lab in race["labs"]:
        _enqueue_same(r, lab["lab_id"], rc, clock.now(r, lab["lab_id"]))
    started = clock.resume(r, race["labs"][0]["lab_id"])  # the lanes are linked: one resume starts them all
    for lab in race["labs"]:
        stream.emit(r, lab["lab_id"], "clock.resumed", started)
    r.hset(rkey(race["id"]), "started", time.time())
    return status(r, race["id"])


def status(r: redis.Redis, rid: str) -> dict[str, Any]:
    race = _load(r, rid)
    ids = [lab["lab_id"] for lab in race["labs"]]
    counts = registry.counts_of(r, ids)
    clocks = clock.read_many(r, ids)  # every lane's clock at the same real instant
    labs = []
    for lab, lane_clock in zip(race["labs"], clocks, strict=True):
        c = counts[lab["lab_id"]]
        labs.append({**lab, "alive": c is not None, "counts": c, "clock": lane_clock if c is not None else None})
    return {
        "id": rid,
        "race": race_public(race["race"]),
        "watch": RACES[race["race"]]["watch"],
        "started": bool(race["started"]),
        "ready": bool(race["started"]) or _ready(r, race["labs"]),
        "labs": labs,
        "url": f"/race/{rid}",
    }


RACE = Body(
    "races.create_race",
    (
        Field(
            "race",
            "choice",
            "the race to run (GET /api/races)",
            choices=tuple(RACES),
            required=True,
            error="invalid_race",
        ),
        Field("speed", setting="speed", doc="simulated seconds per real second for every lab of the race"),
    ),
    error="invalid_settings",
)


# --- API ----------------------------------------------------------------------------------------


@bp.get("/api/races")
def list_races():
    """The races on offer: a chapter preset, the one setting that varies, two to four variants."""
    return jsonify(races=[race_public(i) for i in RACES])


@bp.post("/api/races")
def create_race():
    """Open a race: one lab per variant, each paused at t = 0. 201 with the race token (to start it)
    and each lab's tokens; `/race/<id>` shows them side by side."""
    refuse_foreign_origin()
    clean = parse(json_body(), RACE, speed=current_app.config["LAB"].speed)
    out = open_race(get_redis(), clean["race"], clean["speed"])
    resp = jsonify(out)
    resp.status_code = 201
    return resp


@bp.get("/api/races/<rid>")
def get_race(rid: str):
    """Each lab's counts and clock (the race id is the capability to watch, like a view token)."""
    return jsonify(status(get_redis(), rid))


@bp.post("/api/races/<rid>/start")
def race_start(rid: str):
    """Give every lab the same jobs and fault at the same simulated instant, then run all clocks."""
    refuse_foreign_origin()
    r = get_redis()
    race = _load(r, rid)
    auth = request.headers.get("Authorization", "")
    if not auth.startswith("Bearer "):
        raise ApiError(401, "missing_token", "send Authorization: Bearer <race token>", {"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(race["owner"], token_hash(auth[7:].strip())):
        raise ApiError(403, "forbidden", "this token is not this race's token")
    return jsonify(start_race(r, race))


# --- pages --------------------------------------------------------------------------------------


@bp.app_template_filter("race_value")
def race_value(value: Any) -> str:
    """A setting as the race table shows it: on/off, 1,200 rather than 1200.0."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    if isinstance(value, str):
        return value.replace("_", " ")
    return "–" if value is None else f"{value:,}"


@bp.app_template_global("races_for")
def races_for(preset: str) -> list[dict[str, Any]]:
    return links.races_for(preset)


@bp.get("/races")
def races_page():
    """Every race on offer, with a button that sets one up."""
    return render_template("races.html", races=[race_public(i) for i in RACES], chapters=chapters.all_chapters())


@bp.get("/race/<rid>")
def race_page(rid: str):
    """The runs side by side, live, with the headline readouts compared (a shareable link)."""
    r = get_redis()
    try:
        st = status(r, rid)
    except ApiError:
        abort(404)
    rc = RACES[st["race"]["id"]]
    runs = [
        {
            "side": lab["side"],
            "wid": f"run-{lab['side']}",
            "lab": lab["lab_id"],
            "view": lab["view_token"],
            "preset": rc["preset"],
            "title": lab["label"],
        }
        for lab in st["labs"]
        if lab["alive"]
    ]
    if len(runs) < len(st["labs"]):
        abort(404)
    vary = [{"name": n, "label": settings.BY_NAME[n].label or n} for n in rc["vary"]]
    return render_template("race.html", race=st, runs=runs, rc=rc, vary=vary, chapters=chapters.all_chapters())
