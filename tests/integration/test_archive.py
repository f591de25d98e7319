"""A term of classes on one deployment: parked labs cost bytes, not slots; folded labs come back whole; one
address keeps at most its cap of labs alive; a race's lanes count one by one in every budget.

A stack of its own at the defaults (MAX_LABS 40, MAX_CLIENT_LABS 4, MAX_WORKERS 64), with three changes:
PARKED_MEMORY 1 byte, so every parked lab is folded (the path a full term takes once its parked labs pass the
budget), MAX_CLIENT_LIVE_LABS 10 (tighter than the default 40: one student's nine chapters fit, and the cap is
reached in a few calls) and RATE_LABS 10 (half the default 20; a student opens nine labs a minute here).
Students leave a chapter by parking it (`POST …/park`), as PARK_AFTER would a minute after they closed its
page.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from core import archive
from core.config import Config
from core.keys import PARKED, key
from core.procs import wait
from runtime.harness.client import Api
from runtime.harness.stack import Stack

DEFAULTS = Config()
LIVE_CAP = 10
RATE_LABS = 10  # half the default: the race test reaches it in three races
CHAPTERS = [f"ch{i}" for i in range(9)]
STUDENTS = [f"127.0.0.{i}" for i in range(2, 7)]  # five students: 45 labs, more than MAX_LABS


@pytest.fixture(scope="module")
def term(redis_server, tmp_path_factory):
    db = redis_server.url.rsplit("/", 1)[0] + "/10"
    redis.Redis.from_url(db).flushdb()
    defaults = {
        "MAX_LABS": DEFAULTS.max_labs,
        "MAX_CLIENT_LABS": DEFAULTS.max_client_labs,
        "RATE_LABS": RATE_LABS,
        "MAX_WORKERS": DEFAULTS.max_workers,
        "PARK_AFTER": DEFAULTS.park_after,
        "LAB_IDLE_TTL": DEFAULTS.lab_idle_ttl,
    }
    env = {**{k: str(v) for k, v in defaults.items()}, "PARKED_MEMORY": "1", "MAX_CLIENT_LIVE_LABS": str(LIVE_CAP)}
    with Stack("term", root=tmp_path_factory.mktemp("term"), redis_url=db, env=env) as s:
        yield s


@pytest.fixture
def tr(term):
    client = redis.Redis.from_url(term.redis_url, decode_responses=True)
    yield client
    client.close()


def history(api: Api, lab: dict) -> list[tuple[str, str]]:
    """The lab's events as (id, type): what a page rebuilds its picture from."""
    return [(e["id"], e["type"]) for e in api.events(lab)]


def open_chapter(api: Api, preset: str) -> dict:
    res = api.call("POST", "/api/labs", {"preset": preset, "speed": 200})
    assert res.status == 201, f"{preset}: {res.status} {res.body[:300]!r}"
    lab = res.json()
    api.created.append(lab)
    return lab


def test_a_class_opening_every_chapter_twice_never_gets_labs_full_and_folded_labs_keep_their_history(term, tr):
    students = {addr: term.api(source=addr) for addr in STUDENTS}
    seen: dict[str, list[tuple[str, str]]] = {}
    labs: dict[str, list[dict]] = {addr: [] for addr in STUDENTS}
    try:
        for preset in CHAPTERS:  # the class walks the course together, one chapter at a time
            for addr, api in students.items():
                lab = open_chapter(api, preset)
                api.ok("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"vt_seconds": 123}, lab["token"])
                labs[addr].append(lab)
        assert len(tr.smembers("labs")) == len(STUDENTS) * len(CHAPTERS) > DEFAULTS.max_labs
        for addr, api in students.items():  # they leave: every lab parks, and past PARKED_MEMORY it is folded
            for lab in labs[addr]:
                seen[lab["lab_id"]] = history(api, lab)
                assert "settings.changed" in {t for _i, t in seen[lab["lab_id"]]}
                api.ok("POST", f"/api/labs/{lab['lab_id']}/park", token=lab["token"])
        every = set(seen)
        wait(
            lambda: set(tr.smembers(archive.ARCHIVED)) == every,
            120,
            lambda: f"only {tr.scard(archive.ARCHIVED)} of {len(every)} parked labs were folded",
        )
        metrics = students[STUDENTS[0]].call("GET", "/metrics").body.decode()
        assert f"asyncworklab_labs_folded {len(every)}" in metrics, metrics
        one = next(iter(every))
        assert not tr.exists(key(one, "events")) and tr.exists(archive.archive_key(one)), "a folded lab kept its stream"
        for addr, api in students.items():  # the next lesson: every student opens every chapter again
            for lab in labs[addr]:
                res = api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"])
                assert res.status == 200, f"{addr} reopening {lab['lab_id']}: {res.status} {res.body[:300]!r}"
                assert res.json()["settings"]["vt_seconds"] == 123
                now = history(api, lab)
                assert now[: len(seen[lab["lab_id"]])] == seen[lab["lab_id"]], "a reopened lab lost its history"
                assert not tr.sismember(archive.ARCHIVED, lab["lab_id"])
                api.ok("POST", f"/api/labs/{lab['lab_id']}/park", token=lab["token"])
    finally:
        for api in students.values():
            api.delete_created()


def test_one_address_cannot_keep_more_than_its_cap_of_labs_even_all_at_once(term, tr):
    api = term.api(source="127.0.0.20")
    other = term.api(source="127.0.0.21")
    try:
        with ThreadPoolExecutor(LIVE_CAP + 6) as pool:  # at once: the check and the take are one step
            answers = list(pool.map(lambda _i: api.call("POST", "/api/labs", {"preset": "ch0"}), range(LIVE_CAP + 6)))
        made = [a.json() for a in answers if a.status == 201]
        api.created.extend(made)
        refused = [a for a in answers if a.status != 201]
        # RATE_LABS (10 a minute here) equals the cap: the openings past it are refused by one or the other
        assert len(made) == LIVE_CAP, [(a.status, a.body[:120]) for a in refused]
        assert {a.json()["error"] for a in refused} <= {"client_labs_kept", "rate_limited"}
        for lab in made:  # parked labs still count: the cap is on labs kept alive
            api.ok("POST", f"/api/labs/{lab['lab_id']}/park", token=lab["token"])
        assert {x["lab_id"] for x in made} <= tr.smembers(PARKED)
        tr.delete(*tr.keys("ratelimit:labs:127.0.0.20:*"))  # a new minute: only the cap can refuse now
        res = api.call("POST", "/api/labs", {"preset": "ch0"})
        assert res.status == 429 and res.json()["error"] == "client_labs_kept", res.body
        assert f"keep {LIVE_CAP} labs at once" in res.json()["detail"]
        assert open_chapter(other, "ch0")  # another address is not refused
        api.delete(made[0])  # closing one makes room for one
        assert open_chapter(api, "ch0")
    finally:
        api.delete_created()
        other.delete_created()


def test_a_races_lanes_count_one_by_one_in_the_rate_and_the_cap(term, tr):
    api = term.api(source="127.0.0.30")
    races: list[dict] = []

    def race(name: str):
        res = api.call("POST", "/api/races", {"race": name, "speed": 200})
        if res.status == 201:
            races.append(res.json())
        return res

    def close_races():
        for rc in races:
            for lane in rc["labs"]:
                api.call("DELETE", f"/api/labs/{lane['lab_id']}", token=lane["token"])
        races.clear()

    try:
        assert race("retry-policies").status == 201  # 4 lanes: 4 of RATE_LABS' 10 in this minute
        close_races()
        assert race("retry-policies").status == 201  # 8
        close_races()
        res = race("lease")  # 3 more would be 11 (before: a race was one opening, so this was the third)
        assert res.status == 429 and res.json()["error"] == "rate_limited", res.body
        tr.delete(*tr.keys("ratelimit:labs:127.0.0.30:*"))  # a new minute
        for name in ("jitter", "retry-policies", "retry-policies"):  # 2 + 4 + 4: the 10 labs one client may keep
            assert race(name).status == 201, name
        running = [x for x in tr.hgetall("slots:labs").values() if x.split(" ")[2] == "127.0.0.30"]
        assert len(running) <= DEFAULTS.max_client_labs  # each lane is one running lab of the client's four
        tr.delete(*tr.keys("ratelimit:labs:127.0.0.30:*"))
        res = race("guard")
        assert res.status == 429 and res.json()["error"] == "client_labs_kept", res.body
    finally:
        close_races()
    wait(
        lambda: not any(v.startswith("127.0.0.30 ") for v in tr.hvals("labs:client")),
        30,
        "the races' lanes were not forgotten when they were deleted",
    )


def test_folding_and_unfolding_keep_the_event_stream_its_ids_and_its_count(term, tr):
    api = term.api(source="127.0.0.40")
    try:
        lab = open_chapter(api, "ch4")
        lab_id = lab["lab_id"]
        api.ok("PATCH", f"/api/labs/{lab_id}/settings", {"retry_base": 7}, lab["token"])
        before = tr.xinfo_stream(key(lab_id, "events"))
        ids = [i for i, _f in tr.xrange(key(lab_id, "events"))]
        api.ok("POST", f"/api/labs/{lab_id}/park", token=lab["token"])
        wait(lambda: tr.sismember(archive.ARCHIVED, lab_id), 60, "the parked lab was never folded")
        assert not tr.exists(key(lab_id, "events"))
        assert archive.restore(tr, lab_id)
        after = tr.xinfo_stream(key(lab_id, "events"))
        assert [i for i, _f in tr.xrange(key(lab_id, "events"))][: len(ids)] == ids
        assert after["entries-added"] >= before["entries-added"] and after["length"] >= before["length"]
        assert not tr.exists(archive.archive_key(lab_id)) and not tr.sismember(archive.ARCHIVED, lab_id)
    finally:
        api.delete_created()
