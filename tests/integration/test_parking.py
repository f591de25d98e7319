"""Parking and the slot ledger on a stack of their own: a lab nobody watches is parked (no processes, its
history kept) and resumes when a page opens it again; the running-lab cap and the worker ceiling hold
under concurrent requests from one client. Everything real: supervisor, rq workers, gunicorn.

The stack runs the default running-lab cap (MAX_CLIENT_LABS 4); PARK_AFTER is shortened so a test waits
seconds, not a minute, MAX_WORKERS lowered so the ceiling test runs a handful of processes, and RATE_LABS
stays off (the shared stack's default) so the tests of one module may open more than ten labs a minute.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import redis
import websocket

import chapters
from core import clock, parking, slots
from core.keys import LABS, PARKED, key
from core.procs import wait
from runtime.harness.stack import Stack
from tests.helpers import ws_until

PARK_AFTER, MAX_WORKERS, CAP = 2, 12, 4


@pytest.fixture(scope="module")
def pstack(redis_server, tmp_path_factory):
    db = redis_server.url.rsplit("/", 1)[0] + "/7"
    redis.Redis.from_url(db).flushdb()
    with Stack(
        "parking",
        root=tmp_path_factory.mktemp("parking"),
        redis_url=db,
        env={
            "PARK_AFTER": str(PARK_AFTER),
            "MAX_WORKERS": str(MAX_WORKERS),
            "MAX_CLIENT_LABS": str(CAP),
            "MAX_LABS": "40",
        },
    ) as s:
        yield s


@pytest.fixture
def papi(pstack):
    client = pstack.api()
    yield client
    client.delete_created()
    r = redis.Redis.from_url(pstack.redis_url)
    wait(lambda: not r.scard("labs"), 30, "the last test's labs to be gone")


@pytest.fixture
def pr(pstack):
    client = redis.Redis.from_url(pstack.redis_url, decode_responses=True)
    yield client
    client.close()


def alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def running_processes(r: redis.Redis, lab: str) -> int:
    """Worker processes of `lab` that really run (their pid is alive), from the supervisor's worker rows."""
    rows = [json.loads(v) for v in r.hgetall(key(lab, "workers")).values()]
    return sum(1 for w in rows if w.get("pid") and alive(w["pid"]))


def event_types(r: redis.Redis, lab: str) -> list[str]:
    return [json.loads(f["e"])["type"] for _i, f in r.xrange(key(lab, "events"))]


def connect(stack, lab: dict) -> websocket.WebSocket:
    url = stack.url.replace("http", "ws") + f"/ws/labs/{lab['lab_id']}?after=0&token={lab['token']}"
    return websocket.create_connection(url, timeout=20, origin=stack.url)


def test_an_unwatched_lab_parks_keeps_its_history_and_resumes_when_a_page_connects(pstack, papi, pr):
    lab = papi.lab("ch1", speed=200, workers=2)
    page = connect(pstack, lab)  # a page holds it open while it is set up
    papi.workers_ready(lab, 2)
    job = papi.ok(
        "POST",
        f"/api/labs/{lab['lab_id']}/jobs",
        {"job_type": "thumbnail", "duration_s": 20},
        lab["token"],
        expect=(202,),
    )
    papi.wait_for(lab, lambda s: s["counts"]["done"] == 1, what="the job to finish")
    before = event_types(pr, lab["lab_id"])
    # the reader leaves: from here nobody looks at it through the API or a socket (the server is read directly)
    page.close()
    wait(lambda: "lab.parked" in event_types(pr, lab["lab_id"]), 60, "the unwatched lab to be parked")
    wait(
        lambda: running_processes(pr, lab["lab_id"]) == 0 and not pr.hlen(key(lab["lab_id"], "workers")),
        30,
        "the parked lab's workers to stop",
    )
    assert pr.sismember(parking.PARKED, lab["lab_id"]) and pr.hget(slots.LEDGER, lab["lab_id"]) is None
    assert pr.hget(key(lab["lab_id"], "clock"), "paused") == "1"
    assert event_types(pr, lab["lab_id"])[: len(before)] == before  # history intact
    assert pr.hget(key(lab["lab_id"], "job", job["job_id"]), "state") == "done"

    ws = connect(pstack, lab)
    try:
        wait(lambda: "lab.resumed" in event_types(pr, lab["lab_id"]), 10, "the lab to resume on a WS connect")
        # the clock stood still while parked: the resume starts it at the park's simulated moment, and since
        # then it has run at most the lab's speed times the real time since the resume began
        now_sim = clock.now(pr, lab["lab_id"])
        since = time.time() - float(pr.hget(key(lab["lab_id"], "meta"), "resumed"))
        moments = {
            e["type"]: e["t_sim"]
            for _i, f in pr.xrange(key(lab["lab_id"], "events"))
            if (e := json.loads(f["e"]))["type"] in ("lab.parked", "lab.resumed")
        }
        parked_t = moments["lab.parked"]
        assert moments["lab.resumed"] == pytest.approx(parked_t, abs=0.001), moments
        # (+1 simulated s: the resume starts the clock a moment before it stamps `resumed`; a clock that ran
        # while parked is tens of simulated seconds past)
        assert parked_t - 0.001 <= now_sim <= parked_t + 200 * since + 1.0, (
            f"parked at {parked_t} s, the clock read {now_sim:.3f} s {since:.3f} real s after the resume at 200×"
        )
        wait(lambda: running_processes(pr, lab["lab_id"]) == 2, 30, "the resumed lab's two workers to run")
        assert pr.hget(key(lab["lab_id"], "clock"), "paused") == "0"
        assert not pr.sismember(parking.PARKED, lab["lab_id"]) and pr.hget(slots.LEDGER, lab["lab_id"])
        got = [
            e["type"]
            for e in ws_until(
                ws, lambda evs: len(evs) >= len(before), timeout=30, what="the catch-up of the lab's history"
            )
        ][: len(before)]
        assert got == before  # the page's catch-up replays the lab's history
    finally:
        ws.close()


def test_a_lab_the_learner_paused_stays_paused_after_parking_and_resume(pstack, papi, pr):
    lab = papi.lab("ch1", speed=200, workers=1)
    papi.ok("POST", f"/api/labs/{lab['lab_id']}/clock", {"action": "pause"}, lab["token"])
    wait(lambda: pr.sismember(parking.PARKED, lab["lab_id"]), 60, "the unwatched lab to be parked")
    papi.snapshot(lab)  # any owner call resumes it
    assert not pr.sismember(parking.PARKED, lab["lab_id"])
    assert pr.hget(key(lab["lab_id"], "clock"), "paused") == "1"
    resumed = [json.loads(f["e"]) for _i, f in pr.xrange(key(lab["lab_id"], "events"))]
    assert [e["data"]["clock"] for e in resumed if e["type"] == "lab.resumed"] == ["still paused, as it was"]


def test_ten_concurrent_creates_from_one_client_run_at_most_its_cap(pstack, papi, pr):
    answers: list = []

    def create() -> None:
        res = papi.call("POST", "/api/labs", {"preset": "ch1", "speed": 20})
        answers.append(res)
        if res.status == 201:
            papi.created.append(res.json())

    threads = [threading.Thread(target=create) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = [a.json()["lab_id"] for a in answers if a.status == 201]
    assert made, [a.status for a in answers]
    running = [lab for lab in made if not pr.sismember(parking.PARKED, lab)]
    assert len(running) <= CAP, f"{len(running)} of {len(made)} labs running"
    # the labs that really run processes, sampled while the supervisor starts them (and, nobody watching
    # them, parks them again after PARK_AFTER): never more than the cap
    seen: list[int] = []

    def sample() -> bool:
        seen.append(sum(1 for lab in made if running_processes(pr, lab)))
        return max(seen) >= 1 and len(seen) >= 40

    wait(sample, 60, "worker processes of the running labs to start")
    assert max(seen) <= CAP, f"{max(seen)} labs ran processes at once"


def test_at_the_cap_with_every_lab_watched_the_answer_lists_them_and_parking_one_lets_the_next_open(pstack, papi, pr):
    labs = [papi.lab("ch0", speed=20) for _ in range(CAP)]
    sockets = [connect(pstack, lab) for lab in labs]
    try:
        wait(lambda: len(parking.watched_now(pr, [x["lab_id"] for x in labs])) == CAP, 10, "every lab watched")
        res = papi.call("POST", "/api/labs", {"preset": "ch0"})
        assert res.status == 429 and res.json()["error"] == "client_labs_full"
        assert sorted(x["lab_id"] for x in res.json()["running"]) == sorted(x["lab_id"] for x in labs)
        assert int(res.headers["Retry-After"]) > 0
        # the owner parks its oldest lab itself; then the new lab opens
        oldest = labs[0]
        assert papi.ok("POST", f"/api/labs/{oldest['lab_id']}/park", {}, oldest["token"])["parked"]
        assert pr.sismember(parking.PARKED, oldest["lab_id"])
        again = papi.ok("POST", f"/api/labs/{oldest['lab_id']}/park", {}, oldest["token"])
        assert again == {"lab_id": oldest["lab_id"], "parked": False, "state": "parked"}, "it says what happened"
        fifth = papi.lab("ch0", speed=20)
        sockets.append(connect(pstack, fifth))
        # a page that closes its socket (the previous page of a reader) makes room: its lab is parked
        sockets[1].close()
        sixth = papi.lab("ch0", speed=20)
        assert pr.sismember(parking.PARKED, labs[1]["lab_id"])
        assert {fifth["lab_id"], sixth["lab_id"]} <= {e.lab for e in slots.entries(pr)}
    finally:
        for ws in sockets:
            ws.close()


def test_a_lab_its_owner_parked_stays_parked_under_its_open_page_until_the_page_opens_it_again(pstack, papi, pr):
    """ "Park my oldest lab" (the widget at the cap) parks a lab whose page is open in another tab: that page's
    socket, refreshed every WATCH_REFRESH_S, must not resume it on its own, even with room under the cap; an
    owner call (opening its page again) does."""
    lab = papi.lab("ch0", speed=20)
    page = connect(pstack, lab)
    try:
        wait(lambda: parking.watched_now(pr, [lab["lab_id"]]), 10, "the lab watched")
        assert papi.ok("POST", f"/api/labs/{lab['lab_id']}/park", {}, lab["token"])["parked"]
        time.sleep(2 * parking.WATCH_REFRESH_S + 1)  # two rounds of the web process over its open sockets
        assert pr.sismember(parking.PARKED, lab["lab_id"]), "the open page resumed a lab its owner parked"
        assert "lab.resumed" not in event_types(pr, lab["lab_id"])
        papi.snapshot(lab)  # its page opened again: an owner call resumes it
        assert not pr.sismember(parking.PARKED, lab["lab_id"])
        assert not pr.hexists(key(lab["lab_id"], "meta"), parking.OWNER_PARKED)
    finally:
        page.close()


def test_concurrent_patches_never_pass_the_worker_ceiling(pstack, papi, pr):
    """Both labs' pages are open, so neither parks (PARK_AFTER is seconds here) nor counts as quiet: a full
    server would park a quiet lab to make room, and the ceiling would then never be met."""
    labs = [papi.lab("ch7", speed=20) for _ in range(2)]  # ch7: scheduler replicas, no workers
    pages = [connect(pstack, lab) for lab in labs]
    wanted = {"workers": 4, "scheduler_replicas": 4}  # 8 each: one lab may grow to it, not both
    answers: list = []

    def patch(lab: dict) -> None:
        answers.append(papi.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", wanted, lab["token"]))

    try:
        wait(lambda: len(parking.watched_now(pr, [x["lab_id"] for x in labs])) == 2, 10, "both labs watched")
        assert not pr.smembers(PARKED) & {x["lab_id"] for x in labs}
        threads = [threading.Thread(target=patch, args=(lab,)) for lab in labs * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for ws in pages:
            ws.close()
    assert sorted(a.status for a in answers).count(429) >= 1
    reserved = sum(e.processes for e in slots.entries(pr))
    assert reserved <= MAX_WORKERS
    asked = sum(
        int(json.loads(pr.get(key(lab["lab_id"], "settings")))["workers"])
        + int(json.loads(pr.get(key(lab["lab_id"], "settings")))["scheduler_replicas"])
        for lab in labs
    )
    assert asked <= MAX_WORKERS, f"{asked} processes asked for past a ceiling of {MAX_WORKERS}"


def test_a_hundred_concurrent_reservations_from_one_client_take_at_most_its_cap(redis_server):
    """The ledger's one Lua step against the real server: a hundred threads reserve a lab each for one
    client; at most the cap succeed, and the processes of those never pass the ceiling."""
    r = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/9", decode_responses=True)
    r.flushdb()  # a database no stack uses: no pool host is live, so the web ceiling applies
    won: list[str] = []

    def take(i: int) -> None:
        try:
            slots.reserve(r, [(f"lab{i}", 3)], "203.0.113.7", CAP, MAX_WORKERS)
            won.append(f"lab{i}")
        except slots.Refused:
            pass

    threads = [threading.Thread(target=take, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == CAP and sorted(e.lab for e in slots.entries(r)) == sorted(won)
    with pytest.raises(slots.Refused) as refused:  # a fifth lab from another client meets the ceiling
        slots.reserve(r, [("other", 1)], "198.51.100.1", CAP, MAX_WORKERS)
    assert refused.value.kind == "workers" and refused.value.in_use == 3 * CAP == MAX_WORKERS
    r.flushdb()


def test_a_job_held_when_its_lab_parks_comes_back_after_the_resume_ack_late(pstack, papi, pr):
    """Parking stops a busy worker and its work horse; with ack-late the job is sent again at the resume (no lease
    runs out: it is no redelivery) and done: nothing vanishes."""
    lab = papi.lab("ch1", speed=50, workers=1, ack_mode="late", heartbeat=False, vt_seconds=1200)
    page = connect(pstack, lab)  # a page holds it open while the job starts
    papi.workers_ready(lab, 1)
    papi.ok(
        "POST",
        f"/api/labs/{lab['lab_id']}/jobs",
        {"job_type": "thumbnail", "duration_s": 900},
        lab["token"],
        expect=(202,),
    )
    rows = lambda: [json.loads(v) for v in pr.hgetall(key(lab["lab_id"], "workers")).values()]  # noqa: E731
    horse = wait(
        lambda: next((w["horse_pid"] for w in rows() if w.get("horse_pid")), None), 60, "a work horse to run the job"
    )
    page.close()  # the reader leaves while the job runs
    wait(lambda: pr.sismember(parking.PARKED, lab["lab_id"]), 60, "the busy, unwatched lab to be parked")
    wait(
        lambda: not alive(horse) and running_processes(pr, lab["lab_id"]) == 0,
        30,
        "the parked lab's worker and work horse to stop",
    )
    assert pr.hget(key(lab["lab_id"], "job", "1"), "state") == "running"  # held, not lost
    # but its attempt, whose worker was stopped, is over in the record (issue 38): not left "running"
    first = json.loads(pr.hget(key(lab["lab_id"], "job", "1", "attempts"), "1"))
    assert first["outcome"] == "parked" and first.get("end") is not None, first
    ws = connect(pstack, lab)
    try:
        done = wait(
            lambda: pr.hget(key(lab["lab_id"], "job", "1"), "state") == "done" or None,
            120,
            "the job to be sent again after the resume and finish",
        )
        assert done
        assert "job.resumed" in event_types(pr, lab["lab_id"])
        assert "job.redelivered" not in event_types(pr, lab["lab_id"])
        assert "job.lost" not in event_types(pr, lab["lab_id"])
    finally:
        ws.close()


@pytest.mark.parametrize("paused_by_learner", [False, True])
def test_a_resume_between_a_parks_two_steps_wins_and_the_clock_is_left_as_it_was(
    redis_server, monkeypatch, paused_by_learner
):
    """A park takes the lab out of the running set, then pauses its clock; a page that opens it between the two
    resumes it. The clock must then be left as the learner had it (running, or their own pause), with no
    `parked` mark a later resume would act on, and no lab.parked after the lab.resumed. On a database no
    supervisor watches, with the lab's keys written here: the race is too narrow for a whole stack to hit."""
    r = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/13", decode_responses=True)
    r.flushdb()
    lab = "tparkrace"
    r.sadd(LABS, lab)
    r.set(key(lab, "settings"), json.dumps(chapters.settings_for("ch1")))
    r.hset(key(lab, "meta"), "client", "127.0.0.1")
    clock.start(r, lab, speed=20)
    if paused_by_learner:
        clock.pause(r, lab)
    parks = clock.park

    def a_page_opens_meanwhile(r_, lanes, parked_set):
        assert parking.resume(r_, lanes[0], CAP, MAX_WORKERS), "the lab was not parked when the page opened it"
        return parks(r_, lanes, parked_set)

    monkeypatch.setattr(clock, "park", a_page_opens_meanwhile)
    try:
        assert parking.park(r, lab, parking.OWNER_WHY) is False, "a park undone by a resume said it parked"
        state = r.hgetall(key(lab, "clock"))
        assert state["paused"] == ("1" if paused_by_learner else "0"), "the park changed the clock it lost to"
        assert "parked" not in state, "a mark was left for a later resume to act on"
        assert not r.sismember(PARKED, lab)
        kinds = [
            (e["type"], e["data"].get("clock")) for e in (json.loads(f["e"]) for _i, f in r.xrange(key(lab, "events")))
        ]
        assert kinds == [("lab.resumed", "still paused, as it was" if paused_by_learner else "running")], kinds
        monkeypatch.setattr(clock, "park", parks)  # and a park with no page in between still parks
        assert parking.park(r, lab, parking.OWNER_WHY)
        assert r.hget(key(lab, "clock"), "paused") == "1" and r.sismember(PARKED, lab)
        assert parking.resume(r, lab, CAP, MAX_WORKERS)
        assert r.hget(key(lab, "clock"), "paused") == ("1" if paused_by_learner else "0")
    finally:
        r.flushdb()
        r.close()


@pytest.mark.parametrize("paused_by_learner", [False, True])
def test_parks_racing_resumes_leave_the_clock_as_the_learner_had_it(redis_server, paused_by_learner):
    """One thread parks, another resumes, many times over (before: 2 of 2 runs left a resumed lab with its clock
    paused by a park and no mark, which no later resume un-paused). After a last resume the lab runs, its clock
    is as the learner left it with no `parked` mark, its slot is taken, and every park that said it parked was
    undone by a resume that said it resumed. On a database no supervisor watches, with the lab's keys here."""
    r = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/12", decode_responses=True)
    r.flushdb()
    lab, rounds = "tparkrace2", 150
    r.sadd(LABS, lab)
    r.set(key(lab, "settings"), json.dumps(chapters.settings_for("ch1")))
    r.hset(key(lab, "meta"), "client", "127.0.0.1")
    clock.start(r, lab, speed=20)
    if paused_by_learner:
        clock.pause(r, lab)
    said: dict[str, list[bool]] = {"park": [], "resume": []}
    start = threading.Barrier(2)

    def run(name: str, act) -> None:
        start.wait()
        for _ in range(rounds):
            said[name].append(bool(act()))

    threads = [
        threading.Thread(target=run, args=("park", lambda: parking.park(r, lab, parking.OWNER_WHY))),
        threading.Thread(target=run, args=("resume", lambda: parking.resume(r, lab, CAP, MAX_WORKERS))),
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        said["resume"].append(parking.resume(r, lab, CAP, MAX_WORKERS))
        state = r.hgetall(key(lab, "clock"))
        assert not r.sismember(PARKED, lab) and lab in {e.lab for e in slots.entries(r)}
        assert state["paused"] == ("1" if paused_by_learner else "0"), "a resumed lab's clock is the learner's"
        assert "parked" not in state
        # a resume between a park's two steps (the set, then the clock) undoes a park that then says it did not
        # park: so resumes that said so are at least the parks that said so, never fewer
        assert 0 < said["park"].count(True) <= said["resume"].count(True), "each park said so, and was undone"
        kinds = [json.loads(f["e"])["type"] for _i, f in r.xrange(key(lab, "events"))]
        assert kinds.count("lab.parked") == said["park"].count(True)
        assert kinds.count("lab.resumed") == said["resume"].count(True)
    finally:
        r.flushdb()
        r.close()
