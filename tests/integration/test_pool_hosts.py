"""Several pool hosts and web processes on one server (issue 20), on one machine.

Its own Redis-protocol server, two pool processes (`POOL_HOST_ID` p1, p2, each with its own
VAR_DIR, as two machines would have) and two gunicorn web processes, each with its own data dir
too. Nothing is shared but the server URL. Assertions are about behaviour; the failover time is
printed (and measured for real by `lab.py chaos pool_host_killed`), never asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import websocket

from core import blobs, media
from core.config import Config
from core.hosts import live_hosts
from core.keys import owner
from runtime import embedded_redis
from runtime.harness.client import Api
from runtime.harness.stack import UNLIMITED
from runtime.launcher import gunicorn_command, wait_healthy
from tests.helpers import ws_until
from workers.hosts import HostAgent

LEASE_S = 3.0


@dataclass
class Cluster:
    root: Path
    redis_url: str
    webs: list[subprocess.Popen] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    apis: list[Api] = field(default_factory=list)
    pool: dict[str, subprocess.Popen] = field(default_factory=dict)

    def env(self, role: str) -> dict:
        return dict(
            os.environ,
            REDIS_URL=self.redis_url,
            VAR_DIR=str(self.root / role),
            MAX_LABS="50",
            LAB_IDLE_TTL="3600",
            POOL_LEASE_S=str(LEASE_S),
            **UNLIMITED,
        )

    def start_host(self, host: str) -> subprocess.Popen:
        env = dict(self.env(f"pool-{host}"), POOL_HOST_ID=host)
        proc = self.pool[host] = subprocess.Popen(
            [sys.executable, "-m", "workers.supervisor"], env=env, start_new_session=True
        )  # its own process group
        wait_until(lambda: host in live_hosts(self.client()), 30, f"pool host {host} to register")
        return proc

    def start_web(self) -> None:
        port = embedded_redis.free_port()
        env = dict(self.env(f"web-{len(self.webs)}"), PORT=str(port))
        self.webs.append(subprocess.Popen(gunicorn_command(Config(redis_url=self.redis_url, port=port)), env=env))
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, self.webs[-1:])
        self.urls.append(url)
        self.apis.append(Api(url))

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def owner_of(self, lab: dict) -> str:
        r = self.client()
        wait_until(lambda: r.get(owner(lab["lab_id"])), 30, "the lab to be placed")
        return r.get(owner(lab["lab_id"]))

    def kill_host(self, host: str) -> float:
        """SIGKILL the pool process and its process group, as a power cut would; returns the time."""
        proc = self.pool.pop(host)
        at = time.time()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return at

    def stop(self) -> None:
        for proc in [*self.webs, *self.pool.values()]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.webs, *self.pool.values()]:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL) if proc in self.pool.values() else proc.kill()
                proc.wait()


def wait_until(predicate, timeout: float, what: str, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    server = embedded_redis.start(root / "redis", persist=False)
    c = Cluster(root, server.url)
    try:
        for host in ("p1", "p2"):
            c.start_host(host)
        c.start_web()
        c.start_web()
        yield c
    finally:
        c.stop()
        server.stop()


def ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def events(api: Api, lab: dict, kind: str | None = None) -> list[dict]:
    evs = api.events(lab)
    return [e for e in evs if kind is None or e["type"] == kind]


def jobs_on(api: Api, lab: dict, n: int, duration: float) -> list[str]:
    ids = []
    for i in range(n):
        res = api.call(
            "POST",
            f"/api/labs/{lab['lab_id']}/jobs",
            {"sample": "carphone_pristine" if i % 2 else "bikes", "duration_s": duration},
            lab["token"],
        )
        assert res.status == 202, res.body
        ids.append(res.json()["job_id"])
    return ids


def settled(snap: dict, n: int) -> bool:
    c = snap["counts"]
    return c["done"] + c["dlq"] + c["lost"] >= n and c["running"] == 0 and c["queued"] == 0


def idle_rows(cluster: Cluster, api: Api, lab: dict, n: int, host: str) -> dict:
    return api.wait_for(
        lab,
        lambda s: (
            len([w for w in s["workers"] if w.get("host") == host and w["state"] == "idle" and w.get("pid")]) >= n
        ),
        timeout=60,
    )


def test_labs_spread_over_both_hosts_and_a_kill_reaches_the_owner(cluster):
    a, b = cluster.apis
    labs = []
    for _ in range(4):
        labs.append(a.lab("ch1", speed=200, workers=1))
        cluster.owner_of(labs[-1])  # placed before the next: each placement sees the last one's load
    owners = {lab["lab_id"]: cluster.owner_of(lab) for lab in labs}
    print("placement:", owners)
    assert set(owners.values()) == {"p1", "p2"}, "new labs go to the least-loaded host"
    for lab in labs:
        host = owners[lab["lab_id"]]
        snap = idle_rows(cluster, a, lab, 1, host)
        assert [e["data"]["host"] for e in events(a, lab, "pool.placed")] == [host]
        w = snap["workers"][0]
        # forked by the owner's zygote (workers/zygote.py), the owner's own child
        assert ppid(ppid(int(w["pid"]))) == cluster.pool[host].pid, "the owner's own process runs the lab's worker"
    # a kill sent through either web process reaches the owning host, which SIGKILLs its own child
    for lab, api in zip(labs[:2], (b, a), strict=True):
        w = a.snapshot(lab)["workers"][0]
        res = api.call("POST", f"/api/labs/{lab['lab_id']}/workers/{w['id']}/kill", {}, lab["token"])
        assert res.status == 200, res.body
        assert res.json()["pid"] == int(w["pid"])
        wait_until(lambda pid=int(w["pid"]): not Path(f"/proc/{pid}").exists(), 10, "the worker to die")
        assert events(a, lab, "worker.killed")[-1]["data"]["pid"] == int(w["pid"])
    for lab in labs:
        a.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])


def test_a_killed_host_loses_its_labs_to_a_live_host_and_every_job_completes(cluster):
    a, b = cluster.apis
    # the victim is whichever host the lab was placed on
    lab = a.lab(
        "ch1",
        speed=100,
        workers=2,
        vt_seconds=120,
        heartbeat=True,
        heartbeat_interval=20,
        heartbeat_extend=60,
        max_attempts=10,
        respawn_delay=10,
    )
    victim = cluster.owner_of(lab)
    survivor = next(h for h in cluster.pool if h != victim)
    idle_rows(cluster, a, lab, 2, victim)
    accepted = jobs_on(a, lab, 4, duration=300)
    a.wait_for(lab, lambda s: len([w for w in s["workers"] if w["state"] == "busy" and w.get("horse_pid")]) == 2)
    killed_at = cluster.kill_host(victim)
    moved = wait_until(lambda: events(a, lab, "pool.host_silent"), 30, "the lab to move")
    assert moved[0]["data"] == {"host": survivor, "from_host": victim}
    snap = b.wait_for(lab, lambda s: settled(s, len(accepted)), timeout=120)
    c = snap["counts"]
    assert c["done"] == len(accepted) and c["lost"] == 0 and c["dlq"] == 0, c
    assert c["redelivered"] >= 2, "the dead host's two in-flight jobs came back through their leases"
    evs = events(a, lab)
    lost_workers = [e["worker_id"] for e in evs if e["type"] == "worker.lost"]
    assert len(lost_workers) == 2, "the dead host's workers are narrated as gone with it"
    live_at = min(e["t_real"] for e in evs if e["type"] == "worker.started" and e["t_real"] > killed_at)
    print(
        f"failover: lease {LEASE_S:g} s; kill → lab moved {moved[0]['t_real'] - killed_at:.2f} s; "
        f"kill → first worker on {survivor} {live_at - killed_at:.2f} s"
    )
    assert all(w.get("host") == survivor for w in snap["workers"])
    r = cluster.client()
    for job_id in accepted:  # outputs served by the other web process, decodable
        got = b.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job_id}/outputs/240p.mp4", token=lab["token"])
        assert got.status == 200
        media.probe(
            blobs.save(r, lab["lab_id"], f"transcoded/{job_id}/240p.mp4", cluster.root / "probe" / job_id / "240p.mp4")
        )
    # a kill is answered by the new owner
    w = snap["workers"][0]
    res = b.call("POST", f"/api/labs/{lab['lab_id']}/workers/{w['id']}/kill", {}, lab["token"])
    assert res.status == 200 and res.json()["pid"] == int(w["pid"])
    a.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])
    cluster.start_host("p3")  # two hosts again for the next test


def test_a_graceful_stop_hands_its_labs_over_without_losing_a_job(cluster):
    a, b = cluster.apis
    lab = a.lab(
        "ch1",
        speed=100,
        workers=2,
        vt_seconds=120,
        heartbeat=True,
        heartbeat_interval=20,
        heartbeat_extend=60,
        max_attempts=10,
    )
    leaving = cluster.owner_of(lab)
    idle_rows(cluster, a, lab, 2, leaving)
    accepted = jobs_on(a, lab, 4, duration=200)
    a.wait_for(lab, lambda s: len([w for w in s["workers"] if w["state"] == "busy"]) == 2)
    proc = cluster.pool.pop(leaving)
    proc.terminate()
    assert proc.wait(30) == 0
    handed = wait_until(lambda: events(a, lab, "pool.handover"), 30, "the hand-over")
    assert handed[0]["data"]["from_host"] == leaving and handed[0]["data"]["host"] in cluster.pool
    snap = b.wait_for(lab, lambda s: settled(s, len(accepted)), timeout=120)
    c = snap["counts"]
    assert c["done"] == len(accepted) and c["lost"] == 0 and c["dlq"] == 0, c
    assert c["redelivered"] == 0, "a warm stop lets each busy worker finish its job: none comes back by its lease"
    assert not events(a, lab, "pool.host_silent")
    assert leaving not in live_hosts(cluster.client()), "a stopped host leaves the registry at once"
    a.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])
    cluster.start_host(leaving)


def ws_connect(url: str, lab: dict, after: str):
    ws_url = url.replace("http", "ws") + f"/ws/labs/{lab['lab_id']}?after={after}&token={lab['token']}"
    return websocket.create_connection(ws_url, timeout=30)


def test_two_web_processes_serve_one_labs_sockets_with_exact_resume(cluster):
    a, b = cluster.apis
    lab = a.lab("ch1", speed=200, workers=1)
    ws = ws_connect(cluster.urls[0], lab, "0")
    accepted = jobs_on(b, lab, 3, duration=100)  # enqueued through the other process
    seen = ws_until(ws, lambda evs: any(e["type"] == "job.claimed" for e in evs), what="job.claimed")
    ws.close()
    ws = ws_connect(cluster.urls[1], lab, seen[-1]["id"])  # reconnect to the other web process
    resumed = ws_until(
        ws,
        lambda evs: sum(e["type"] == "job.succeeded" for e in evs) == len(accepted),
        120,
        f"{len(accepted)} job.succeeded",
    )
    ws.close()
    got = [e["id"] for e in seen + resumed]
    all_ids = [e["id"] for e in a.events(lab)]
    assert got == all_ids[: len(got)], "gap or repeat across the reconnect to another web process"
    a.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])


def test_a_hosts_heartbeat_renews_only_its_own_leases_and_reads_every_labs_owner(r):
    """The heartbeat extends this host's leases and reads each lab's owner in one step: another host's lease
    and an unowned lab are read, not touched, and a lease it lost meanwhile is not taken back."""
    agent = HostAgent(r, "t-renew-a", lease_s=3.0, max_workers=10)
    labs = [f"t-renew-{i}" for i in range(3)]
    r.set(owner(labs[0]), "t-renew-a", px=500)
    r.set(owner(labs[1]), "t-renew-b", px=500)
    try:
        assert agent.renew(labs) == {labs[0]: "t-renew-a", labs[1]: "t-renew-b", labs[2]: None}
        assert r.pttl(owner(labs[0])) > 2000, "this host's lease was not extended"
        assert 0 < r.pttl(owner(labs[1])) <= 500, "another host's lease was extended"
        assert not r.exists(owner(labs[2])), "an unowned lab was taken by a renewal"
        assert agent.renew([]) == {}
        many = [f"t-renew-m{i}" for i in range(1203)]  # past one MGET chunk inside the script
        r.set(owner(many[-1]), "t-renew-a", px=500)
        held = agent.renew(many)
        assert len(held) == len(many) and held[many[-1]] == "t-renew-a" and held[many[0]] is None
        assert r.pttl(owner(many[-1])) > 2000
    finally:
        r.delete(*[owner(lab) for lab in labs], owner(f"t-renew-m{1202}"))
