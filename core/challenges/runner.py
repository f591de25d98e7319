"""The handler's side of the sandbox: the `ctx` a learner's handler is given, and nothing else of the lab.

This file runs inside the sandbox (core/sandbox.py) under the interpreter's `-I -S`, on its own: standard library
only, no import of the project. It is started with two pipes, usually ahead of its attempt (core/challenges/box.py:
by the RQ worker parent, whose next horse takes it); the trusted horse (workers/challenge.py) sends one line
`{"code", "job"}`, which it answers `{"op": "started"}` before any of the handler's code runs, and then answers
each `ctx` call: one JSON line out, one JSON line back. One process runs one attempt. The learner's `print` goes
to `ctx.log`; the process's own stdout and stderr are /dev/null, so nothing but these messages leaves the
sandbox.

The API (shown on the chapter page as it is written here):

    def handle(ctx):                          # one attempt of one job; return to ack, raise to fail it
        ctx.job.id, ctx.job.attempt           # the job, and which delivery of its message this is (1, 2, …)
        ctx.job.idempotency_key, ctx.job.input  # the key the client sent with the job; its payload (a dict)
        video = ctx.media.transcode("360p")   # real ffmpeg on the job's clip, paced on the lab's clock
        ctx.media.transcode("360p", part=2, of=10)  # one tenth of the job's time (the last part's handle is the file)
        ctx.storage.put(name, video)          # publish a file (or text) under `name`; ctx.StorageDown in an outage
        ctx.storage.upload(name, video, parts=12, retry_delay=f)  # 12 parallel part calls, each retried after
                                              #   f(n) simulated s (n = 1, 2, …; None: give up); ctx.StorageDown
        ctx.media.transcode raises ctx.InvalidMedia for an upload that does not decode (a poison pill)
        ctx.storage.get(name)                 # its size in bytes, or None
        ctx.email.send(subject)               # the completion email: every call sends one
        ctx.kv.get(k) · ctx.kv.put(k, v)      # the lab's key-value store (text values)
        ctx.kv.cas(k, expected, new)          # compare-and-set: True if k held `expected` (None: absent)
        ctx.kv.claim(k, ttl)                  # a claim that lapses after ttl simulated s (None: never): a fencing
        ctx.kv.release(k, token)              #   token (1, 2, …) if taken, else None; release with the token
        ctx.lease.extend(seconds)             # push this attempt's lease (its message's visibility) on
        ctx.now()                             # the lab's simulated time
        ctx.log(text)                         # a line in the lab's event log
        return ctx.BACKOFF                    # leave the message in flight: it comes back after its lease
"""

import json
import os
import select
import sys

LOG_LINE_MAX = 500  # characters of one log line (the event is at most 1 kB)
LOG_TOTAL_MAX = 16_000  # characters one attempt may log; the rest is dropped with one note


class StorageDown(Exception):
    """Storage refused the call (the lab's outage fault)."""


class CtxError(Exception):
    """A ctx call the lab refused (a bad argument)."""


class InvalidMedia(Exception):
    """The job's upload does not decode: no retry will change that."""


class _Pipe:
    def __init__(self, rx, tx):
        self.rx, self.tx = rx, tx

    def call(self, _op, **args):
        self.tx.write(json.dumps({"op": _op, "args": args}) + "\n")
        self.tx.flush()
        line = self.rx.readline()
        if not line:
            os._exit(3)  # the work horse is gone: nothing left to do
        reply = json.loads(line)
        if "error" in reply:
            raise {"StorageDown": StorageDown, "InvalidMedia": InvalidMedia}.get(reply["error"], CtxError)(
                reply.get("message", "")
            )
        return reply.get("value")


class _Part:
    def __init__(self, pipe, prefix):
        self._pipe, self._prefix = pipe, prefix

    def _call(self, _op, **args):
        return self._pipe.call(f"{self._prefix}.{_op}", **args)


class Media(_Part):
    def transcode(self, rendition="360p", part=1, of=1):
        """Real ffmpeg on the job's clip: a handle (a dict) storage.put publishes. In parts (`part` of `of`), each
        takes its share of the job's time, so a handler can beat its lease between them."""
        return self._call("transcode", rendition=rendition, part=part, of=of)


class Storage(_Part):
    def put(self, name, data):
        return self._call("put", name=str(name), data=data)

    def get(self, name):
        return self._call("get", name=str(name))

    def upload(self, name, data, parts=1, retry_delay=None, tries=8):
        plans = []
        for _ in range(int(parts)):
            plan = []
            for n in range(1, int(tries)):
                delay = retry_delay(n) if retry_delay else None
                if delay is None:
                    break
                plan.append(float(delay))
            plans.append(plan)
        return self._call("upload", name=str(name), data=data, plans=plans)


class Email(_Part):
    def send(self, subject="Your video is ready"):
        return self._call("send", subject=str(subject))


class Kv(_Part):
    def get(self, k):
        return self._call("get", key=str(k))

    def put(self, k, v):
        return self._call("put", key=str(k), value=None if v is None else str(v))

    def cas(self, k, expected, new):
        return self._call(
            "cas",
            key=str(k),
            expected=None if expected is None else str(expected),
            new=None if new is None else str(new),
        )

    def claim(self, k, ttl=None):
        return self._call("claim", key=str(k), ttl=ttl)

    def release(self, k, token):
        return self._call("release", key=str(k), token=token)


class Lease(_Part):
    def extend(self, seconds):
        return self._call("extend", seconds=seconds)


class Job:
    def __init__(self, job):
        self.id = job["id"]
        self.attempt = job["attempt"]
        self.idempotency_key = job["idempotency_key"]
        self.input = job["input"]


class Ctx:
    BACKOFF = "backoff"
    StorageDown = StorageDown
    CtxError = CtxError
    InvalidMedia = InvalidMedia

    def __init__(self, pipe, job):
        self._pipe = pipe
        self.job = Job(job)
        self.media, self.storage, self.email = Media(pipe, "media"), Storage(pipe, "storage"), Email(pipe, "email")
        self.kv, self.lease = Kv(pipe, "kv"), Lease(pipe, "lease")
        self._logged = 0

    def now(self):
        return self._pipe.call("now")

    def log(self, *parts):
        text = " ".join(str(p) for p in parts)[:LOG_LINE_MAX]
        if self._logged >= LOG_TOTAL_MAX:
            return
        self._logged += len(text)
        if self._logged >= LOG_TOTAL_MAX:
            text = f"(log limit of {LOG_TOTAL_MAX} characters reached: the rest is dropped)"
        self._pipe.call("log", text=text)


class _Printer:
    """sys.stdout and sys.stderr: whole lines go to ctx.log."""

    def __init__(self, ctx):
        self.ctx, self.buf = ctx, ""

    def write(self, s):
        self.buf += str(s)
        if len(self.buf) > 4 * LOG_LINE_MAX:
            self.buf = self.buf[-LOG_LINE_MAX:]
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            self.ctx.log(line)
        return len(s)

    def flush(self):
        pass


def main():
    # the messages go over private copies of stdin and stdout; the numbers 0, 1 and 2 become /dev/null
    rx = os.fdopen(os.dup(0), "r", encoding="utf-8")
    tx = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    # started ahead of its attempt, it waits for it (argv[1] real seconds), then goes unused
    if not select.select([rx], [], [], float(sys.argv[1]))[0]:
        return
    pipe = _Pipe(rx, tx)
    start = json.loads(rx.readline())
    tx.write('{"op": "started"}\n')  # box.STARTED: the attempt is this process's, and none of its code has run
    tx.flush()
    ctx = Ctx(pipe, start["job"])
    sys.stdout = sys.stderr = _Printer(ctx)
    try:
        code = compile(start["code"], "handler.py", "exec")
        scope = {"__name__": "handler"}
        exec(code, scope)
        handle = scope.get("handle")
        if not callable(handle):
            raise NameError("the handler defines no function `handle(ctx)`")
        value = handle(ctx)
        pipe.call("return", value="backoff" if value == Ctx.BACKOFF else "ack")
    except BaseException as e:  # noqa: BLE001 - every way a handler ends is reported to the worker
        import traceback  # only when it raised: its imports are a third of the runner's start

        tb = traceback.extract_tb(e.__traceback__)
        line = next((f.lineno for f in reversed(tb) if f.filename == "handler.py"), getattr(e, "lineno", None))
        pipe.call("raise", type=type(e).__name__, message=str(e)[:300], line=line)


if __name__ == "__main__":
    main()
