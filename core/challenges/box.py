"""The handler box: one attempt of a learner's handler, run in the sandbox and spoken to over its pipes.

`HandlerBox(code, job).run(serve)` runs the attempt on a `Runner`, `runner.py` under core/sandbox.py (the
sandbox every hostile input shares with ffmpeg), and answers each `ctx` message with `serve(op, args)`, the
trusted work horse's side. The runner is usually started ahead (`AHEAD`: by the RQ worker parent while the
attempt before runs, the 60–300 ms of bwrap's and the interpreter's start off the attempt's path); it waits on
its pipe for its one attempt, having run none of the handler's code, and serves no other: one process, one
scratch, one attempt. Its limits are those of a runner started for the attempt: the wait costs no CPU, and the
wall-clock limit counts from the attempt's first line. The handler reaches nothing else: no network (a namespace
of its own), no environment but PATH, no file system but the interpreter's, read-only, and a scratch tmpfs. What
it may use, per attempt (`LIMITS`): CPU seconds, address space, processes, open files, file and scratch bytes, the
length and number of its messages, and `TURN_S` real seconds between a reply and its next message (time inside a
ctx call, a paced transcode, is the lab's, not its).

An attempt ends as an `Outcome`: `ack`, `backoff`, `raised` (the handler's exception: a failed attempt, which the
retry policy decides), or `killed` (a limit or the protocol broken: the run ends with `why`).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from core import procs, sandbox

log = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("runner.py")
LIMITS = sandbox.Limits(
    cpu_s=2, memory_bytes=512 << 20, tasks=16, file_bytes=8 << 20, open_files=64, scratch_bytes=16 << 20
)
SCRATCH = "/scratch"  # the handler's one writable directory (its working directory is / , read-only)
TURN_S = 5.0  # real seconds a handler may run between a ctx reply and its next message
IDLE_S = 4  # real seconds a runner started ahead waits for its attempt, then exits unused (a run's attempts follow
# each other within a few real seconds at the default speed; a test waits this long for a run's last one to go)
STARTED = '{"op": "started"}'  # the runner's first line, once it holds the attempt and before the handler runs
LINE_MAX = 256 * 1024  # bytes of one message
MESSAGES_MAX = 2000  # ctx calls in one attempt
CODE_MAX = 20_000  # characters of a handler


class CtxRefused(Exception):
    """serve()'s answer to a bad ctx call: the handler sees it as ctx.CtxError (or the named error)."""

    def __init__(self, message: str, error: str = "CtxError"):
        super().__init__(message)
        self.error = error


@dataclass
class Outcome:
    kind: str  # ack | backoff | raised | killed
    why: str = ""  # raised: "ValueError: …"; killed: which limit
    line: int | None = None  # raised: the handler's line
    cpu_s: float = 0.0  # the handler's: its sandbox's processes' CPU time from its first line to its end
    start_ms: float = 0.0  # real milliseconds from the start to the handler's first message (or its end)
    calls: list[str] = field(default_factory=list)


def confined() -> str:
    """'' if a handler can be confined on this host, else why not: challenges stay off then."""
    return sandbox.unavailable()


class HandlerBox:
    def __init__(self, code: str, job: dict[str, Any]):
        self.code, self.job = code, job

    def run(self, serve: Callable[[str, dict], Any]) -> Outcome:
        """The attempt, on the runner started ahead for it if there is one (`AHEAD`), else on one started now. A
        runner started ahead that ended before it took the attempt (it waited IDLE_S) gives way to a new one."""
        ahead = AHEAD.take()
        if ahead is not None and (out := self._on(ahead, serve)) is not None:
            return out
        runner = Runner.start()
        if runner is None:  # never reached when `confined()` was asked first; never run unconfined all the same
            return Outcome("killed", "the sandbox cannot be made on this host: handlers stay off")
        return self._on(runner, serve) or Outcome("killed", "the handler's process ended before it started")

    def _on(self, runner: Runner, serve: Callable[[str, dict], Any]) -> Outcome | None:
        """The attempt on this runner; None if the runner ended before it took the attempt."""
        began = time.monotonic()
        end = _End(runner.pid)
        try:
            out = self._talk(runner, end, serve, began)
        finally:
            end.stop()
            runner.tx.close()
            runner.rx.close()
            used = end.wait(None) or 0.0
            runner.reap()
        if out is None:
            return None
        out.cpu_s = max(0.0, used - end.before)
        if out.kind == "killed" and (used >= LIMITS.cpu_s or end.status in (signal.SIGXCPU, 128 + signal.SIGXCPU)):
            out.why = f"the handler used its {LIMITS.cpu_s} s of CPU time (an endless loop?)"
        return out

    def _talk(self, runner: Runner, end: _End, serve: Callable[[str, dict], Any], began: float) -> Outcome | None:
        calls: list[str] = []
        start_ms = 0.0
        if not _send(runner, {"code": self.code, "job": self.job}):
            return None
        reader = _Lines(runner.rx.fileno())
        line, why = reader.next(TURN_S)
        if line != STARTED:  # its own first word, before any of the handler's code has run
            return None if line is None and runner.ahead else Outcome("killed", _ended(end, why or "it did not start"))
        end.started()
        while True:
            line, why = reader.next(TURN_S)
            if not start_ms:
                start_ms = (time.monotonic() - began) * 1000
            if line is None:
                return Outcome("killed", _ended(end, why), calls=calls, start_ms=start_ms)
            try:
                msg = json.loads(line)
                op, args = str(msg["op"]), dict(msg.get("args") or {})
            except (ValueError, KeyError, TypeError):
                return Outcome(
                    "killed",
                    "the handler's process wrote something that is not a ctx message",
                    calls=calls,
                    start_ms=start_ms,
                )
            calls.append(op)
            if op == "return":
                return Outcome("backoff" if args.get("value") == "backoff" else "ack", calls=calls, start_ms=start_ms)
            if op == "raise":
                line_no = args.get("line")
                return Outcome(
                    "raised",
                    f"{str(args.get('type'))[:60]}: {str(args.get('message'))[:300]}",
                    line=line_no if isinstance(line_no, int) else None,
                    calls=calls,
                    start_ms=start_ms,
                )
            if len(calls) > MESSAGES_MAX:
                return Outcome(
                    "killed",
                    f"the handler made more than {MESSAGES_MAX} ctx calls in one attempt",
                    calls=calls,
                    start_ms=start_ms,
                )
            try:
                reply = {"value": serve(op, args)}
            except CtxRefused as e:
                reply = {"error": e.error, "message": str(e)[:300]}
            if not _send(runner, reply):
                return Outcome("killed", _ended(end, "it closed its pipe"), calls=calls, start_ms=start_ms)


@dataclass
class Runner:
    """One sandboxed runner process (runner.py), for exactly one attempt: started ahead of it (then it waits up to
    IDLE_S on its pipe, having used no CPU since its start) or for it. `popen` is its starter's, the process whose
    child it is (a worker parent's, for the one its horse takes): only that process waits for it."""

    popen: subprocess.Popen
    ahead: bool
    starter: int = field(default_factory=os.getpid)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def tx(self) -> IO[bytes]:
        assert self.popen.stdin is not None
        return self.popen.stdin

    @property
    def rx(self) -> IO[bytes]:
        assert self.popen.stdout is not None
        return self.popen.stdout

    @classmethod
    def start(cls, slot: int = 0, ahead: bool = False) -> Runner | None:
        """A runner in its sandbox, started now; None where the sandbox cannot be made."""
        argv, read = sandbox.python(RUNNER)
        box = sandbox.sandboxed(
            [*argv, str(IDLE_S)], read=read, write=None, limits=LIMITS, scratch=SCRATCH, slot=slot, reaped=True
        )
        if not box.confined:
            return None
        proc = box.popen(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        return cls(proc, ahead)

    def detach(self) -> None:
        """Its starter's copies of its pipes closed: the forked horse holds the only ones."""
        self.tx.close()
        self.rx.close()

    def reap(self) -> None:
        """Waited for, by its starter (a horse leaves its worker parent's runner to that parent: `Ahead.settled`)."""
        if self.starter == os.getpid():
            self.popen.wait()

    def discard(self) -> None:
        """Ended and waited for, by its starter: used or not, a runner serves one attempt."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


class Ahead:
    """The runner this process keeps started ahead of the next attempt: an rq worker parent's, which its next
    horse inherits with the fork (`take`) and which the parent lets go of at once (`handed`, so the horse holds
    its only pipes), then ends once the horse has (`settled`). While the horse works, the parent starts the next
    one, in the other uid slot (sandbox.py: the task limit of the attempt running is its own), if the last horse
    ran a challenge attempt: a one-byte page shared across the fork says so. In a plain process (the benchmark),
    `start` then `HandlerBox.run` do the same."""

    def __init__(self) -> None:
        self.ready: Runner | None = None
        self.handed_over: Runner | None = None
        self.wanted = False
        self.slot = 1
        self.used = mmap.mmap(-1, 1)  # MAP_SHARED: a horse's `take` is seen by its parent

    def start(self) -> None:
        """A runner ready for the next attempt (if the one ready has ended, a new one)."""
        if self.ready is not None and self.ready.popen.poll() is None:
            return
        if self.ready is not None:
            self.ready.discard()
        self.slot = 3 - self.slot
        try:
            self.ready = Runner.start(self.slot, ahead=True)
        except OSError as e:  # (no process to spare, say): the next attempt starts its own
            log.warning("no handler runner started ahead: %s", e)
            self.ready = None

    def take(self) -> Runner | None:
        """In the attempt's process: the runner started ahead, given once, and never again."""
        runner, self.ready = self.ready, None
        self.used[0] = 1
        return runner

    def handed(self) -> None:
        """In the worker parent, just after it forked a horse: the runner is the horse's now."""
        runner, self.ready = self.ready, None
        if runner is not None:
            runner.detach()
        self.handed_over = runner
        if self.wanted:
            self.start()

    def settled(self) -> None:
        """In the worker parent, once its horse has ended: the runner it held, ended; another if it was wanted."""
        if self.handed_over is not None:
            self.handed_over.discard()
            self.handed_over = None
        self.wanted, self.used[0] = bool(self.used[0]), 0
        if self.wanted:
            self.start()


AHEAD = Ahead()


def _send(runner: Runner, message: dict) -> bool:
    """One JSON line to the runner; False if its process has closed its end."""
    try:
        runner.tx.write((json.dumps(message) + "\n").encode())
    except BrokenPipeError:
        return False
    return True


class _Lines:
    """Whole lines from a pipe, each within LINE_MAX bytes and TURN_S real seconds."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def next(self, turn_s: float) -> tuple[str | None, str]:
        until = time.monotonic() + turn_s
        while b"\n" not in self.buf:
            if len(self.buf) > LINE_MAX:
                return None, f"it sent a message longer than {LINE_MAX // 1024} kB"
            left = until - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None, f"it ran {turn_s:g} real seconds without a ctx call (the wall-clock limit)"
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None, "its process ended"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        if len(line) > LINE_MAX:
            return None, f"it sent a message longer than {LINE_MAX // 1024} kB"
        return line.decode("utf-8", "replace"), ""


def _ended(end: _End, why: str) -> str:
    """Why the handler's process stopped talking, in a learner's words."""
    if end.wait(0.5) is None:
        return f"the handler was stopped: {why}"
    if end.status in (signal.SIGXCPU, signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL):
        return f"the handler was stopped by a limit (CPU {LIMITS.cpu_s} s, memory {LIMITS.memory_bytes >> 20} MB)"
    return f"the handler's process ended without returning: {why}"


class _End:
    """The end of a runner's sandbox, seen from /proc (a pidfd says when): its process, bwrap, may be another's child
    (a runner started ahead is the worker parent's), which keeps it unreaped until this attempt's horse has ended.

    The CPU time the sandbox used is bwrap's with its children's, once bwrap has ended: it is started
    `sandboxed(reaped=True)`, so its pid 1, a shell, reaps runner.py into itself and is reaped into bwrap, and the
    kernel counts every process of the handler's that the shell, runner.py or another reaped. It does not count
    those still running when the shell ends (the kernel kills and reaps them uncounted), so the attempt ends with
    `stop`: all stopped, every process but runner.py killed and seen dead, then runner.py killed. What the sandbox used
    before runner.py said `started` (bwrap's and the interpreter's start, the wait of a runner started ahead) is
    `before`, not the attempt's."""

    def __init__(self, pid: int):
        self.pid = pid
        self.used: float | None = None
        self.before = 0.0
        self.shell = self.runner = 0  # the sandbox's pid 1 and runner.py, once it has said `started`
        self.status = 0
        try:
            self.fd = os.pidfd_open(pid)
        except ProcessLookupError:  # already reaped (a runner that expired in this very process): nothing to read
            self.used = 0.0

    def started(self) -> None:
        """The handler is about to run: bwrap, its shell and runner.py (no other process yet), and their CPU time."""
        tree = self._tree()
        self.shell, self.runner = (tree[0][0], tree[1][0]) if len(tree) > 1 else (0, 0)
        self.before = procs.cpu_s(self.pid) + sum(procs.cpu_s(pid) for pid, _ in tree)

    def wait(self, timeout: float | None) -> float | None:
        """The CPU seconds the sandbox used, once bwrap has ended (within `timeout`; None: as long as it takes)."""
        if self.used is None and select.select([self.fd], [], [], timeout)[0]:
            status = procs.exit_status(self.pid) or 0
            self.status = os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            self.used = procs.cpu_s(self.pid)
            os.close(self.fd)
        return self.used

    def stop(self) -> None:
        """Every process of the sandbox ended, runner.py's last, each seen dead before its shell ends: the shell
        then ends, and bwrap with it."""
        if self.used is not None:
            return
        stopped: set[int] = set()  # a process sent SIGSTOP forks no more (one forked meanwhile is stopped too)
        while fresh := [(pid, parent) for pid, parent in self._tree()[1:] if pid not in stopped]:
            for pid, parent in fresh:
                _signal(pid, parent, signal.SIGSTOP)
                stopped.add(pid)
        while [pid for pid, parent in self._tree()[1:] if pid != self.runner and _signal(pid, parent, signal.SIGKILL)]:
            pass  # the children of those killed are the shell's now: the next round kills them
        _signal(self.runner, self.shell, signal.SIGKILL)

    def _tree(self) -> list[tuple[int, int]]:
        """(pid, parent) of each process under bwrap, parents first: its shell, runner.py, the handler's others."""
        return procs.tree([self.pid])


def _signal(pid: int, parent: int, sig: int) -> bool:
    """`sig` sent to `pid` if it is alive and still `parent`'s child (not a process given the same pid since); with
    SIGKILL, once it has ended. False if it was not sent."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone (or no pid yet: 0)
        return False
    try:
        if not (procs.alive(pid) and procs.ppid(pid) == parent):
            return False
        signal.pidfd_send_signal(fd, sig)
        if sig == signal.SIGKILL:
            select.select([fd], [], [])  # readable once the process has ended
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)
