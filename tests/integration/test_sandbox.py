"""The sandbox every ffmpeg runs in (core/sandbox.py), proven from inside it.

A small probe program (this Python, `-I -S`, under /usr like any system binary) runs through the very runner
and limits ffmpeg runs with (`sandbox.sandboxed(…, limits=media.SANDBOX)`), while this process holds what a work
horse holds: the server's URL with a role's password in its environment, a server with an ACL file on
127.0.0.1. Each attempt that must fail inside is first shown to succeed outside, so a test cannot pass because
its target was missing; and after each test the server still answers PING with the keys it had.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis

from core import media, sandbox, seccomp
from core.procs import children, cmdline, wait
from runtime import embedded_redis

PYTHON = os.path.realpath(sys.executable)  # the interpreter itself (-I -S: no venv, no site)
PYTHON_HOME = Path(sys.base_prefix)  # its binary and standard library, bound read-only (under /usr: there anyway)
PASSWORD = "s3cret-pool-password"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real server with an ACL (a users file next to its data), the pool role's password set."""
    srv = embedded_redis.start(
        tmp_path_factory.mktemp("sandbox-server"), persist=False, users={"admin": "admin-pw", "pool": PASSWORD}
    )
    client = redis.Redis.from_url(srv.url)
    client.set("sandbox:canary", "1")
    client.close()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def untouched(server, monkeypatch):
    """This process holds what a work horse does; the server is as it was afterwards."""
    monkeypatch.setenv("REDIS_URL", server.role_url("pool"))
    monkeypatch.setenv("RQ_REDIS_URL", server.role_url("pool"))
    client = redis.Redis.from_url(server.url)
    keys, clients = client.dbsize(), len(client.client_list())
    yield
    assert client.ping()
    assert client.dbsize() == keys and client.get("sandbox:canary") == b"1"
    assert len(client.client_list()) == clients  # nobody connected from inside and stayed
    client.close()


def inside(
    code: str, write: Path | None = None, read: tuple[Path, ...] = (), limits: sandbox.Limits = media.SANDBOX
) -> dict:
    """Run `code` (which sets `out`, a dict) in the sandbox; its `out` as JSON."""
    assert sandbox.unavailable() == "", sandbox.unavailable()
    prog = "import json, os, sys\nout = {}\n" + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    box = sandbox.sandboxed([PYTHON, "-I", "-S", "-c", prog], read=[PYTHON_HOME, *read], write=write, limits=limits)
    assert box.confined
    proc = box.run(capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def attempt(expr: str) -> str:
    """Probe code: out[expr] = 'ok' or the error's name."""
    return f"""
try:
    {expr}
    out[{expr!r}] = "ok"
except BaseException as e:
    out[{expr!r}] = type(e).__name__
"""


def host_address() -> str:
    """This machine's address on its default route (another address than loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
        return s.getsockname()[0]


def test_no_network_neither_the_server_nor_another_address(server):
    other = host_address()
    assert other != "127.0.0.1"
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    targets = [("127.0.0.1", server.port), (other, port)]
    for target in targets:  # both answer from here
        socket.create_connection(target, timeout=5).close()
    code = "import socket\n" + "".join(attempt(f"socket.create_connection({t!r}, timeout=5).close()") for t in targets)
    got = inside(code)
    listener.close()
    assert got and all(v != "ok" for v in got.values()), got
    assert set(got.values()) <= {"ConnectionRefusedError", "OSError", "TimeoutError"}, got


def test_no_secret_in_the_environment_nor_on_disk(server, tmp_path):
    acl = server.data_dir / "users.acl"
    var = tmp_path / "var"
    (var / "labs").mkdir(parents=True)
    (var / "labs" / "secret").write_text(PASSWORD)
    # A process started with the secret. Its first line says its exec is done: between fork and exec the kernel
    # shows an empty environ (CI read b"" from a /bin/sleep read too soon).
    horse = subprocess.Popen(
        [sys.executable, "-c", "print(flush=True); import time; time.sleep(120)"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
    )
    assert horse.stdout and horse.stdout.readline() == b"\n"
    me = f"/proc/{horse.pid}/environ"  # its environment, as the kernel keeps it
    for path in (acl, var / "labs" / "secret", Path(me)):
        assert path.read_bytes()  # readable from here (/proc/1/environ may not be: inside, pid 1 is bwrap's)
    assert PASSWORD.encode() in Path(me).read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    code = "out['env'] = dict(os.environ)\n" + "".join(
        attempt(f"open({str(p)!r}, 'rb').read()") for p in (acl, var / "labs" / "secret", "/proc/1/environ", me)
    )
    code += attempt(f"os.listdir({str(var)!r})") + attempt(f"os.listdir({str(server.data_dir)!r})")
    got = inside(code, write=out)
    horse.kill()
    horse.communicate()
    env = got.pop("env")
    assert env["PATH"] == sandbox.PATH and set(env) <= {"PATH", "PWD", "LC_CTYPE"}, env  # PWD: bwrap's chdir;
    assert not any(PASSWORD in v or str(server.port) in v for v in env.values())  # LC_CTYPE: Python's own
    assert got and all(v != "ok" for v in got.values()), got


SYSCALLS = """
import ctypes, errno, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    return "ok" if libc.syscall(*args) >= 0 else errno.errorcode[ctypes.get_errno()]
out["unshare(CLONE_NEWUSER)"] = call(272, 0x10000000)
out["ptrace(PTRACE_TRACEME)"] = call(101, 0, 0, 0, 0)
out["keyctl(KEYCTL_GET_KEYRING_ID)"] = call(250, 0, -3, 0)
out["io_uring_setup"] = call(425, 1, None)
out["bpf"] = call(321, 0, None, 0)
"""
STILL = """
pid = os.fork()
if pid == 0:
    os._exit(0)
out["fork"] = os.waitpid(pid, 0)[1]
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
out["thread"] = 0
out["spawn"] = subprocess.run(["/bin/true"]).returncode
"""


@pytest.mark.skipif(not seccomp.program(), reason="the filter is written for x86-64")
def test_system_calls_an_escape_starts_from_are_refused_and_processes_still_start():
    """Each call reaches the kernel outside (no EPERM there); inside, the filter answers EPERM for each, while
    fork, threads and a subprocess (clone3 refused: the C library falls back to clone) still work."""
    probe = "import json, os\nout = {}\n" + textwrap.dedent(SYSCALLS) + "\nprint(json.dumps(out))\n"
    outside = json.loads(subprocess.run([PYTHON, "-I", "-S", "-c", probe], capture_output=True, text=True).stdout)
    assert "EPERM" not in outside.values(), outside
    got = inside(SYSCALLS + STILL)
    assert got == {**{call: "EPERM" for call in outside}, "fork": 0, "thread": 0, "spawn": 0}, got


def test_writes_only_its_directory_and_within_the_file_size_limit(tmp_path):
    out, beside = tmp_path / "out", tmp_path / "beside"
    out.mkdir()
    beside.mkdir()
    limit = media.SANDBOX.file_bytes
    code = (
        attempt(f"open({str(out / 'ok.txt')!r}, 'w').write('x')")
        + attempt(f"open({str(beside / 'no.txt')!r}, 'w').write('x')")
        + attempt("open('/tmp/no.txt', 'w').write('x')")
        + attempt("open('/usr/no.txt', 'w').write('x')")
        # sparse: one byte at the last offset the limit allows, then one past it
        + attempt(f"f = open({str(out / 'edge.bin')!r}, 'wb'); f.seek({limit - 1}); f.write(b'x'); f.close()")
        + attempt(f"f = open({str(out / 'big.bin')!r}, 'wb'); f.seek({limit}); f.write(b'x'); f.close()")
    )
    got = inside(code, write=out)
    values = list(got.values())
    assert values[0] == "ok" and values[4] == "ok", got
    assert values[1] != "ok" and values[2] != "ok" and values[3] != "ok", got
    assert values[5] == "OSError", got  # EFBIG (Python ignores SIGXFSZ)
    assert (out / "ok.txt").read_text() == "x" and (out / "edge.bin").stat().st_size == limit
    assert (out / "big.bin").stat().st_size == 0
    assert list(beside.iterdir()) == [] and not Path("/usr/no.txt").exists()


def test_a_fork_bomb_and_a_memory_hog_are_stopped(tmp_path):
    code = f"""
import time
n = 0
try:
    while n < 10000:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    out['fork'] = 'ok'
except OSError as e:
    out['fork'] = type(e).__name__
out['forked'] = n
try:
    small = bytearray(64 << 20)
    out['small'] = 'ok'
    hog = bytearray({media.SANDBOX.memory_bytes})
    out['hog'] = 'ok'
except MemoryError:
    out['hog'] = 'MemoryError'
"""
    got = inside(code)  # returns although its children sleep: they die with the sandbox's pid namespace
    assert got["fork"] == "BlockingIOError", got  # EAGAIN: RLIMIT_NPROC
    assert 0 < got["forked"] < media.SANDBOX.tasks, got
    assert got["small"] == "ok" and got["hog"] == "MemoryError", got
    assert sandbox.SANDBOX_UID_BASE + os.getpid() not in sandbox_uids(), "the bomb's children outlived it"


def test_a_cpu_hog_is_killed_at_its_cpu_limit():
    box = sandbox.sandboxed(
        [PYTHON, "-I", "-S", "-c", "while True: pass"],
        read=[PYTHON_HOME],
        write=None,
        limits=sandbox.Limits(1, media.SANDBOX.memory_bytes, 8, 1 << 20, 16),
    )
    proc = box.run(capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0  # SIGXCPU, then SIGKILL (bwrap reports the signal as its exit status)


def sandbox_uids() -> set[int]:
    """The uids of live processes running as a sandbox uid (a root caller's run as ≥ SANDBOX_UID_BASE)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = int(next(ln for ln in status.read_text().splitlines() if ln.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if uid >= sandbox.SANDBOX_UID_BASE:
            found.add(uid)
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox uid is a root caller's")
def test_a_killed_caller_takes_its_sandbox_with_it(tmp_path):
    caller = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import time
        from core import sandbox
        from core import media
        box = sandbox.sandboxed(["/bin/sleep", "300"], read=[], write=None, limits=media.SANDBOX)
        proc = box.popen()
        print(proc.pid, flush=True)
        time.sleep(300)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(sandbox.__file__).parent.parent,
    )
    bwrap_pid = int(caller.stdout.readline())
    uid = sandbox.SANDBOX_UID_BASE + caller.pid
    deadline = time.monotonic() + 30
    while uid not in sandbox_uids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid in sandbox_uids()  # the sleep runs, as the caller's sandbox uid
    os.kill(caller.pid, signal.SIGKILL)
    caller.wait()
    deadline = time.monotonic() + 30
    while (uid in sandbox_uids() or Path(f"/proc/{bwrap_pid}").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid not in sandbox_uids() and not Path(f"/proc/{bwrap_pid}").exists()


def test_a_sandbox_left_by_a_starter_that_died_as_it_started_is_swept_and_a_live_one_is_not():
    """bwrap's race (containers/bubblewrap#633) leaves our bwrap's child to init, blocked for good: here one is made
    that way on purpose, beside a sandbox whose starter lives. The starter forks, says the child's pid and exits;
    the child waits until it is init's, then becomes bwrap (a shell's `bwrap … &` raced: a bwrap that set its
    parent-death signal before the shell exited died with it, and no orphan was left to find)."""
    bwrap = sandbox._bwrap()
    starter = textwrap.dedent(f"""
        import os, time
        parent = os.getpid()
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            os._exit(0)
        while os.getppid() == parent:
            time.sleep(0.01)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv({bwrap!r}, [{bwrap!r}, "--ro-bind", "/", "/", "--die-with-parent", "/bin/sleep", "300"])
    """)
    orphan = int(subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, check=True).stdout)
    live = subprocess.Popen([bwrap, "--ro-bind", "/", "/", "--die-with-parent", "/bin/sleep", "300"])
    try:
        deadline = time.monotonic() + 30
        while orphan not in sandbox.orphans() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert orphan in sandbox.orphans() and live.pid not in sandbox.orphans()
        # its command started (set to die with it): a sweep before that could leave the command behind
        wait(lambda: [p for p in children(orphan) if "sleep" in cmdline(p)], 30, "the orphan's command")
        assert sandbox.sweep_orphans() >= 1
        deadline = time.monotonic() + 30
        while Path(f"/proc/{orphan}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{orphan}").exists(), "the orphaned sandbox is still there"
        assert live.poll() is None, "a sandbox whose starter lives was killed"
    finally:
        live.kill()
        live.wait()
        if Path(f"/proc/{orphan}").exists():
            os.kill(orphan, signal.SIGKILL)


def test_a_real_transcode_through_the_sandbox_decodes(tmp_path):
    src = media.sample_clip()
    outputs = [(tmp_path / "out" / "240p.mp4", 240), (tmp_path / "out" / "144p.mp4", 144)]
    proc = media.start_transcodes(src, outputs)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    media.thumbnail(src, tmp_path / "out" / "thumb.jpg")
    for dst, _h in outputs:
        media.probe(dst)
        assert media.duration_of(dst) == pytest.approx(media.duration_of(src), abs=0.1)  # progress read on a pipe
    assert (tmp_path / "out" / "thumb.jpg").read_bytes()[:2] == b"\xff\xd8"  # a JPEG
    with pytest.raises(media.InvalidMedia):  # and a hostile file still gets ffmpeg's reason back
        bad = tmp_path / "bad.mp4"
        bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(4096))
        media.check_upload(bad)
