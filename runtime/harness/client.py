"""The one HTTP client of the public contract that the tests, the benchmarks and the fault drills share.

urllib, nothing mocked between caller and server; an HTTP error status is an answer, not a raise.
`Api(url, offline_ok=True)` (the drills, which restart servers under it) also turns a refused or cut
connection into status 0 instead of an exception; `Api(url, source="127.0.0.2")` calls from another
loopback address, which a server without a proxy counts as another client.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import redis

from core.keys import key


class HttpError(RuntimeError):
    """A call answered a status its caller did not expect."""


class WaitTimeout(AssertionError, TimeoutError):
    """A condition on a lab did not hold in time (an assertion failure in a test, a timeout elsewhere)."""


class ReaperStalled(AssertionError):
    """The reaper held a lab's clock at a moment it had to act on (a lease deadline, a retry due) and did not act."""


REAPER_STALL_S = 15.0
"""Real seconds a live reaper may hold a lab's clock at one moment before a wait calls it stalled. It acts on
what is due in one supervisor pass (milliseconds, seconds on a swamped box): a clock held longer while the
reaper keeps its barrier alive is a reaper that does not act (a redelivery that would come late never comes),
named at once instead of waiting out the caller's timeout."""


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def data(self) -> Any:
        """The body as JSON (None if empty; the bytes if it is not JSON)."""
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return self.body


class _FromAddress(urllib.request.HTTPHandler):
    """Plain HTTP whose connections leave from one local address."""

    def __init__(self, address: str):
        super().__init__()
        self.address = address

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(http.client.HTTPConnection, req, source_address=(self.address, 0))


class Api:
    """The contract's calls, and the labs this client made (`created`), so a caller can remove them."""

    def __init__(
        self,
        base: str,
        redis_url: str | None = None,
        offline_ok: bool = False,
        timeout: float = 40,
        source: str | None = None,
    ):
        self.base = base
        self.redis_url = redis_url
        self.offline_ok = offline_ok
        self.timeout = timeout
        self.created: list[dict] = []
        self._open = urllib.request.build_opener(_FromAddress(source)).open if source else urllib.request.urlopen

    # --- one request -------------------------------------------------------------------------
    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        headers: dict | None = None,
        raw: bytes | None = None,
        timeout: float | None = None,
    ) -> Response:
        hdrs = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=hdrs)
        try:
            with self._open(req, timeout=timeout or self.timeout) as resp:
                return Response(resp.status, dict(resp.headers), resp.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, dict(e.headers), e.read())
        except OSError as e:
            if not self.offline_ok:
                raise
            return Response(0, {}, json.dumps({"error": type(e).__name__, "detail": str(e)}).encode())

    def ok(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        expect: tuple[int, ...] = (200, 201, 202, 204),
        **kw,
    ) -> Any:
        """The answer's JSON, or HttpError if the status is not one of `expect`."""
        res = self.call(method, path, body, token, **kw)
        if res.status not in expect:
            raise HttpError(f"{method} {path} → {res.status}: {res.body[:300]!r}")
        return res.data

    # --- labs ----------------------------------------------------------------------------------
    def lab(self, preset: str = "ch8", speed: float = 1000, **settings) -> dict:
        """A new lab (remembered in `created`), with `settings` patched on top of its preset."""
        lab = self.ok("POST", "/api/labs", {"preset": preset, "speed": speed}, expect=(201,))
        self.created.append(lab)
        if settings:
            self.ok("PATCH", f"/api/labs/{lab['lab_id']}/settings", settings, lab["token"], expect=(200,))
        return lab

    def delete(self, lab: dict) -> None:
        self.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])
        self.created = [x for x in self.created if x["lab_id"] != lab["lab_id"]]

    def delete_created(self) -> None:
        """Remove every lab this client made (workers, keys and files); one that is already gone is fine."""
        for lab in list(self.created):
            try:
                self.delete(lab)
            except OSError:
                pass

    def snapshot(self, lab: dict) -> dict:
        return self.ok("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"], expect=(200,))

    def wait_for(
        self,
        lab: dict,
        predicate: Callable[[dict], bool],
        timeout: float = 60,
        what: str = "condition not met",
        every: float = 0.1,
        progress: Callable[[dict], object] | None = None,
    ) -> dict:
        """Poll the snapshot until predicate(snapshot) holds; WaitTimeout names the last counts. With the
        server's URL, a clock the reaper holds without acting fails sooner, as ReaperStalled. `progress`: a
        witness of the lab moving towards the predicate (a count, the simulated time); while it changes the wait
        goes on, so `timeout` is how long the lab may stand still, however slowly a loaded box runs it."""
        deadline = time.monotonic() + timeout
        witness: object = None
        held: tuple[float, float] | None = None  # (simulated moment the reaper holds the clock at, since when)
        while True:
            try:
                snap = self.snapshot(lab)
            except HttpError:
                snap = None
            if snap is not None and predicate(snap):
                return snap
            if progress is not None and snap is not None and (now := progress(snap)) != witness:
                witness, deadline = now, time.monotonic() + timeout
            at = self.reaper_holds(lab, snap)
            held = None if at is None else held if held and held[0] == at else (at, time.monotonic())
            if held and time.monotonic() - held[1] > REAPER_STALL_S:
                raise ReaperStalled(
                    f"{what}: the reaper has held the clock at t = {at:.3f} for {REAPER_STALL_S:.0f} real s without "
                    f"acting on what is due there; counts={snap and {k: v for k, v in snap['counts'].items() if v}}"
                )
            if time.monotonic() > deadline:
                counts = snap and {k: v for k, v in snap["counts"].items() if v}
                still = " with no progress" if progress is not None else ""
                workers = snap and snap["workers"]
                raise WaitTimeout(f"{what} within {timeout:.0f} s{still}; counts={counts} workers={workers}")
            time.sleep(every)

    @cached_property
    def _server(self) -> redis.Redis:
        """The stack's server (`redis_url`), opened once for every wait's look at a lab's barriers."""
        return redis.Redis.from_url(self.redis_url or "", decode_responses=True)

    def reaper_holds(self, lab: dict, snap: dict | None) -> float | None:
        """The simulated moment a running clock waits at for the reaper (its lowest barrier, held by the reaper,
        whose barrier its supervisor keeps alive), else None. Needs the server's URL; without it, None."""
        if snap is None or not self.redis_url or snap["clock"]["paused"] or not snap["clock"]["waiting_on_real_work"]:
            return None
        lowest = self._server.zrange(key(lab["lab_id"], "barriers"), 0, 0, withscores=True)
        alive = float(self._server.hget(key(lab["lab_id"], "barrier_alive"), "reaper") or 0)
        if not lowest or lowest[0][0] != "reaper" or alive < time.time():
            return None
        return lowest[0][1]

    def workers_ready(self, lab: dict, n: int, timeout: float = 60) -> dict:
        """Wait until EXACTLY n workers are up: the lab's rows are n, each idle or busy, and each row's process
        has registered with RQ (so it is listening). "At least n" let a test start while a preset's extra
        worker was still draining away after a resize (a job landing on it mid-exit was redelivered), or while
        an added one was still booting. Registrations are matched by pid: a killed worker's stays behind in
        RQ's set until its TTL runs out, so a count of that set is not the lab's workers."""
        r = redis.Redis.from_url(self.redis_url or os.environ["LAB_TEST_REDIS_URL"])
        try:
            deadline = time.monotonic() + timeout
            while True:
                snap = self.snapshot(lab)
                rows = snap["workers"]
                if len(rows) == n and all(w["state"] in ("idle", "busy") for w in rows):
                    workers = r.smembers(f"rq:workers:lab-{lab['lab_id']}")  # each a worker's own key
                    with r.pipeline(transaction=False) as pipe:
                        for worker in workers:
                            pipe.hget(worker, "pid")
                        listening = {int(p) for p in pipe.execute() if p}
                    if all(w["pid"] in listening for w in rows):
                        return snap
                if time.monotonic() > deadline:
                    raise WaitTimeout(
                        f"exactly {n} workers up within {timeout:.0f} s: rows "
                        f"{[(w['id'], w['state'], w['pid']) for w in rows]}"
                    )
                time.sleep(0.05)
        finally:
            r.close()

    def events(self, lab: dict, after: str = "0") -> list[dict]:
        """The whole stream after `after`, through the public GET …/events (which pages by 1000)."""
        out: list[dict] = []
        while True:
            batch = self.ok(
                "GET", f"/api/labs/{lab['lab_id']}/events?after={after}", token=lab["token"], expect=(200,)
            )["events"]
            out += batch
            if len(batch) < 1000:
                return out
            after = batch[-1]["id"]

    # --- jobs and workers ------------------------------------------------------------------------
    def enqueue(self, lab: dict, body: dict, idem: str | None = None) -> Response:
        return self.call(
            "POST",
            f"/api/labs/{lab['lab_id']}/jobs",
            body,
            lab["token"],
            headers={"Idempotency-Key": idem} if idem else None,
        )

    def job(self, lab: dict, job_id: str) -> Response:
        return self.call("GET", f"/api/labs/{lab['lab_id']}/jobs/{job_id}", token=lab["token"])

    def kill(self, lab: dict, worker_id: str) -> Response:
        return self.call("POST", f"/api/labs/{lab['lab_id']}/workers/{worker_id}/kill", {}, lab["token"])
