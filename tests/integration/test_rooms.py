"""Classroom rooms on the real stack: a join code opens the instructor's lab read-only or copies it,
the instructor sees who is in the room, scenario links carry every setting, and a run exports."""

import csv
import io
import json
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qsl, urlsplit

import segno

import chapters
from app.routes import rooms
from app.routes.rooms import ALPHABET, PRESENCE_WINDOW, ROOM_TTL
from core import registry
from tests.integration.test_limits import post_from


def open_room(api, **body) -> dict:
    res = api.call("POST", "/api/rooms", body)
    assert res.status == 201, res.body
    room = res.json()
    api.created.append(room["lab"])  # the api fixture deletes the lab afterwards
    return room


def follow(api, room, name="") -> dict:
    res = api.call("POST", f"/api/rooms/{room['code']}/follow", {"name": name})
    assert res.status == 201, res.body
    lab = res.json()
    api.created.append(lab)
    return lab


def seat(api, room) -> str:
    """A seat the room issues to one page: the id its presence and guesses count under."""
    res = api.call("POST", f"/api/rooms/{room['code']}/members", {})
    assert res.status == 201, res.body
    assert res.json()["display_code"] == f"{room['code'][:5]}-{room['code'][5:]}"
    return res.json()["client"]


def check_in(api, room, client, lab_id=None, token=None):
    return api.call("POST", f"/api/rooms/{room['code']}/presence", {"client": client, "lab_id": lab_id}, token=token)


def status(api, room, token=None):
    return api.call("GET", f"/api/rooms/{room['code']}/status", token=token or room["instructor_token"])


def test_a_join_code_resolves_to_a_view_token_that_reads_but_cannot_mutate(api):
    room = open_room(api, preset="ch1", speed=200)
    code, lab = room["code"], room["lab"]
    assert re.fullmatch(f"[{ALPHABET}]{{10}}", code) and not set(code) & set("0O1I")
    # typed the way a student reads it off the projector: lower case, with the dash
    res = api.call("GET", f"/api/rooms/{code[:5].lower()}-{code[5:].lower()}")
    assert res.status == 200
    joined = res.json()
    assert joined["lab_id"] == lab["lab_id"] and joined["view_token"] == lab["view_token"]
    assert joined["watch_url"].startswith("/chapters/1-") and f"view={lab['view_token']}" in joined["watch_url"]
    base, view = f"/api/labs/{lab['lab_id']}", joined["view_token"]
    assert api.call("GET", base, token=view).status == 200
    assert api.call("GET", base + "/events", token=view).status == 200
    for method, path, body in [
        ("PATCH", "/settings", {"vt_seconds": 900}),
        ("POST", "/jobs", {}),
        ("POST", "/clock", {"action": "pause"}),
        ("POST", "/faults", {"type": "slow"}),
        ("DELETE", "", None),
    ]:
        res = api.call(method, base + path, body, token=view)
        assert res.status == 403 and res.json()["error"] == "forbidden", (method, path)
    assert api.call("GET", base, token=lab["token"]).json()["settings"]["vt_seconds"] == 300  # nothing changed
    # a code that does not exist, or could not exist, is a 404 with a JSON reason
    for bad in ["ZZZZZZ" if code != "ZZZZZZ" else "YYYYYY", "O0O0O0", "x" * 300]:
        res = api.call("GET", f"/api/rooms/{bad}")
        assert res.status == 404 and res.json()["error"] == "unknown_room"
    assert api.call("POST", "/api/rooms/NOPE22/follow", {}).status == 404


def test_follow_along_gets_its_own_lab_with_the_instructors_current_settings(api):
    room = open_room(api, preset="ch1", speed=200)
    lab = room["lab"]
    changed = api.call(
        "PATCH",
        f"/api/labs/{lab['lab_id']}/settings",
        {"vt_seconds": 450, "heartbeat": True, "workers": 1, "speed": 300},
        lab["token"],
    )
    assert changed.status == 200
    mine = follow(api, room, name="  Ada   Lovelace ")
    assert mine["lab_id"] != lab["lab_id"] and mine["name"] == "Ada Lovelace"
    assert mine["chapter_url"] == f"/chapters/1-task-queue-anatomy?room={room['code']}"
    theirs = api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"]).json()
    own = api.call("GET", f"/api/labs/{mine['lab_id']}", token=mine["token"]).json()
    assert own["preset"] == "ch1" and own["settings"] == theirs["settings"]
    assert own["clock"]["speed"] == 300
    # the student's token drives their own lab, not the instructor's
    assert api.call("PATCH", f"/api/labs/{mine['lab_id']}/settings", {"vt_seconds": 60}, mine["token"]).status == 200
    assert api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"vt_seconds": 60}, mine["token"]).status == 403
    assert api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"]).json()["settings"]["vt_seconds"] == 450
    assert api.call("POST", f"/api/rooms/{room['code']}/follow", {"name": "x" * 41}).status == 422


def test_the_instructor_view_counts_viewers_and_each_student_labs_headline_counts(api):
    room = open_room(api, preset="ch1", speed=200)
    api.call("PATCH", f"/api/labs/{room['lab']['lab_id']}/settings", {"vt_seconds": 1200}, room["lab"]["token"])
    a, b = seat(api, room), seat(api, room)
    assert check_in(api, room, a).json()["role"] == "viewer"
    assert check_in(api, room, b).json()["role"] == "viewer"
    assert check_in(api, room, a).status == 200  # the same viewer again is still one viewer
    assert (
        check_in(api, room, seat(api, room), room["lab"]["lab_id"], token=room["instructor_token"]).json()["role"]
        == "instructor"
    )
    student = follow(api, room, name="Grace")
    assert check_in(api, room, seat(api, room), student["lab_id"]).json()["role"] == "student"

    snap = status(api, room).json()
    assert snap["viewers"] == 2 and snap["lab_id"] == room["lab"]["lab_id"] and snap["lab_alive"]
    assert [s["name"] for s in snap["students"]] == ["Grace"]
    assert snap["students"][0]["counts"] == {"done": 0, "redelivered": 0, "dead": 0, "lost": 0}
    assert snap["students"][0]["live"] is True
    # the instructor can open the student's lab read-only (e.g. to put it on the projector)
    watch = dict(parse_qsl(urlsplit(snap["students"][0]["watch_url"]).query))
    assert watch["lab"] == student["lab_id"] and watch["view"] == student["view_token"]
    assert api.call("PATCH", f"/api/labs/{student['lab_id']}/settings", {"workers": 0}, watch["view"]).status == 403

    # the student runs a real job; the instructor's readout follows their lab's counts
    res = api.call("POST", f"/api/labs/{student['lab_id']}/jobs", {"duration_s": 30}, student["token"])
    assert res.status == 202
    counts = api.wait_for(student, lambda s: s["counts"]["done"] == 1, timeout=90)["counts"]
    row = status(api, room).json()["students"][0]
    assert row["counts"] == {"done": 1, "redelivered": counts["redelivered"], "dead": 0, "lost": 0}

    # only the instructor token opens the dashboard
    assert status(api, room, token=student["token"]).status == 403
    assert api.call("GET", f"/api/rooms/{room['code']}/status").status == 401
    assert check_in(api, room, "bad id!").status == 422


def test_a_student_lab_that_expires_shows_as_expired_not_an_error(api):
    room = open_room(api, preset="ch1", speed=200)
    student = follow(api, room)
    assert api.call("DELETE", f"/api/labs/{student['lab_id']}", token=student["token"]).status == 204
    row = status(api, room).json()["students"][0]
    assert row["alive"] is False and row["counts"] is None


def test_every_scenario_link_carries_every_setting_and_a_room_can_start_from_it(api):
    assert {"vt-too-short", "retry-storm", "poison-pill"} <= set(chapters.SCENARIOS)
    listed = {s["id"]: s for s in api.call("GET", "/api/scenarios").json()["scenarios"]}
    for sid, sc in chapters.SCENARIOS.items():
        res = api.call("GET", f"/s/{sid}")  # urllib follows the redirect; the final URL is the chapter page
        assert res.status == 200
        query = dict(parse_qsl(urlsplit(listed[sid]["url"]).query))
        assert query.pop("scenario") == sid
        assert set(query) == set(sc["settings"])
        # the query string, read back the way the page applies it (PATCH), reproduces every setting
        lab = api.lab(sc["preset"], speed=200)
        patched = api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", query, lab["token"])
        assert patched.status == 200, patched.body
        got = patched.json()["settings"]
        assert {k: got[k] for k in sc["settings"]} == sc["settings"]
        room = open_room(api, scenario=sid, speed=200)
        assert follow(api, room)["chapter_url"].endswith(f"?room={room['code']}&scenario={sid}")
        snap = api.call("GET", f"/api/labs/{room['lab']['lab_id']}", token=room["lab"]["token"]).json()
        assert snap["preset"] == sc["preset"]
        assert snap["settings"] == {**chapters.settings_for(sc["preset"]), **sc["settings"], "speed": 200}
    assert api.call("GET", "/s/no-such-thing").status == 404


def test_export_jsonl_is_the_event_stream_and_csv_is_the_counts(api, r):
    lab = api.lab("ch1", speed=200, workers=1, vt_seconds=1200)
    for _ in range(2):
        assert api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"duration_s": 20}, lab["token"]).status == 202
    api.wait_for(lab, lambda s: s["counts"]["done"] == 2 and s["counts"]["running"] == 0, timeout=90)
    pause = api.call("POST", f"/api/labs/{lab['lab_id']}/clock", {"action": "pause"}, lab["token"])
    assert pause.status == 200  # nothing more happens while we compare
    base = f"/api/labs/{lab['lab_id']}"
    res = api.call("GET", base + "/export.jsonl", token=lab["view_token"])
    assert res.status == 200 and res.headers["Content-Type"].startswith("application/x-ndjson")
    assert "attachment" in res.headers["Content-Disposition"]
    lines = res.body.decode().splitlines()
    exported = [json.loads(line) for line in lines]
    assert exported == api.events(lab) and len(exported) > 5
    assert {"job.enqueued", "job.claimed", "job.succeeded"} <= {e["type"] for e in exported}

    res = api.call("GET", base + "/export.csv", token=lab["view_token"])
    assert res.status == 200 and res.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(res.body.decode())))
    assert rows[0] == ["count", "value"]
    assert {k: int(v) for k, v in rows[1:]} == api.snapshot(lab)["counts"]
    assert dict(rows[1:])["done"] == "2"
    # the dashboard's one-round-trip read gives the same numbers, and None for a lab that is gone
    both = registry.counts_of(r, [lab["lab_id"], "gone"])
    assert both == {lab["lab_id"]: registry.counts(r, lab["lab_id"]), "gone": None}

    other = api.lab("ch1", speed=200, workers=0)
    assert api.call("GET", base + "/export.csv").status == 401
    assert api.call("GET", base + "/export.jsonl", token=other["token"]).status == 403
    assert api.call("GET", "/api/labs/nolab/export.jsonl", token=lab["token"]).status == 404


def test_the_qr_code_is_an_svg_of_the_join_url(api):
    room = open_room(api, preset="ch4", speed=200)
    res = api.call("GET", room["qr_url"])
    assert res.status == 200 and res.headers["Content-Type"] == "image/svg+xml"
    svg = res.body.decode()
    assert svg.startswith("<svg") and "<path" in svg
    assert room["join_url"].endswith(f"/join/{room['code']}")
    # the same URL drawn with the same parameters gives the same picture: the code encodes the join URL
    out = io.BytesIO()
    segno.make(room["join_url"], error="m").save(
        out,
        kind="svg",
        scale=10,
        border=4,
        dark="#000",
        light="#fff",
        xmldecl=False,
        title=f"Join room {room['display_code']}",
    )
    assert svg == out.getvalue().decode()
    page = api.call("GET", f"/join/{room['code']}")
    assert page.status == 200 and room["display_code"].encode() in page.body
    assert api.call("GET", "/join/ZZZZZ2").status == 404
    assert api.call("GET", "/api/rooms/ZZZZZ2/qr.svg").status == 404


def test_room_calls_refuse_bad_input_foreign_origins_and_end_when_closed(api):
    assert api.call("POST", "/api/rooms", {"preset": "ch99"}).status == 422
    assert api.call("POST", "/api/rooms", {"preset": "ch1-heartbeat"}).status == 422  # no chapter page runs it
    assert api.call("POST", "/api/rooms", {"scenario": "nope"}).status == 422
    assert api.call("POST", "/api/rooms", {"scenario": ["poison-pill"]}).status == 422
    assert api.call("POST", "/api/rooms", {"preset": {"ch1": 1}}).status == 422
    assert api.call("POST", "/api/rooms", {"preset": "ch1", "speed": 0}).status == 422
    assert api.call("POST", "/api/rooms", ["ch1"]).status == 422
    assert api.call("POST", "/api/rooms", raw=b"{", headers={"Content-Type": "application/json"}).status == 400
    res = api.call("POST", "/api/rooms", {"preset": "ch1"}, headers={"Origin": "http://evil.example"})
    assert res.status == 403 and res.json()["error"] == "bad_origin"
    room = open_room(api, preset="ch1", speed=200)
    assert api.call("DELETE", f"/api/rooms/{room['code']}", token=room["lab"]["token"]).status == 403
    assert api.call("DELETE", f"/api/rooms/{room['code']}", token=room["instructor_token"]).status == 204
    assert api.call("GET", f"/api/rooms/{room['code']}").status == 404
    assert status(api, room).status == 404


def test_a_room_lives_in_redis_with_a_ttl_and_the_projector_keeps_its_lab_alive(api, r):
    room = open_room(api, preset="ch1", speed=200)
    code, lab_id = room["code"], room["lab"]["lab_id"]
    assert 0 < r.ttl(f"room:{code}") <= ROOM_TTL
    assert r.hget(f"room:{code}", "instructor") != room["instructor_token"]  # stored only as a hash
    check_in(api, room, seat(api, room))
    assert 0 < r.ttl(f"room:{code}:viewers") <= ROOM_TTL
    r.hset(f"lab:{lab_id}:meta", "last_active", 0)  # idle since 1970 ...
    assert check_in(api, room, seat(api, room), lab_id, token=room["instructor_token"]).json()["role"] == "instructor"
    assert float(r.hget(f"lab:{lab_id}:meta", "last_active")) > 0  # ... until the presenting page checked in


def test_a_viewer_who_closes_the_page_stops_counting_and_a_gone_lab_cannot_be_followed(api, r):
    room = open_room(api, preset="ch1", speed=200)
    here, gone = seat(api, room), seat(api, room)
    check_in(api, room, here)
    check_in(api, room, gone)
    assert status(api, room).json()["viewers"] == 2
    r.zadd(f"room:{room['code']}:viewers", {gone: time.time() - PRESENCE_WINDOW - 1})  # last seen too long ago
    assert status(api, room).json()["viewers"] == 1
    lab = room["lab"]
    assert api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"]).status == 204
    res = api.call("POST", f"/api/rooms/{room['code']}/follow", {})
    assert res.status == 410 and res.json()["error"] == "room_lab_gone"
    assert status(api, room).json()["lab_alive"] is False


def test_an_instructor_can_open_a_room_on_a_lab_they_already_set_up(api):
    lab = api.lab("ch4", speed=200, workers=1, max_attempts=2)
    other = api.lab("ch4", speed=200, workers=0)
    body = {"lab_id": lab["lab_id"], "view_token": lab["view_token"], "scenario": "poison-pill"}
    res = api.call("POST", "/api/rooms", body, token=lab["token"])
    assert res.status == 201, res.body
    room = res.json()
    assert room["lab"]["lab_id"] == lab["lab_id"]
    joined = api.call("GET", f"/api/rooms/{room['code']}").json()
    assert joined["view_token"] == lab["view_token"] and joined["title"] == "Scenario: Poison pill"
    copy = follow(api, room)
    got = api.call("GET", f"/api/labs/{copy['lab_id']}", token=copy["token"]).json()["settings"]
    assert got["max_attempts"] == 2 and got["workers"] == 1  # the lab's own tuned settings, not the scenario's
    # only the lab's owner token opens a room on it, and only with the lab's real view token
    assert api.call("POST", "/api/rooms", body, token=lab["view_token"]).status == 403
    assert api.call("POST", "/api/rooms", body, token=other["token"]).status == 403
    assert api.call("POST", "/api/rooms", body).status == 403
    wrong = api.call("POST", "/api/rooms", {**body, "view_token": other["view_token"]}, token=lab["token"])
    assert wrong.status == 422 and "view_token" in wrong.json()["detail"]
    assert api.call("POST", "/api/rooms", {**body, "scenario": "vt-too-short"}, token=lab["token"]).status == 422
    assert api.call("POST", "/api/rooms", {**body, "lab_id": "nolab"}, token=lab["token"]).status == 404
    assert api.call("POST", "/api/rooms", {**body, "lab_id": ["x"]}, token=lab["token"]).status == 404


def test_a_room_counts_people_not_ids_one_guess_per_seat_it_issued(api):
    """120 guesses under ids one address made up count for nothing; each seat the room issued counts once,
    however often it guesses."""
    room = open_room(api, preset="ch1", speed=200)
    code = room["code"]
    prediction = status(api, room).json()["predictions"][0]
    res = api.call("POST", f"/api/rooms/{code}/round", {"prediction": prediction["id"]}, token=room["instructor_token"])
    assert res.status == 201, res.body
    n = res.json()["round"]["n"]
    value = prediction["choices"][0][0] if prediction["kind"] == "choice" else prediction.get("min", 0)

    def guess(client: str):
        return api.call("POST", f"/api/rooms/{code}/round/guesses", {"client": client, "n": n, "value": value})

    refused = [guess(uuid.uuid4().hex) for _ in range(120)]
    assert {(r.status, r.json()["error"]) for r in refused} == {(403, "not_in_room")}
    issued = seat(api, room)
    forged = issued[:-1] + ("1" if issued.endswith("0") else "0")  # its signature altered: no seat either
    assert guess(forged).status == 403
    mine = seat(api, room)
    for _ in range(3):  # the same seat guessing again changes its one guess
        assert guess(mine).status == 200
    rnd = status(api, room).json()["round"]
    assert rnd["count"] == 1 and sum(rnd["spread"].values()) == 1, rnd
    # a seat of one room is no seat in another
    other = open_room(api, preset="ch1", speed=200)
    assert check_in(api, other, mine).status == 403
    # invented viewers are not counted either
    assert check_in(api, room, uuid.uuid4().hex).status == 403
    assert status(api, room).json()["viewers"] == 0


def test_a_seat_counts_only_from_the_address_that_took_it(api, stack):
    """Before: a seat worked from any address. Now the room signs it for the address that took it: the same
    id from another address is no seat (403 not_in_room: that page takes its own), from its own it counts."""
    room = open_room(api, preset="ch1", speed=200)
    path = f"/api/rooms/{room['code']}"
    status_, _, body = post_from(stack, "127.0.0.21", path + "/members", {}, "")
    assert status_ == 201
    mine = body["client"]
    status_, _, body = post_from(stack, "127.0.0.22", path + "/presence", {"client": mine}, "")
    assert (status_, body["error"]) == (403, "not_in_room")
    assert post_from(stack, "127.0.0.21", path + "/presence", {"client": mine}, "")[2]["role"] == "viewer"
    assert status(api, room).json()["viewers"] == 1


def test_a_full_room_lets_no_one_past_its_cap_however_many_join_at_once(r):
    """The cap is checked and taken in one step (before: check, then add, and 1,003 of 1,000 got in): 240
    joins from 8 threads into a set capped at 50 leave exactly 50, and a member already in stays in; one
    address is held to its own share of the viewers."""
    k, cap = f"room:TEST{uuid.uuid4().hex[:8]}:viewers", 50
    hk = k.replace("viewers", "guesses")
    ins: list[bool] = []

    def join(i: int) -> None:
        ins.append(rooms.join_present(r, k, f"seat{i}", time.time(), cap) == 1)
        ins.append(rooms.join_capped(r, hk, f"seat{i}", "1", cap))

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(join, range(240)))
        assert r.zcard(k) == cap and r.hlen(hk) == cap and ins.count(True) == 2 * cap
        member = r.zrange(k, 0, 0)[0]
        assert rooms.join_present(r, k, member, time.time(), cap), "a viewer already counted checks in again"
        assert rooms.join_capped(r, hk, member, "2", cap) and r.hget(hk, member) == "2", "a guess may change"
        assert r.ttl(k) > 0 and r.ttl(hk) > 0
        # one address may be only `per_client` of a room's viewers (before: all of them, one seat at a time)
        r.delete(k)
        now = time.time()
        assert [rooms.join_present(r, k, f"s{i}", now, cap, "10.0.0.1", 2) for i in range(3)] == [1, 1, -1]
        assert rooms.join_present(r, k, "s0", now, cap, "10.0.0.1", 2) == 1, "one already counted checks in again"
        assert rooms.join_present(r, k, "t0", now, cap, "10.0.0.2", 2) == 1 and r.zcard(k) == 3
    finally:
        r.delete(k, hk, f"{k}:", f"{k}:10.0.0.1", f"{k}:10.0.0.2")


def test_presence_as_the_instructors_lab_needs_the_instructor_token(api, r):
    room = open_room(api, preset="ch1", speed=200)
    lab_id, me = room["lab"]["lab_id"], seat(api, room)
    r.hset(f"lab:{lab_id}:meta", "last_active", 0)
    assert check_in(api, room, me, lab_id).status == 401
    assert check_in(api, room, me, lab_id, token=room["lab"]["view_token"]).status == 403
    # the lab's own token is not the room's instructor token
    assert check_in(api, room, me, lab_id, token=room["lab"]["token"]).status == 403
    assert float(r.hget(f"lab:{lab_id}:meta", "last_active")) == 0  # none of them kept the lab alive
    assert check_in(api, room, me, lab_id, token=room["instructor_token"]).json()["role"] == "instructor"
    assert float(r.hget(f"lab:{lab_id}:meta", "last_active")) > 0
