"""A term of classes on one deployment: parked labs cost bytes, not slots; folded labs come back whole; one
address keeps at most its cap of labs alive; a race's lanes count one by one in every budget.

A stack of its own at the defaults (MAX_LABS 40, MAX_CLIENT_LABS 4, MAX_WORKERS 128, LAB_IDLE_TTL), with
these changes: PARKED_MEMORY 1 byte, so every parked lab is folded (the path a full term takes once its parked labs
pass the budget), MAX_CLIENT_LIVE_LABS 10 (tighter than the default 40: one student's nine chapters fit, and the cap
is reached in a few calls), RATE_LABS 10 (half the default 20; a student opens nine labs a minute here) and the blobs
a term's outputs fill, MAX_BLOB_BYTES 512 KiB with CLIENT_BLOB_SHARE 1 (a few jobs' outputs near it).
Students leave a chapter by parking it (`POST …/park`), as PARK_AFTER would a minute after they closed its
page.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from core import archive, blobs, media, parking
from core.config import Config
from core.keys import PARKED, key
from core.procs import wait
from runtime.harness.client import Api
from runtime.harness.stack import Stack
from tests.integration.test_api import multipart

DEFAULTS = Config()
LIVE_CAP = 10
RATE_LABS = 10  # half the default: the race test reaches it in three races
CHAPTERS = [f"ch{i}" for i in range(9)]
STUDENTS = [f"127.0.0.{i}" for i in range(2, 7)]  # five students: 45 labs, more than MAX_LABS
BLOB_CAP = 512 * 1024


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
    env = {
        **{k: str(v) for k, v in defaults.items()},
        "PARKED_MEMORY": "1",
        "MAX_CLIENT_LIVE_LABS": str(LIVE_CAP),
        "MAX_BLOB_BYTES": str(BLOB_CAP),
        "CLIENT_BLOB_SHARE": "1",
    }
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


def test_a_full_server_parks_the_labs_nobody_looked_at_lately_to_open_a_lab_in_use(term, tr):
    """At MAX_LABS, every running lab left alone past WATCH_STALE_S (a class moved on to the next chapter before
    PARK_AFTER parked the last one): a new lab opens, the least recently seen one parks to make room and its
    stream says why, and a lab its owner called meanwhile is never the one parked."""
    cap = DEFAULTS.max_client_labs
    students = [term.api(source=f"127.0.1.{i}") for i in range(DEFAULTS.max_labs // cap)]
    labs = [(api, api.lab("ch0", speed=20, workers=0)) for api in students for _ in range(cap)]
    late = term.api(source="127.0.1.99")
    try:
        assert len(labs) == DEFAULTS.max_labs
        refused = late.call("POST", "/api/labs", {"preset": "ch0"})
        assert refused.status == 429 and refused.json()["error"] == "labs_full", "labs in use are never parked"
        time.sleep(parking.WATCH_STALE_S + 1)  # nobody looks at any of them for a while ...
        first, second = labs[0], labs[1]
        first[0].snapshot(first[1])  # ... but the first one's owner is back
        assert open_chapter(late, "ch0")
        parked = {lab["lab_id"] for _api, lab in labs} & tr.smembers(PARKED)
        assert parked == {second[1]["lab_id"]}, "the least recently seen lab, and only it, parks"
        why = [e["data"]["why"] for e in second[0].events(second[1]) if e["type"] == "lab.parked"]
        assert why == [parking.FULL_WHY], why
    finally:
        for api in (*students, late):
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


def test_past_the_blob_budget_the_least_recently_seen_parked_labs_outputs_go_first_and_their_page_says_so(term, tr):
    """Two weeks of labs fill the blobs with outputs: the supervisor clears the outputs of the parked lab seen
    longest ago, keeps its jobs, history and upload, and stops once the blobs are back under ROOM_TO."""
    apis = [term.api(source=f"127.0.0.{i}") for i in (30, 31, 32)]
    sample = {"sample": "carphone_pristine", "duration_s": 30}
    try:
        old, recent, busy = (api.lab("ch1", speed=1000, workers=1, job_duration=10) for api in apis)
        body, headers = multipart("file", "clip.mp4", media.sample_clip("bigbuckbunny").read_bytes())
        up = apis[0].call("POST", f"/api/labs/{old['lab_id']}/jobs", raw=body, headers=headers, token=old["token"])
        assert up.status == 202, up.body
        apis[0].ok("POST", f"/api/labs/{old['lab_id']}/jobs", sample, old["token"])
        apis[1].ok("POST", f"/api/labs/{recent['lab_id']}/jobs", sample, recent["token"])
        first = apis[0].wait_for(old, lambda s: s["counts"]["done"] == 2)
        second = apis[1].wait_for(recent, lambda s: s["counts"]["done"] == 1)
        apis[0].ok("POST", f"/api/labs/{old['lab_id']}/park", token=old["token"])  # the old one is left first
        apis[1].ok("POST", f"/api/labs/{recent['lab_id']}/park", token=recent["token"])
        outs = {lab["lab_id"]: sum(blobs.names(tr, lab["lab_id"], "transcoded/").values()) for lab in (old, recent)}
        upload = blobs.names(tr, old["lab_id"], "uploads/")
        # another class's lab, in use, takes the blobs past ROOM_AT; clearing the old lab alone brings them to ROOM_TO
        filler = int(blobs.ROOM_AT * BLOB_CAP) - int(tr.get(blobs.TOTAL)) + 4096
        assert filler > 0 and outs[old["lab_id"]] > (blobs.ROOM_AT - blobs.ROOM_TO) * BLOB_CAP + 4096, outs
        blobs.put(tr, busy["lab_id"], "uploads/another-class.bin", b"x" * filler)
        wait(lambda: tr.hexists(key(old["lab_id"], "meta"), "outputs_cleared"), 60, "the old lab's outputs stayed")
        assert int(tr.get(blobs.TOTAL)) <= blobs.ROOM_TO * BLOB_CAP
        assert (
            not blobs.names(tr, old["lab_id"], "transcoded/") and blobs.names(tr, old["lab_id"], "uploads/") == upload
        )
        assert sum(blobs.names(tr, recent["lab_id"], "transcoded/").values()) == outs[recent["lab_id"]]
        assert not tr.hexists(key(recent["lab_id"], "meta"), "outputs_cleared")
        # the old lab's page: its jobs and history are there, the sentence says what went, an output answers 410
        snap = apis[0].snapshot(old)
        assert snap["counts"]["done"] == 2 and "cleared on" in snap["outputs_cleared"]["note"]
        url = next(iter(first["jobs"][0]["outputs"].values()))
        gone = apis[0].call("GET", url, token=old["token"])
        assert gone.status == 410 and gone.json()["error"] == "output_cleared", gone.body
        kept = next(iter(second["jobs"][0]["outputs"].values()))
        assert apis[1].call("GET", kept, token=recent["token"]).status == 200
        # sent again, a job makes its outputs anew
        again = apis[0].ok("POST", f"/api/labs/{old['lab_id']}/jobs", sample, old["token"])
        done = apis[0].wait_for(old, lambda s: s["counts"]["done"] == 3)
        made = next(j for j in done["jobs"] if j["id"] == again["job_id"])
        assert all(apis[0].call("GET", u, token=old["token"]).status == 200 for u in made["outputs"].values())
    finally:
        for api in apis:
            api.delete_created()
