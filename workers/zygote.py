"""The spares' parent: one process per pool host that loads Python, RQ and the job code once and forks a spare
worker (workers/spare.py) whenever the supervisor asks for one.

A spare started as a fresh interpreter costs about half a second of CPU before it can wait for a lab (the
interpreter, then redis-py, RQ and the job code: `python -X importtime -c "import workers.rqworker"`), and a
host starts one for every worker a lab takes: every lab opened, every killed worker replaced. Forked from this
process, a spare costs a fork: the same loaded modules, shared copy-on-write, in milliseconds. The spare then
runs exactly as one started afresh: its own title (`python -m workers.spare --server … --token …`), its own
connection (this process holds none), its lab's nice level, SIGKILL when its parent dies.

The protocol, one line each way: the supervisor writes `<token> <nice>` to this process's stdin and reads the
spare's pid from the reply pipe; every spare that exits is reaped here at once and a byte written to the exit
pipe, which the supervisor's waker watches as it watches SIGCHLD for its own children (a crashed worker is
looked at at once). This process dies with the supervisor (PR_SET_PDEATHSIG) and its spares with it.

`python -m workers.zygote --server @host:port/db --reply FD --exits FD` (started by `Zygote`, below).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading

REPLY_S = 10.0  # the longest the supervisor waits for a fork's pid before it stops using this process


class Forked:
    """A spare forked by the zygote, as the supervisor holds it: the part of `subprocess.Popen` the pool uses
    (pid, poll, wait, kill, terminate, send_signal), through a pidfd, since the process is not the supervisor's
    child. Its exit status is not known here: `returncode` is -1 once it has exited."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.fd = os.pidfd_open(pid)

    def _exited(self) -> int:
        self.returncode = -1
        os.close(self.fd)
        return self.returncode

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)  # (none if pidfd_open failed)
        if self.returncode is None and fd is not None:  # dropped unwaited (the process lives on): no pidfd kept open
            try:
                os.close(fd)
            except OSError:
                pass

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.fd], [], [], 0)[0]:
            return self._exited()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.fd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"spare {self.pid}", timeout or 0)
            self._exited()
        return -1

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self.fd, sig)
            except ProcessLookupError:
                pass  # exited since the poll: nothing to signal

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """The supervisor's side: starts the process and asks it for spares. If it cannot be started, dies or does not
    answer, the caller stops asking and starts spares as fresh interpreters."""

    def __init__(self, argv: list[str], env: dict[str, str], preexec_fn):
        reply_r, reply_w = os.pipe()
        exits_r, exits_w = os.pipe()
        os.set_blocking(exits_r, False)
        self.exits: int | None = exits_r  # readable when a spare exits (None once the zygote is gone)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "workers.zygote", *argv, "--reply", str(reply_w), "--exits", str(exits_w)],
                env=env,
                stdin=subprocess.PIPE,
                pass_fds=(reply_w, exits_w),
                preexec_fn=preexec_fn,
            )
        finally:
            os.close(reply_w)
            os.close(exits_w)
        self.reply = os.fdopen(reply_r, "rb", buffering=0)

    def fork(self, token: str, nice: int) -> Forked | None:
        """A new spare waiting on `token`, or None if this process no longer answers (the caller stops asking)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(f"{token} {nice}\n".encode())
            self.proc.stdin.flush()
            line = b""
            while not line.endswith(b"\n"):
                if not select.select([self.reply], [], [], REPLY_S)[0]:
                    raise TimeoutError("the zygote did not answer")
                chunk = self.reply.read(64)
                if not chunk:
                    raise EOFError("the zygote exited")
                line += chunk
            return Forked(int(line))
        except (OSError, ValueError, TimeoutError, EOFError):
            return None

    def exited(self) -> bool:
        """Whether any spare exited since the last call (the exit pipe drained). A zygote that died closed the pipe
        and took its spares and workers with it: True, and the pipe is closed here (`exits` None), as its end of
        file would otherwise wake the supervisor's every wait at once."""
        if self.exits is None:
            return False
        seen = False
        try:
            while os.read(self.exits, 512):
                seen = True
            os.close(self.exits)  # (no BlockingIOError: end of file) the zygote is gone
            self.exits, seen = None, True
        except (BlockingIOError, InterruptedError, OSError):
            pass
        return seen

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Its spares die with it (each one's parent-death signal)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.reply):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        try:
            if self.exits is not None:
                os.close(self.exits)
        except OSError:
            pass
        self.exits = None


def _reap(exits: int) -> None:
    """SIGCHLD: reap every spare that exited and tell the supervisor (a byte on the exit pipe)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            os.write(exits, b"x")
        except OSError:
            pass  # the supervisor is gone: this process is being killed with it


def _child(token: str, nice: int, server: str, fds: tuple[int, int]) -> None:
    """In a forked spare: back to a plain process (default SIGCHLD for the horses RQ forks, no protocol fds),
    its title as a spare's, then the spare's own wait for a lab. Never returns into the zygote's loop."""
    from setproctitle import setproctitle

    from workers import spare

    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in fds:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)  # the request pipe is the zygote's, never a spare's
        os.dup2(devnull, 0)
        os.close(devnull)
        spare.prestart(nice)
        setproctitle(f"{sys.executable} -m workers.spare --server {server} --token {token}")
        spare.serve(token)
    except SystemExit as e:  # rq worker exits this way
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    import workers.spare  # noqa: F401  (everything a spare loads: rq.cli, setproctitle, the job code)

    spare = sys.modules["workers.spare"]
    spare.preload()
    if threading.active_count() != 1:  # a fork copies one thread only: a module that started one is not safe here
        sys.exit("workers.zygote: a thread was started while loading the job code; not forking")
    server, reply, exits = (sys.argv[sys.argv.index(flag) + 1] for flag in ("--server", "--reply", "--exits"))
    fds = (int(reply), int(exits))
    signal.signal(signal.SIGCHLD, lambda *_: _reap(fds[1]))
    for line in sys.stdin.buffer:
        token, nice = line.decode().split()
        pid = os.fork()
        if pid == 0:
            _child(token, int(nice), server, fds)
        os.write(fds[0], f"{pid}\n".encode())


if __name__ == "__main__":
    main()
