"""A race parked mid-run parks and resumes as one (issue 38, contradiction 5): before, parking one lane paused
every lane's clock but stopped only that lane's workers, so the others held their jobs on a stopped clock and
the lanes no longer compared. On the shared stack, real workers and ffmpeg, the lease race (one ack-late
transcode per lane). The parts no stack can time (a race's idle park, a park racing a resume) are driven on a
database no supervisor watches.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from core import clock, parking, slots
from core.keys import LABS, PARKED, key
from core.procs import wait
from tests.integration.test_parking import running_processes
from tests.lesson.races import lane_lab, open_race, start

SPEED = 60
HOLD_S = 3.0  # real seconds the race stays parked while the test looks for any lane moving


def events(r: redis.Redis, lab: str, kind: str) -> list[dict]:
    return [e for e in (json.loads(f["e"]) for _i, f in r.xrange(key(lab, "events"))) if e["type"] == kind]


def moved(r: redis.Redis, lab: str) -> tuple[int, int, int]:
    """What a lane's job did so far: attempts claimed, completions, duplicate completions."""
    return tuple(len(events(r, lab, k)) for k in ("job.claimed", "job.succeeded", "job.duplicate_completed"))


@pytest.fixture
def sr(stack):
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    yield client
    client.close()


def test_a_race_parked_mid_run_parks_and_resumes_every_lane_and_each_job_is_done_once(api, sr):
    race = open_race(api, "lease", SPEED)
    lanes = [lane_lab(lane) for lane in race["labs"]]
    ids = [lane["lab_id"] for lane in lanes]
    start(api, race)
    running = lambda lab: sr.hget(key(lab, "job", "1"), "state") == "running" and events(sr, lab, "job.claimed")  # noqa: E731
    wait(lambda: all(running(lab) for lab in ids), 60, "every lane's job to be running")
    first = lanes[0]
    res = api.ok("POST", f"/api/labs/{first['lab_id']}/park", token=first["token"])
    assert res["parked"] is True, res
    # every lane at once: in the parked set, out of the slot ledger, its clock paused and marked
    assert [lab for lab in ids if not sr.sismember(PARKED, lab)] == [], "a lane of the parked race runs on"
    assert not set(ids) & {e.lab for e in slots.entries(sr)}, "a parked lane still holds a running-lab slot"
    for lab in ids:
        state = sr.hgetall(key(lab, "clock"))
        assert state["paused"] == "1" and state["parked"] == "1", (lab, state)
        assert events(sr, lab, "lab.parked"), f"{lab} says nothing of its park"
    wait(lambda: all(running_processes(sr, lab) == 0 for lab in ids), 30, "every lane's processes to stop")
    at_park = {lab: moved(sr, lab) for lab in ids}
    t_park = [c["t_raw"] for c in clock.read_many(sr, ids)]
    time.sleep(HOLD_S)
    assert {lab: moved(sr, lab) for lab in ids} == at_park, "a parked lane's job ran again or completed"
    assert [c["t_raw"] for c in clock.read_many(sr, ids)] == t_park, "a parked lane's clock moved"
    assert all(count[1] == 0 for count in at_park.values()), at_park  # parked mid-run: nothing had finished

    # an owner call on another lane resumes the whole race, in one step
    api.snapshot(lanes[1])
    assert not set(ids) & sr.smembers(PARKED), "resuming one lane left another parked"
    assert all(not c["paused"] for c in clock.read_many(sr, ids))
    for lane in lanes:  # the owner polls (an owner call keeps the race from an idle park)
        api.wait_for(lane, lambda s: s["counts"].get("succeeded", 0) >= 1, 300, f"lane {lane['lab_id']} to finish")
    done = {lab: moved(sr, lab) for lab in ids}
    assert all(count[1] == 1 for count in done.values()), done  # each lane's job done once
    # the lanes that keep one run (the long lease, the heartbeat) finished it once, with no duplicate and no
    # redelivery: the run the park stopped ended as `parked` and was sent again at the resume, counted as nothing
    assert [done[lab][2] for lab in ids[1:]] == [0, 0], done
    redelivered = [int(sr.hget(key(lab, "counts"), "redelivered") or 0) for lab in ids[1:]]
    assert redelivered == [0, 0], f"a park-stopped run counted as a redelivery: {redelivered}"
    for lab in ids:
        stopped = json.loads(sr.hget(key(lab, "job", "1", "attempts"), "1"))
        assert stopped["outcome"] == "parked" and "end" in stopped, (lab, stopped)
        assert [e["attempt"] for e in events(sr, lab, "job.resumed")] == [2], lab
    api.ok("POST", f"/api/labs/{first['lab_id']}/clock", {"action": "pause"}, first["token"])
    ts = [c["t_raw"] for c in clock.read_many(sr, ids)]
    assert max(ts) - min(ts) < 1e-6, f"the lanes' clocks came apart: {ts}"


# --- a race's park on a database no supervisor watches ----------------------------------------------------------


@pytest.fixture
def race_db(redis_server):
    """Three linked lanes of one client, running, each holding its slot (keys written here, no stack)."""
    r = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/14", decode_responses=True)
    r.flushdb()
    lanes = ["tlane-a", "tlane-b", "tlane-c"]
    for lab in lanes:
        r.sadd(LABS, lab)
        r.set(key(lab, "settings"), json.dumps({"workers": 2}))
        r.hset(key(lab, "meta"), mapping={"client": "127.0.0.1", "created": time.time()})
        clock.start(r, lab, speed=20)
    clock.link(r, lanes)
    slots.reserve(r, [(lab, 2) for lab in lanes], "127.0.0.1", 8, 40)
    try:
        yield r, lanes
    finally:
        r.flushdb()
        r.close()


def test_a_race_is_idle_only_when_no_lane_is_watched_and_then_parks_whole(race_db):
    r, lanes = race_db
    for lab in lanes:
        r.hset(key(lab, "meta"), "created", time.time() - 100)
    parking.watch(r, lanes[2], "web-1")  # one lane's page is open: the race is watched
    assert parking.park_idle(r, 60) == []
    assert not r.smembers(PARKED)
    r.delete(parking.watchers(lanes[2]))
    assert len(parking.park_idle(r, 60)) == 1  # the race, by one of its lanes
    assert r.smembers(PARKED) == set(lanes) and not slots.entries(r)


def test_parks_and_resumes_of_different_lanes_racing_never_leave_a_race_half_parked(race_db):
    """One thread parks lane a, another resumes lane c, many times over; every state seen between is all
    parked or none, and after a last resume every lane runs with its slot, its clock running, no mark."""
    r, lanes = race_db
    rounds, halves = 100, []
    go = threading.Barrier(3)
    stop = threading.Event()

    def run(act) -> None:
        go.wait()
        for _ in range(rounds):
            act()

    def look() -> None:
        go.wait()
        while not stop.is_set():
            with r.pipeline(transaction=True) as pipe:
                for lab in lanes:
                    pipe.sismember(PARKED, lab)
                seen = pipe.execute()
            if len(set(seen)) > 1:
                halves.append(seen)

    threads = [
        threading.Thread(target=run, args=(lambda: parking.park(r, lanes[0], parking.OWNER_WHY),)),
        threading.Thread(target=run, args=(lambda: parking.resume(r, lanes[2], 8, 40),)),
    ]
    watcher = threading.Thread(target=look)
    for t in [*threads, watcher]:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    watcher.join(10)
    parking.resume(r, lanes[1], 8, 40)
    assert halves == [], f"a race was seen half parked: {halves[:3]}"
    assert not r.smembers(PARKED) and {e.lab for e in slots.entries(r)} == set(lanes)
    for lab in lanes:
        state = r.hgetall(key(lab, "clock"))
        assert state["paused"] == "0" and "parked" not in state, (lab, state)
    parks = [len(events(r, lab, "lab.parked")) for lab in lanes]
    resumes = [len(events(r, lab, "lab.resumed")) for lab in lanes]
    assert len(set(parks)) == 1 and len(set(resumes)) == 1 and 0 < parks[0] <= resumes[0], (parks, resumes)
