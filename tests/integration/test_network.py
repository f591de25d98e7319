"""A class on several machines (issue 30 item 5): the server, the web process and two pool hosts each in a
network namespace of its own (runtime/harness/netns.py: own address, loopback down, no disk shared), started with the
launcher's roles as docs/deploy.md's "More than one machine" says. The server listens on its own address only,
with an ACL user and password per role; jobs, uploads and outputs cross the network through it; the
webhook deliverer on a pool host reaches the web tier at its public address; and the `pool_host_killed`
drill runs there.
"""

from __future__ import annotations

import subprocess

import pytest

from chaos import pool_host_killed
from core import media
from core.keys import owner
from core.procs import cmdline, wait
from runtime.harness import netns
from tests.helpers import enqueue, refusal
from tests.integration.test_api import multipart
from tests.integration.test_delivery import busy_worker
from workers import reconcile


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    why = netns.unavailable()
    if why:
        pytest.skip(f"cannot make network namespaces here: {why}")
    stack = netns.NetStack("net", root=tmp_path_factory.mktemp("net"))
    with stack:
        yield stack


def test_the_server_listens_on_its_own_address_and_each_role_only_with_its_own_password(net):
    addr = net.net.addrs["server"]
    admin = net.redis_client()
    assert admin.config_get("bind")["bind"] == addr, "the server must listen on its namespace's address only"
    assert admin.acl_whoami() == "admin"
    anonymous = f"redis://{addr}:{netns.SERVER_PORT}/0"
    assert "Authentication" in refusal(anonymous, "PING"), "a client with no password must be refused"
    web_as_pool = net.role_url("pool").replace(net.passwords["pool"], net.passwords["web"])
    assert "Authentication" in refusal(web_as_pool, "PING"), "the web's password must not open the pool's user"
    for role in ("web", "pool"):
        for command in (
            ("FLUSHALL",),
            ("ACL", "SETUSER", "default", "on", "nopass"),
            ("KEYS", "*"),
            ("CONFIG", "SET", "requirepass", "x"),
        ):
            if role == "pool" and command[0] == "CONFIG":
                continue  # the pool's supervisor switches keyspace notifications on (see ROLES)
            assert "NoPermission" in refusal(net.role_url(role), *command), f"{role} may run {command[0]}"
    assert refusal(net.role_url("web"), "SET", "net:probe", "1") == "", "the web's own user must write"


def test_an_upload_is_transcoded_on_a_pool_host_and_its_webhook_reaches_the_web_tier(net, tmp_path):
    net.wait_hosts()
    api = net.api(timeout=30)
    lab = api.lab("ch3", speed=200, workers=1, job_duration=20)
    reg = api.call("PUT", f"/api/labs/{lab['lab_id']}/webhook", {"url": "builtin"}, lab["token"])
    assert reg.status == 200, reg.body
    body, headers = multipart("file", "class.mp4", media.generate_clip(tmp_path / "c.mp4", seconds=2).read_bytes())
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", raw=body, headers=headers, token=lab["token"])
    assert res.status == 202, res.body
    job = res.json()["job_id"]
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1, timeout=120, what="the uploaded job to be done")
    host = net.redis_client().get(owner(lab["lab_id"]))
    assert host in net.hosts, f"the lab must run on a pool host of its own namespace, not {host!r}"
    out = next(j for j in snap["jobs"] if j["id"] == job)["outputs"]
    video = api.call("GET", out["240p"], token=lab["token"])  # the web tier serves what another host wrote
    assert video.status == 200
    (tmp_path / "out.mp4").write_bytes(video.body)
    media.probe(tmp_path / "out.mp4")
    arrivals = wait(
        lambda: api.call("GET", f"/api/labs/{lab['lab_id']}/webhook", token=lab["token"]).json()["arrivals"],
        60,
        "the webhook deliverer (a pool host) to reach the web tier's public address",
    )
    assert arrivals[0]["verified"] and arrivals[0]["job_id"] == job


def test_no_process_of_the_class_shows_a_password_on_its_command_line(net):
    """`ps` shows every user of a machine every process's command line. A pool host's rq workers (five: from
    spares, whose title is set in-process, and started afresh), a busy worker's horse, the spares and every
    other process the parts started get the server's URL in their environment only; the reconcile still
    finds the lab's workers and horse, by the server's tag on their command line."""
    net.wait_hosts()
    api = net.api(timeout=30)
    lab = api.lab("ch1", speed=5, workers=5, job_duration=600)
    api.workers_ready(lab, 5)
    horse = busy_worker(api, lab, enqueue(api, lab))["horse_pid"]  # written with the busy state (workers/tasks.py)
    workers = {w["pid"] for w in api.snapshot(lab)["workers"]}
    mine = {
        pid
        for ns in net.net.spaces.values()
        for pid in map(
            int, subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=True).stdout.split()
        )
    }
    assert workers | {horse} <= mine, "the lab's workers and horse must run inside the pool hosts' namespaces"
    found = reconcile.lab_processes(net.role_url("pool"))
    assert {pid: lab["lab_id"] for pid in workers | {horse}}.items() <= found.items(), found
    shown = {pid: cmdline(pid) for pid in mine}
    leaks = {pid: cmd for pid, cmd in shown.items() if any(pw in cmd for pw in net.passwords.values())}
    assert not leaks, f"a password on a command line (ps): {leaks}"
    assert sum("workers.spare" in cmd for cmd in shown.values()) >= 1 and len(shown) >= 12, shown
    api.delete_created()


def test_a_pool_host_killed_across_the_network_loses_no_job(net):
    res = pool_host_killed.run(labs=2, stack=net)
    c = res.counts
    print(
        f"\npool_host_killed across namespaces: kill → last moved lab live {c.get('kill_to_last_lab_live_s')} s "
        f"(lease {c.get('lease_s')} s), {c.get('jobs')} jobs, {c.get('done')} done, {c.get('lost')} lost"
    )
    explain = "\n".join([*res.violations, *res.notes, str(c)])
    assert c["moved"] >= 1 and c["lost"] == 0 and c["done"] == c["jobs"] and c["bad_files"] == 0, explain
    assert res.ok, explain
