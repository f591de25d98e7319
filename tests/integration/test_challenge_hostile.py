"""Hostile handlers: each ends its own run with a clear error, and what it aimed at stays untouched.

Every handler here is submitted as a learner would (POST …/challenge) and runs on the lab's real workers in the
real sandbox (core/challenges/box.py on core/sandbox.py). Around each run the test measures what the handler
could have hurt: a neighbour lab with a finished job (its counts, its output, a new job it still runs), the hostile
lab's own workers (still up), the server (PING, keys of the neighbour), the host (no process left in a sandbox
uid, the disk's free space) and the run's events (no secret among them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import redis

import chapters
from core import sandbox

CHALLENGE = "effectively-once"
SPEED = 200


def sandbox_processes() -> list[str]:
    """Processes running as a sandbox uid (a root caller's sandboxes; none once every run has ended)."""
    out = subprocess.run(["ps", "-eo", "uid=,pid=,comm="], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if int(line.split()[0]) >= sandbox.SANDBOX_UID_BASE]


def wait_no_sandbox_processes(timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def counts(api, lab: dict) -> dict:
    """A lab's counts, but for `clock_slowed`: the honest clock waits when the host is busy (any lab's work, or
    the other engineers' on this box), which is the host's load, not the neighbour touched."""
    return {k: v for k, v in api.snapshot(lab)["counts"].items() if k != "clock_slowed"}


@pytest.fixture
def neighbour(api):
    """Another lab on the same pool, with one job done before the hostile run starts."""
    lab = api.lab("ch5", speed=SPEED, job_duration=30)
    api.workers_ready(lab, 2)
    job = api.ok(
        "POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "carphone_pristine"}, lab["token"], expect=(202,)
    )
    api.wait_for(lab, lambda s: s["counts"]["done"] == 1, what="the neighbour's job done")
    return lab, job["job_id"]


@pytest.fixture
def hostile(api, stack, neighbour, r):
    """The hostile lab, and the measurement around its run: what must be as it was afterwards."""
    lab = api.lab("ch5", speed=SPEED)
    api.workers_ready(lab, 2)
    other, other_job = neighbour
    before = {
        "counts": counts(api, other),
        "free": shutil.disk_usage(stack.root).free,
        "keys": sorted(r.scan_iter(match=f"lab:{other['lab_id']}:job:*")),
    }
    assert wait_no_sandbox_processes() == []
    yield lab
    assert r.ping()
    assert counts(api, other) == before["counts"], "the neighbour lab changed"
    assert sorted(r.scan_iter(match=f"lab:{other['lab_id']}:job:*")) == before["keys"]
    out = api.call("GET", f"/api/labs/{other['lab_id']}/jobs/{other_job}", token=other["token"]).json()
    assert out["state"] == "done" and out["outputs"], out
    api.ok("POST", f"/api/labs/{other['lab_id']}/jobs", {"sample": "carphone_pristine"}, other["token"], expect=(202,))
    api.wait_for(other, lambda s: s["counts"]["done"] == 2, what="the neighbour still runs a new job")
    snap = api.snapshot(lab)
    rows = snap["workers"]
    # its own lab survives: as many workers as it asks for (the challenge's, once a run has started), each alive
    assert snap["settings"]["workers"] in (2, chapters.CHALLENGES[CHALLENGE]["settings"]["workers"]), snap["settings"]
    assert len(rows) == snap["settings"]["workers"] and all(w["state"] in ("idle", "busy") for w in rows), rows
    assert wait_no_sandbox_processes() == [], "a sandboxed process outlived its run"
    assert abs(shutil.disk_usage(stack.root).free - before["free"]) < 200 << 20, "the disk filled"


def run(api, lab: dict, code: str, timeout: float = 120) -> dict:
    path = f"/api/labs/{lab['lab_id']}/challenge"
    api.ok("POST", path, {"challenge": CHALLENGE, "code": code}, lab["token"], expect=(202,))
    deadline = time.monotonic() + timeout
    while (verdict := api.ok("GET", path, token=lab["token"], expect=(200,)))["state"] not in ("checked", "error"):
        assert time.monotonic() < deadline, f"no verdict within {timeout} s: {verdict}"
        time.sleep(0.2)
    return verdict


def logs(api, lab: dict) -> list[str]:
    events = api.ok("GET", f"/api/labs/{lab['lab_id']}/events?after=0", token=lab["token"], expect=(200,))
    return [e["data"]["text"] for e in events["events"] if e["type"] == "handler.log"]


def test_a_fork_bomb_is_held_to_the_task_limit(api, hostile):
    verdict = run(api, hostile, "import os\ndef handle(ctx):\n    while True:\n        os.fork()\n")
    assert not verdict.get("passed")
    said = verdict.get("error", "") + " ".join(verdict.get("errors", []))
    assert "BlockingIOError" in said or "limit" in said, verdict


def test_an_endless_loop_is_stopped_by_its_cpu_or_wall_clock_limit(api, hostile):
    verdict = run(api, hostile, "def handle(ctx):\n    while True:\n        pass\n")
    assert verdict["state"] == "error", verdict
    assert "CPU" in verdict["error"] or "wall-clock" in verdict["error"], verdict


def test_sleeping_forever_is_stopped_by_the_wall_clock_limit(api, hostile):
    verdict = run(api, hostile, "import time\ndef handle(ctx):\n    time.sleep(10**9)\n")
    assert verdict["state"] == "error" and "wall-clock" in verdict["error"], verdict


def test_a_10_gb_allocation_fails_inside_the_memory_limit(api, hostile):
    verdict = run(api, hostile, "def handle(ctx):\n    x = bytearray(10 * 2**30)\n    ctx.log(len(x))\n")
    assert any(e.startswith("HandlerError: MemoryError") for e in verdict["errors"]), verdict


def test_no_secret_can_be_read_neither_environment_nor_files(api, hostile, stack):
    targets = [
        "/proc/1/environ",
        "/proc/self/environ",
        "/etc/shadow",
        str(stack.root),
        str(stack.var_dir),
        f"/proc/{os.getpid()}/environ",
    ]
    code = (
        "import os\ndef handle(ctx):\n    ctx.log('ENV', dict(os.environ))\n"
        f"    for p in {targets!r}:\n"
        "        try:\n"
        "            got = os.listdir(p) if not p.endswith(('environ', 'shadow')) else open(p, 'rb').read()\n"
        "            ctx.log('READ', p, got)\n"
        "        except Exception as e:\n"
        "            ctx.log('DENIED', p, type(e).__name__)\n"
    )
    run(api, hostile, code)
    said = logs(api, hostile)
    assert said, "the handler logged nothing"
    text = "\n".join(said)
    assert "redis://" not in text and stack.redis_url not in text and "REDIS" not in text, text
    read = [line for line in said if line.startswith("READ")]
    # only the sandbox's own pid 1 and self are there to read, and they hold PATH alone
    assert all(p.split()[1] in ("/proc/1/environ", "/proc/self/environ") for p in read), read
    assert sum(line.startswith("DENIED") for line in said) >= 4, said


def test_no_socket_reaches_the_server_the_web_or_any_address(api, hostile, stack):
    host, port = stack.redis_url.split("//")[1].split("/")[0].rsplit(":", 1)
    web = stack.url.rsplit(":", 1)[1]
    targets = [(host, int(port)), ("127.0.0.1", int(web)), ("1.1.1.1", 53), ("192.0.2.1", 80)]
    clients = redis.Redis.from_url(stack.redis_url).client_list()
    code = (
        "import socket\ndef handle(ctx):\n"
        f"    for t in {targets!r}:\n"
        "        try:\n"
        "            socket.create_connection(tuple(t), timeout=2).close()\n"
        "            ctx.log('CONNECTED', t)\n"
        "        except OSError as e:\n"
        "            ctx.log('REFUSED', t, type(e).__name__)\n"
    )
    run(api, hostile, code)
    said = logs(api, hostile)
    assert not [line for line in said if line.startswith("CONNECTED")], said
    assert sum(line.startswith("REFUSED") for line in said) >= len(targets), said
    assert len(redis.Redis.from_url(stack.redis_url).client_list()) <= len(clients) + 4  # the pool's own, at most


def test_writing_a_gigabyte_fills_only_its_own_scratch(api, hostile):
    code = (
        "def handle(ctx):\n"
        "    for path in ('/scratch/big', '/big', '/tmp/big'):\n"
        "        n = 0\n"
        "        try:\n"
        "            with open(path, 'wb') as f:\n"
        "                while n < 2**30:\n"
        "                    f.write(b'x' * 2**20)\n"
        "                    n += 2**20\n"
        "        except OSError as e:\n"
        "            ctx.log('STOPPED', path, n, type(e).__name__)\n"
    )
    run(api, hostile, code)
    said = [line for line in logs(api, hostile) if line.startswith("STOPPED")]
    assert said, "no write was stopped"
    for line in said:
        _, path, written, _err = line.split()
        assert int(written) <= 16 << 20, line  # the scratch tmpfs's size at most; nothing elsewhere


def test_a_hundred_megabytes_of_output_are_cut_to_the_log_limit(api, hostile):
    code = (
        "import os, sys\ndef handle(ctx):\n    os.write(1, b'x' * 10**8)\n"
        "    for i in range(10**6):\n        print('x' * 100)\n"
    )
    run(api, hostile, code)
    said = logs(api, hostile)
    # 16,000 characters per attempt: at most ~160 lines of 100, per attempt that ran
    assert 0 < sum(len(line) for line in said) <= 16_000 * 8 * 3 + 1000, len(said)


def test_ctypes_system_calls_reach_only_the_sandbox(api, hostile):
    code = (
        "import ctypes, os\ndef handle(ctx):\n    libc = ctypes.CDLL(None)\n"
        "    ctx.log('SETUID', libc.setuid(0), 'UNSHARE', libc.unshare(0x20000000))\n"
        "    libc.kill(-1, 9)\n    ctx.log('ALIVE')\n"
    )
    run(api, hostile, code)
    said = logs(api, hostile)
    assert any(line.startswith("SETUID -1") for line in said), said  # no privilege to take
    # kill(-1) reached every process it could see: only its own sandbox's (the workers, the server and the
    # neighbour are measured by the fixture)
    assert "ALIVE" in said, said


def test_a_syntax_error_answers_422_with_its_line(api, hostile):
    res = api.call(
        "POST",
        f"/api/labs/{hostile['lab_id']}/challenge",
        {"challenge": CHALLENGE, "code": "def handle(ctx):\n    return (\n"},
        token=hostile["token"],
    )
    assert res.status == 422, res.body
    body = res.json()
    assert body["error"] == "syntax_error" and body["verdict"]["line"] == 2, body


def test_an_exception_in_every_attempt_dead_letters_each_job_with_its_error(api, hostile):
    verdict = run(api, hostile, "def handle(ctx):\n    raise ValueError('boom')\n")
    assert verdict["errors"] == ["HandlerError: ValueError: boom (line 2)"], verdict
    done = next(i for i in verdict["invariants"] if i["id"] == "every_job_done")
    assert not done["held"] and "ValueError: boom" in done["counterexample"]["text"], done


def test_a_handler_that_never_calls_ctx_is_checked_and_fails(api, hostile):
    verdict = run(api, hostile, "def handle(ctx):\n    return None\n")
    held = {i["id"]: i["held"] for i in verdict["invariants"]}
    assert held == {"every_job_done": True, "one_output": False, "one_email": False}, verdict
