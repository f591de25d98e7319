"""Chapter 7 on the real stack: scheduler replicas are real processes racing for real Redis locks.

Claims from the lesson, each run for real: with no lock every replica runs every tick; a SET NX EX
lock makes it one run per tick; a lock TTL shorter than a slow run lets the next tick's replica in
while the first still runs; a heartbeat keeps the lock through it; a killed leader is replaced
within its lease; after every replica was down, one catch-up run mails the missed buckets once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from core.engines import shards
from core.engines.scheduler import digest
from tests.helpers import control, readline_within, sched, sim_time_passes, wait_sched

SPEED = 200


def start(api, n: int = 3, speed: float = SPEED, **settings) -> dict:
    """A ch7 lab whose n replicas are all up and ticking; measurements start at the next tick."""
    lab = api.lab("ch7", speed=speed, scheduler_replicas=n, **settings)
    wait_sched(
        api, lab, lambda rep: len(rep["replicas"]) == n and all(x["state"] == "running" for x in rep["replicas"])
    )
    control(api, lab, action="reset")
    return lab


def complete_ticks(rep: dict) -> list[dict]:
    return [t for t in rep["ticks"] if t["tick"] <= rep["last_complete_tick"]]


def events_of(api, lab, type_: str) -> list[dict]:
    return [e for e in api.events(lab) if e["type"] == type_]


def test_without_a_lock_every_replica_runs_every_tick(api):
    lab = start(api, 3, cron_strategy="none", cron_interval=120, cron_task_s=30)
    rep = wait_sched(api, lab, lambda rep: len(complete_ticks(rep)) >= 4)
    runs = [t["runs"] for t in complete_ticks(rep)]
    assert runs and all(n == 3 for n in runs), runs
    assert all(sorted(t["by"]) == ["r1", "r2", "r3"] for t in complete_ticks(rep))
    assert rep["by_strategy"]["none"]["runs_per_tick"] == 3
    assert rep["model"]["no_lock_runs_per_tick"] == 3


def test_a_set_nx_ex_lock_makes_it_one_run_per_tick(api):
    lab = start(api, 3, cron_strategy="lock", cron_interval=120, cron_task_s=45, cron_lock_ttl=120)
    rep = wait_sched(api, lab, lambda rep: len(complete_ticks(rep)) >= 4)
    runs = [t["runs"] for t in complete_ticks(rep)]
    assert runs and all(n == 1 for n in runs), runs
    assert rep["totals"]["overlaps"] == 0
    assert rep["by_strategy"]["lock"]["runs_per_tick"] == 1
    skipped = events_of(api, lab, "cron.skipped")
    assert any("lock held by" in e["data"]["reason"] for e in skipped)


def test_a_slow_run_past_a_short_ttl_overlaps_the_next_holder(api):
    """TTL 30 s, ticks every 60 s, one run of 150 s: the lock is gone by the next tick, so another
    replica takes it and runs while the first still runs; the first's release is then refused."""
    lab = start(api, 3, cron_strategy="lock", cron_interval=60, cron_task_s=40, cron_lock_ttl=30)
    control(api, lab, action="slow", duration_s=150)
    rep = wait_sched(
        api, lab, lambda rep: rep["totals"]["overlaps"] >= 1 and events_of(api, lab, "cron.release_refused")
    )
    overlap = events_of(api, lab, "cron.overlap")[0]
    refused = events_of(api, lab, "cron.release_refused")[0]
    assert overlap["data"]["others"]  # someone was still running
    assert refused["data"]["holder"] != refused["data"]["replica"]
    assert rep["by_strategy"]["lock"]["max_runs"] >= 1


def test_a_plain_delete_frees_the_next_holders_lock(api):
    """The lesson's snippet releases with DEL: the slow run, finishing after its lock expired, deletes
    the lock the next tick's replica now holds."""
    lab = start(api, 3, cron_strategy="lock", cron_interval=60, cron_task_s=40, cron_lock_ttl=30, cron_release="delete")
    control(api, lab, action="slow", duration_s=150)
    wait_sched(api, lab, lambda rep: events_of(api, lab, "cron.foreign_release"))
    freed = events_of(api, lab, "cron.foreign_release")[0]["data"]
    assert freed["holder"] != freed["replica"]
    assert events_of(api, lab, "cron.release_refused") == []


def test_a_heartbeat_keeps_the_lock_through_the_same_slow_run(api):
    lab = start(api, 3, cron_strategy="heartbeat", cron_interval=60, cron_task_s=40, cron_lock_ttl=30)
    control(api, lab, action="slow", duration_s=150)
    rep = wait_sched(
        api,
        lab,
        lambda rep: (
            any("lock held by" in e["data"]["reason"] for e in events_of(api, lab, "cron.skipped"))
            and rep["last_complete_tick"] >= rep["since_tick"] + 5
        ),
    )
    assert rep["totals"]["overlaps"] == 0
    assert events_of(api, lab, "cron.lock_lost") == []
    assert all(t["runs"] <= 1 for t in complete_ticks(rep))


def test_a_killed_leader_is_replaced_within_its_lease(api):
    lab = start(api, 3, cron_strategy="leader", leader_lease=60, cron_interval=60, cron_task_s=10, respawn_delay=3600)
    rep = wait_sched(api, lab, lambda rep: any(x["leader"] for x in rep["replicas"]))
    old = next(x["id"] for x in rep["replicas"] if x["leader"])
    killed = control(api, lab, action="kill", replica="leader")
    assert killed["replica"] == old
    wait_sched(api, lab, lambda rep: any(x["leader"] and x["id"] != old for x in rep["replicas"]))
    evs = api.events(lab)
    t_kill = next(e["t_sim"] for e in evs if e["type"] == "replica.killed" and e["data"]["replica"] == old)
    elected = [e for e in evs if e["type"] == "leader.elected" and e["t_sim"] >= t_kill]
    assert elected and elected[0]["data"]["replica"] != old and elected[0]["data"]["previous"] == old
    # the lease bounds the gap, as the lesson says: a follower holds the clock at the lease's end until it has
    # tried, so neither its poll interval nor its loop's lag is added to it
    assert 0 < elected[0]["t_sim"] - t_kill <= 60 + 0.1
    assert elected[0]["data"]["vacant"] <= 0.1  # taken at the dead lease's expiry, not a poll after it
    failover = sched(api, lab)["failovers"][0]
    assert failover["from"] == old and failover["to"] == elected[0]["data"]["replica"]
    assert failover["gap_s"] == pytest.approx(elected[0]["t_sim"] - t_kill, abs=2)
    # and the new leader alone runs the ticks
    rep = wait_sched(api, lab, lambda rep: rep["last_complete_tick"] >= (elected[0]["t_sim"] // 60) + 3)
    after = [t for t in complete_ticks(rep) if t["tick"] > elected[0]["t_sim"] // 60]
    log = [
        (e["t_sim"], e["type"], e["data"])
        for e in api.events(lab)
        if e["type"].startswith(("leader", "replica", "cron.run_s"))
    ]
    assert after and all(t["runs"] == 1 for t in after), (after, log)


def test_a_leader_renews_its_lease_so_it_alone_runs_each_tick_while_it_lives(api):
    """Lease 600 s, renewed every 200 s: over five ticks (1,500 s, past two leases) the first leader stays
    leader, nobody else is elected, and every tick runs once, by it. (Ticks 1.5 real s apart: a replica's loop
    lag on a busy box never skips one.)"""
    lab = start(api, 3, cron_strategy="leader", leader_lease=600, cron_interval=300, cron_task_s=10)
    rep = wait_sched(api, lab, lambda rep: any(x["leader"] for x in rep["replicas"]))
    leader, since = next(x["id"] for x in rep["replicas"] if x["leader"]), rep["tick"]
    rep = wait_sched(api, lab, lambda rep: rep["last_complete_tick"] >= since + 5)
    ticks = [(t["tick"], t["runs"], t["by"]) for t in complete_ticks(rep) if t["tick"] > since]
    elected = [(e["t_sim"], e["data"]["replica"]) for e in events_of(api, lab, "leader.elected")]
    lost = [(e["t_sim"], e["data"]) for e in events_of(api, lab, "leader.lost")]
    assert len(elected) == 1 and not lost, f"a live leader's lease lapsed: elected {elected}, lost {lost}"
    assert len(ticks) >= 5 and all(runs == 1 and by == [leader] for _t, runs, by in ticks), (
        f"a tick did not run exactly once, by the leader {leader}: {ticks}"
    )


def test_one_missed_tick_is_caught_up_and_a_run_one_interval_on_is_not(api):
    """One replica, ticks every 120 s; one run made slow, 168 s (1.4 intervals): the tick during it is skipped,
    so the next run finds its last run two intervals back (past the lesson's 1.5) and catches that one tick
    up; the slow run and the run after the catch-up each find it one interval back and are not catch-ups."""
    interval = 120
    lab = start(api, 1, cron_strategy="none", cron_interval=interval, cron_task_s=10)
    wait_sched(api, lab, lambda rep: events_of(api, lab, "cron.run_finished"))
    control(api, lab, action="slow", duration_s=1.4 * interval)

    def slow_started() -> list[dict]:
        return [e for e in events_of(api, lab, "cron.run_started") if e["data"]["duration"] == 1.4 * interval]

    wait_sched(api, lab, lambda rep: slow_started())
    slow = slow_started()[0]["data"]["tick"]
    wait_sched(api, lab, lambda rep: rep["last_complete_tick"] >= slow + 3)
    skipped = [e["data"]["tick"] for e in events_of(api, lab, "cron.skipped")]
    assert slow + 1 in skipped, f"the tick during the slow run (tick {slow + 1}) was not skipped: {skipped}"
    catch = {e["data"]["tick"]: e["data"] for e in events_of(api, lab, "cron.catch_up")}
    assert slow + 2 in catch, f"one missed tick (tick {slow + 1}) was not caught up by tick {slow + 2}: {catch}"
    assert catch[slow + 2]["missed"] == 1 and catch[slow + 2]["covered"] == 1, catch[slow + 2]
    assert catch[slow + 2]["ago"] == pytest.approx(2 * interval), catch[slow + 2]
    on_time = sorted({slow, slow + 3} & set(catch))
    assert not on_time, f"a run one interval after the last was taken for a catch-up (ticks {on_time}): {catch}"


def test_after_every_replica_was_down_one_catch_up_run_mails_the_missed_buckets(api, r):
    lab = start(
        api,
        3,
        cron_strategy="lock",
        cron_interval=60,
        cron_task_s=10,
        cron_shard=True,
        shard_buckets=12,
        cron_users=120,
    )
    wait_sched(api, lab, lambda rep: len(events_of(api, lab, "cron.run_finished")) >= 2)
    control(api, lab, action="down", duration_s=330)  # five or six ticks nobody runs
    wait_sched(api, lab, lambda rep: events_of(api, lab, "scheduler.up"))
    t_up = events_of(api, lab, "scheduler.up")[0]["t_sim"]

    # (a lagging process on a loaded machine can miss a tick before the downtime too: count after it)
    def after_up() -> list[dict]:
        return [e for e in events_of(api, lab, "cron.catch_up") if e["t_sim"] >= t_up]

    wait_sched(api, lab, lambda rep: after_up())
    t_catch = after_up()[0]["t_sim"]
    rep = wait_sched(api, lab, lambda rep: rep["last_complete_tick"] >= t_catch // 60 + 3)
    catch = after_up()
    assert len(catch) == 1, catch
    data = catch[0]["data"]
    assert data["missed"] >= 4 and data["ago"] > 1.5 * 60
    assert rep["totals"]["missed_ticks"] >= 4
    # every user whose bucket fell in the downtime got their digest, once; a run the downtime killed
    # part-way had mailed some of its users already, and (not idempotent) the catch-up mails them again
    evs = api.events(lab)
    t_down = next(e["t_sim"] for e in evs if e["type"] == "scheduler.down")
    finished = {e["data"]["tick"] for e in evs if e["type"] == "cron.run_finished"}
    cut = {
        e["data"]["tick"]
        for e in evs
        if e["type"] == "cron.run_started" and e["t_sim"] <= t_down and e["data"]["tick"] not in finished
    }
    emails = r.hgetall(f"lab:{lab['lab_id']}:cron:emails")
    everyone = shards.users(120)
    for t in range(data["tick"] - data["covered"], data["tick"] + 1):
        for u in shards.due_users(t, everyone, 12, True):
            sent = int(emails.get(digest(t, u), 0))
            assert sent >= 1 if t in cut else sent == 1, (t, u, sent, cut)
    if not cut:
        assert rep["totals"]["max_emails_per_user"] == 1


def test_idempotent_digests_make_a_double_run_cost_one_wasted_run(api):
    lab = start(
        api,
        2,
        cron_strategy="none",
        cron_interval=60,
        cron_task_s=10,
        cron_idempotent=True,
        cron_shard=True,
        shard_buckets=12,
        cron_users=120,
    )
    rep = wait_sched(api, lab, lambda rep: len(complete_ticks(rep)) >= 3)
    ticks = complete_ticks(rep)
    assert all(t["runs"] == 2 for t in ticks)
    assert rep["totals"]["max_emails_per_user"] == 1
    assert rep["totals"]["duplicate_emails"] == 0
    # the second run of each tick found every digest already claimed: all its work was wasted
    assert all(t["wasted"] == t["emails"] for t in ticks)


def test_a_day_begun_unsharded_still_owes_each_later_bucket_its_digest_when_idempotent(api):
    """The day's first tick mailed everyone (unsharded); sharding and the idempotent task switched on later
    that day must still mail each later tick's bucket: those digests were never sent. Only a repeat of the
    same tick's digest is a waste."""
    buckets, users = 12, 120
    lab = start(api, 3, cron_strategy="lock", cron_interval=60, cron_task_s=10, shard_buckets=buckets, cron_users=users)

    def day_starts() -> list[int]:
        return [
            e["data"]["tick"]
            for e in events_of(api, lab, "cron.run_finished")
            if e["data"]["tick"] % buckets == 0 and e["data"]["emails"] == users
        ]

    wait_sched(api, lab, lambda rep: day_starts())
    day = day_starts()[0] // buckets
    res = api.call(
        "PATCH", f"/api/labs/{lab['lab_id']}/settings", {"cron_shard": True, "cron_idempotent": True}, lab["token"]
    )
    assert res.status == 200, res.body
    since = control(api, lab, action="reset")["since_tick"]
    rep = wait_sched(api, lab, lambda rep: rep["last_complete_tick"] >= since + 2)
    later = [t for t in complete_ticks(rep) if t["tick"] // buckets == day]
    assert later, (since, day, rep["ticks"])
    everyone = shards.users(users)
    for t in later:
        owed = len(shards.due_users(t["tick"], everyone, buckets, True))
        assert (t["emails"], t["wasted"]) == (owed, 0), (t, owed)
    assert rep["totals"]["max_emails_per_user"] == 1


def test_runs_still_going_at_a_reset_count_for_their_own_tick_not_the_next(api):
    """Unsharded runs of the day's first tick (everyone) still mailing when the learner switches to sharded
    and the count restarts: the digests they go on sending are that tick's, so the next ticks show each
    user one email per replica that ran them (the lesson's figure), no more."""
    n, buckets, users = 3, 2, 120
    # a day of two ticks, and runs of most of a tick at 50×, so the reset lands while they are mailing
    lab = start(
        api,
        n,
        speed=50,
        cron_strategy="none",
        cron_interval=60,
        cron_task_s=50,
        cron_late=0,
        shard_buckets=buckets,
        cron_users=users,
    )

    def mailing_everyone(rep: dict) -> bool:  # a day's first tick, its runs part-way through everyone
        return any(
            t["tick"] % buckets == 0 and t["runs"] == n and 0 < t["emails"] < n * users / 2 for t in rep["ticks"]
        )

    wait_sched(api, lab, mailing_everyone)
    res = api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"cron_shard": True}, lab["token"])
    assert res.status == 200, res.body
    since = control(api, lab, action="reset")["since_tick"]
    rep = wait_sched(api, lab, lambda rep: rep["last_complete_tick"] >= since + 1)
    ticks = [t for t in complete_ticks(rep) if t["tick"] >= since]
    assert ticks and all(t["runs"] == n for t in ticks), ticks
    assert rep["totals"]["max_emails_per_user"] == n, rep["totals"]


@pytest.mark.parametrize("speed", [50, 400])
def test_a_killed_replica_respawns_one_respawn_delay_later_on_the_lab_clock(api, speed):
    """The respawn delay is simulated seconds, like every delay in the lab: the same gap at any speed,
    and no time passes for it while the clock is paused."""
    delay = 120
    lab = api.lab("ch7", speed=speed, scheduler_replicas=2, respawn_delay=delay)
    wait_sched(
        api, lab, lambda rep: len(rep["replicas"]) == 2 and all(x["state"] == "running" for x in rep["replicas"])
    )
    control(api, lab, action="kill", replica="r2")
    clock = f"/api/labs/{lab['lab_id']}/clock"
    assert api.call("POST", clock, {"action": "pause"}, lab["token"]).status == 200
    sim_time_passes(api, speed, 2 * delay)  # twice the delay on a running clock: paused, none of it counts
    assert [x["state"] for x in sched(api, lab)["replicas"] if x["id"] == "r2"] == ["dead"]
    assert api.call("POST", clock, {"action": "resume"}, lab["token"]).status == 200

    def restarts() -> tuple[float, list[float]]:
        evs = api.events(lab)
        killed = next((e["t_sim"] for e in evs if e["type"] == "replica.killed"), None)
        return killed, [
            e["t_sim"]
            for e in evs
            if e["type"] == "replica.started"
            and e["data"]["replica"] == "r2"
            and killed is not None
            and e["t_sim"] > killed
        ]

    deadline = time.monotonic() + 60
    while not (found := restarts())[1]:
        assert time.monotonic() < deadline, "r2 never came back"
        time.sleep(0.1)
    killed, (back, *_) = found
    # not before the delay; after it by at most a few housekeeping ticks (0.1 s real each) of lab time
    assert delay - 1e-3 <= back - killed <= delay + 1.0 * speed, (killed, back)


def test_replicas_die_with_their_lab(api):
    lab = start(api, 2)
    pids = [x["pid"] for x in sched(api, lab)["replicas"]]
    assert all(pids)
    api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{p}") for p in pids):
        assert time.monotonic() < deadline, "replica processes outlived their lab"
        time.sleep(0.1)


def test_bad_input_is_a_clear_4xx(api):
    lab = api.lab("ch7", speed=SPEED)
    path = f"/api/labs/{lab['lab_id']}/schedule"
    assert api.call("POST", path, {"action": "explode"}, lab["token"]).status == 422
    assert api.call("POST", path, {"action": "down", "duration_s": -1}, lab["token"]).status == 422
    assert api.call("POST", path, {"action": "kill", "replica": "r99"}, lab["token"]).status == 404
    assert api.call("POST", path, {"action": "kill", "replica": "leader"}, lab["token"]).status == 409
    assert api.call("POST", path, {"action": "reset"}, lab["view_token"]).status == 403
    assert (
        api.call("PATCH", f"/api/labs/{lab['lab_id']}/settings", {"cron_strategy": "hope"}, lab["token"]).status == 422
    )


def test_replicas_die_with_their_parent(redis_server, r):
    """PR_SET_PDEATHSIG: SIGKILL the process that owns the fleet (no cleanup runs) and its replicas go too."""
    code = (
        "import redis, sys, time\n"
        "from workers.engines.fleet import SchedulerFleet\n"
        "url = sys.argv[1]\n"
        "fleet = SchedulerFleet(redis.Redis.from_url(url, decode_responses=True), url)\n"
        "fleet.reconcile('pdeath', {'scheduler_replicas': 2, 'respawn_delay': 0, 'speed': 20, 'clock_skew': 0})\n"
        "print(' '.join(str(s.proc.pid) for s in fleet.fleets['pdeath'].slots.values()), flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, redis_server.url], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in readline_within(parent, 60, "the replicas' pids").split()]
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{p}") for p in pids):
            assert time.monotonic() < deadline, "a replica outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()
        for k in r.scan_iter("lab:pdeath:*"):
            r.delete(k)


@pytest.mark.parametrize("skew, deposed", [(30, False), (50, True)])
def test_clock_skew_past_the_lease_margin_deposes_a_live_leader(api, skew, deposed):
    """Lease 60 s renewed every 20 s leaves 40 s of margin. r1 leads; r2 joins with its clock `skew`
    ahead and judges r1's lease by it: at 50 s it sees the lease run out between renewals."""
    lab = start(api, 1, cron_strategy="leader", leader_lease=60, cron_interval=60, cron_task_s=5)
    wait_sched(api, lab, lambda rep: rep["leader"]["holder"] == "r1")
    api.call(
        "PATCH", f"/api/labs/{lab['lab_id']}/settings", {"scheduler_replicas": 2, "clock_skew": skew}, lab["token"]
    )
    rep = wait_sched(api, lab, lambda rep: len(rep["replicas"]) == 2 and rep["replicas"][1]["seen_tick"] is not None)
    assert rep["margin"]["leader"]["ok"] is not deposed
    if deposed:
        wait_sched(api, lab, lambda rep: events_of(api, lab, "leader.lost"))
        lost = events_of(api, lab, "leader.lost")[0]["data"]
        assert lost == {"replica": "r1", "holder": "r2"}
    else:
        start_t = rep["now"]
        wait_sched(api, lab, lambda rep: rep["now"] > start_t + 5 * 60)
        assert events_of(api, lab, "leader.lost") == []
        assert sched(api, lab)["leader"]["holder"] == "r1"
