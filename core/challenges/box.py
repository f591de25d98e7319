"""The handler box: one attempt of a learner's handler, run in the sandbox and spoken to over its pipes.

`HandlerBox(code, job).run(serve)` starts `runner.py` under core/sandbox.py (the runner every hostile input
shares with ffmpeg) and answers each `ctx` message with `serve(op, args)`, the trusted work horse's side. The
handler reaches nothing else: no network (a namespace of its own), no environment but PATH, no file system but
the interpreter's, read-only, and a scratch tmpfs. What it may use, per attempt (`LIMITS`): CPU seconds, address
space, processes, open files, file and scratch bytes, the length and number of its messages, and `TURN_S` real
seconds between a reply and its next message (time inside a ctx call, a paced transcode, is the lab's, not its).

An attempt ends as an `Outcome`: `ack`, `backoff`, `raised` (the handler's exception: a failed attempt, which the
retry policy decides), or `killed` (a limit or the protocol broken: the run ends with `why`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import sandbox

RUNNER = Path(__file__).with_name("runner.py")
LIMITS = sandbox.Limits(
    cpu_s=2, memory_bytes=512 << 20, tasks=16, file_bytes=8 << 20, open_files=64, scratch_bytes=16 << 20
)
SCRATCH = "/scratch"  # the handler's one writable directory (its working directory is / , read-only)
TURN_S = 5.0  # real seconds a handler may run between a ctx reply and its next message
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
    cpu_s: float = 0.0
    start_ms: float = 0.0  # real milliseconds from the start to the handler's first message (or its end)
    calls: list[str] = field(default_factory=list)


def confined() -> str:
    """'' if a handler can be confined on this host, else why not: challenges stay off then."""
    return sandbox.unavailable()


class HandlerBox:
    def __init__(self, code: str, job: dict[str, Any]):
        self.code, self.job = code, job

    def run(self, serve: Callable[[str, dict], Any]) -> Outcome:
        argv, read = sandbox.python(RUNNER)
        box = sandbox.sandboxed(argv, read=read, write=None, limits=LIMITS, scratch=SCRATCH)
        if not box.confined:  # never reached when `confined()` was asked first; never run unconfined all the same
            return Outcome("killed", "the sandbox cannot be made on this host: handlers stay off")
        began = time.monotonic()
        proc = box.popen(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        reaper = _Reaper(proc)
        try:
            out = self._talk(proc, reaper, serve, began)
        finally:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.stdout.close()
            if reaper.wait(0.5) is None:  # a handler that returned exits at once; one that lingers is killed
                proc.kill()
            cpu = reaper.wait(None) or 0.0
        out.cpu_s = cpu
        if out.kind == "killed" and cpu >= LIMITS.cpu_s:
            out.why = f"the handler used its {LIMITS.cpu_s} s of CPU time (an endless loop?)"
        return out

    def _talk(
        self, proc: subprocess.Popen, reaper: _Reaper, serve: Callable[[str, dict], Any], began: float
    ) -> Outcome:
        assert proc.stdin is not None and proc.stdout is not None
        calls: list[str] = []
        start_ms = 0.0
        try:
            proc.stdin.write((json.dumps({"code": self.code, "job": self.job}) + "\n").encode())
        except BrokenPipeError:
            return Outcome("killed", "the handler's process ended before it started")
        reader = _Lines(proc.stdout.fileno())
        while True:
            line, why = reader.next(TURN_S)
            if not start_ms:
                start_ms = (time.monotonic() - began) * 1000
            if line is None:
                return Outcome("killed", _ended(reaper, why), calls=calls, start_ms=start_ms)
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
            try:
                proc.stdin.write((json.dumps(reply) + "\n").encode())
            except BrokenPipeError:
                return Outcome("killed", _ended(reaper, "it closed its pipe"), calls=calls, start_ms=start_ms)


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


def _ended(reaper: _Reaper, why: str) -> str:
    """Why the handler's process stopped talking, in a learner's words."""
    if reaper.wait(0.5) is None:
        return f"the handler was stopped: {why}"
    if reaper.status in (signal.SIGXCPU, signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL):
        return f"the handler was stopped by a limit (CPU {LIMITS.cpu_s} s, memory {LIMITS.memory_bytes >> 20} MB)"
    return f"the handler's process ended without returning: {why}"


class _Reaper:
    """Waits for the sandbox's process with wait4, so the CPU time of it and its reaped children is known."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.cpu_s: float | None = None
        self.status = 0

    def wait(self, timeout: float | None) -> float | None:
        """The CPU seconds used, once the process has ended (within `timeout`; None: as long as it takes)."""
        until = None if timeout is None else time.monotonic() + timeout
        while self.cpu_s is None:
            pid, status, usage = os.wait4(self.proc.pid, 0 if until is None else os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.status = os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                self.cpu_s = usage.ru_utime + usage.ru_stime
            elif until is None or time.monotonic() >= until:
                break
            else:
                time.sleep(0.005)
        return self.cpu_s
