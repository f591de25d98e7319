"""Least privilege: each role's ACL is an allowlist of the commands it really sends (issue 39).

A stack whose web logs in as `web` and whose pool logs in as `pool` runs a lab end to end (a job transcoded,
a worker killed and its job redelivered, the lab parked, folded and reopened), so the allowlists hold what
the product needs (the full lists were recorded from the integration tests: runtime/harness/command_log.py).
Then each role is refused what only the operator (`admin`) may do: change the server's configuration, flush,
dump or restore keys, drop scripts or functions, list keys by pattern, watch every command.
Before: both roles ran `+@all -@dangerous`, so either could SCRIPT FLUSH, FUNCTION FLUSH or DUMP any key, and
the pool could CONFIG SET maxmemory-policy allkeys-random, a low maxmemory, appendonly no or maxclients 1.
"""

from __future__ import annotations

import pytest

from core.keys import key
from core.procs import wait
from runtime.harness.stack import Stack
from tests.helpers import refusal

REFUSED = [
    ("CONFIG", "SET", "maxmemory-policy", "allkeys-random"),
    ("CONFIG", "SET", "maxmemory", "1mb"),
    ("CONFIG", "SET", "appendonly", "no"),
    ("CONFIG", "SET", "save", ""),
    ("CONFIG", "SET", "maxclients", "1"),
    ("CONFIG", "SET", "notify-keyspace-events", ""),
    ("CONFIG", "REWRITE"),
    ("CONFIG", "RESETSTAT"),
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("SCRIPT", "FLUSH"),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "DELETE", "x"),
    ("DUMP", "labs"),
    ("RESTORE", "x", "0", "\x00"),
    ("KEYS", "*"),
    ("MIGRATE", "127.0.0.1", "1", "x", "0", "1"),
    ("ACL", "SETUSER", "default", "on", "nopass"),
    ("ACL", "LIST"),
    ("SHUTDOWN",),
    ("MONITOR",),
    ("CLIENT", "KILL", "TYPE", "normal"),
    ("CLIENT", "LIST"),
    ("REPLICAOF", "127.0.0.1", "1"),
    ("SAVE",),
    ("BGSAVE",),
    ("SWAPDB", "0", "1"),
    ("MODULE", "LIST"),
    ("OBJECT", "ENCODING", "labs"),
]


@pytest.fixture(scope="module")
def roles(tmp_path_factory):
    with Stack("acl", root=tmp_path_factory.mktemp("acl"), roles=True, env={"PARKED_MEMORY": "1"}) as s:
        yield s


def test_each_role_runs_the_product_with_its_allowlist_alone(roles):
    api = roles.api()
    r = roles.redis_client()
    assert r.acl_whoami() == "admin"
    lab = api.lab("ch1", speed=200, workers=2, vt_seconds=30, job_duration=120)
    api.workers_ready(lab, 2)
    job = api.enqueue(lab, {"sample": "carphone_pristine", "duration_s": 120}).json()["job_id"]
    busy = api.wait_for(lab, lambda s: any(w["state"] == "busy" for w in s["workers"]), 60, "a worker to take it")
    worker = next(w for w in busy["workers"] if w["state"] == "busy")
    assert api.kill(lab, worker["id"]).status == 200
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 1, 120, "the killed worker's job to be done")
    assert snap["counts"]["redelivered"] >= 1 and any(j["id"] == job for j in snap["jobs"])
    api.ok("POST", f"/api/labs/{lab['lab_id']}/park", token=lab["token"])
    wait(lambda: r.sismember("labs:archived", lab["lab_id"]), 60, "the pool (as `pool`) to fold the parked lab")
    assert "asyncworklab_labs_folded 1" in api.call("GET", "/metrics").body.decode()  # /metrics as `web`
    again = api.ok("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"])  # the web (as `web`) unfolds it
    assert again["counts"]["done"] == 1 and r.exists(key(lab["lab_id"], "events"))
    api.delete_created()


@pytest.mark.parametrize("role", ["web", "pool"])
def test_no_role_but_admin_may_change_the_server_flush_dump_or_list_keys(roles, role):
    url = roles.role_url(role)
    for command in REFUSED:
        assert "NoPermission" in refusal(url, *command), f"{role} may run {' '.join(command[:3])}"
    assert refusal(url, "SET", "acl:probe", "1") == "", f"{role} must still write"
    assert refusal(roles.redis_url, "CONFIG", "SET", "maxclients", "10000") == "", "the admin may"
