"""Webhook delivery: one signed POST per finished job to the lab's callback URL, retried with full jitter.

It runs in background threads of the pool supervisor (see Deliverer), not in the web process and not
inside the supervisor's reaper tick. Not the web process: its connections are budgeted for sockets and held
long-polls, and an outbound call to a slow customer endpoint would sit on one. Not the tick: the
reaper's pass bounds how late a lease is redelivered, so it must never wait on someone else's
server. The thread tails each lab's event stream from a cursor, so a finished job
becomes a message exactly once (the message id is derived from the event id, and creating it is a
SETNX), and every try is claimed by one compare-and-set on its due time, so two deliverers never
send the same try.

Delivery is at-least-once, as the lesson says: a receiver that processed a message but answered 500
gets it again with the same `webhook-id`, which is how a receiver de-duplicates. Redirects are never
followed and the target is resolved and checked again on every try (DNS can change after
registration); the connection goes to the address that was checked. A try is claimed with a short
lease rather than removed, so a supervisor killed mid-send leaves the try to come back, not vanish.
The face both processes share (state keys, readers, commands) is core/engines/webhooks.py.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

import redis

from core import clock, registry, stream
from core.broker import retry
from core.config import Config
from core.engines.webhooks import BUILTIN, REGISTERED, due, hook, messages, receiver_path
from core.keys import LABS
from core.webhook_targets import TargetRefused, sign, validate_target

TRIGGERS = {"job.succeeded": "job.done", "job.dead_lettered": "job.dead", "job.lost": "job.lost"}
TIMEOUT_S = 3.0  # real seconds one try may take: a slow receiver fails the try, it does not stall the queue
LOOP_S = 0.05  # real seconds between ticks while some lab has a webhook registered
RESCAN_S = 5.0  # real seconds between looks for registrations a missed announcement would hide
TRY_LEASE_S = 30.0  # a try whose deliverer died mid-send is due again after this (real seconds)
# Claim a due try by pushing its due time past the lease, only if it is still due: one deliverer wins,
# and a deliverer that dies mid-send leaves it to come back (at-least-once, with the same webhook-id).
_LEASE_TRY = """
local tries = KEYS[1]
local msg_id, now, leased_until = ARGV[1], ARGV[2], ARGV[3]
local due = redis.call('ZSCORE', tries, msg_id)
if not due or tonumber(due) > tonumber(now) then return 0 end
redis.call('ZADD', tries, leased_until, msg_id)
return 1
"""


def collect(r: redis.Redis, lab: str, reg: dict, now: float) -> int:
    """Turn terminal job events after the cursor into messages due `now` (lab time); returns how many were new."""
    batch = stream.read_after(r, lab, reg.get("cursor") or "0", count=500)
    if not batch:
        return 0
    made = 0
    with r.pipeline(transaction=True) as pipe:
        for ev in batch:
            kind = TRIGGERS.get(ev["type"])
            j = registry.read_job(r, lab, ev["job_id"]) if kind else None
            if j is None:
                continue
            msg_id = f"msg_{lab}_{ev['id'].replace('-', '_')}"
            body = {
                "type": kind,
                "timestamp": datetime.fromtimestamp(ev["t_real"], UTC).isoformat(),
                "data": {
                    **registry.status_body(j, lab),
                    "status": "done" if kind == "job.done" else j["state"],
                    "lab_id": lab,
                    "completed_at": ev["t_real"],
                    "t_sim": ev["t_sim"],
                },
            }
            record = {
                "msg_id": msg_id,
                "type": kind,
                "job_id": ev["job_id"],
                "state": "pending",
                "tries": [],
                "body": json.dumps(body, separators=(",", ":")),
                "created": time.time(),
            }
            pipe.hsetnx(messages(lab), msg_id, json.dumps(record))
            pipe.zadd(due(lab), {msg_id: now}, nx=True)
            made += 1
        pipe.hset(hook(lab), "cursor", batch[-1]["id"])
        pipe.execute()
    return made


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to the address that passed the SSRF check, with SNI and certificate checks for the host name."""

    def __init__(self, hostname: str, addr: str, port: int, timeout: float):
        super().__init__(hostname, port, timeout=timeout, context=ssl.create_default_context())
        self.addr = addr

    def connect(self) -> None:
        raw = socket.create_connection((self.addr, self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)


def post(url: str, addrs: list[str], headers: dict, body: bytes) -> int:
    """One POST, no redirects followed (http.client never follows them); returns the status."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    if https:
        conn = (
            _PinnedHTTPS(parts.hostname, addrs[0], port, TIMEOUT_S)
            if addrs
            else http.client.HTTPSConnection(parts.hostname, port, timeout=TIMEOUT_S)
        )
    else:
        conn = http.client.HTTPConnection(addrs[0] if addrs else parts.hostname, port, timeout=TIMEOUT_S)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", path, body=body, headers={**headers, "Host": parts.netloc})
        resp = conn.getresponse()
        resp.read(65536)
        return resp.status
    finally:
        conn.close()


class Deliverer:
    """The supervisor's delivery thread (see the module docstring for why it lives there). It only tails the
    streams and hands each lab with tries due to a *turn* of its own: a thread that sends that lab's due
    tries in order. One lab has at most one turn at a time, and at most CONCURRENT_TRIES turns run at once
    across all labs, so a lab whose target is slow or silent holds one slot and delays only its own
    messages, never another lab's."""

    CONCURRENT_TRIES = 8
    """Tries in flight at once across every lab on this pool host (each try at most TIMEOUT_S)."""
    TURN_TRIES = 20
    """Due tries one lab's turn sends, oldest first, before it gives its slot back."""

    def __init__(self, config: Config):
        self.config = config
        self.r = redis.Redis.from_url(config.redis_url, decode_responses=True)
        self.base = config.self_url  # the web tier's public address: this pool host may be another machine
        self.running = True
        self.lease = self.r.register_script(_LEASE_TRY)
        self.hooked: set[str] = set()  # labs that had a webhook registered when last looked at
        self.slots = threading.BoundedSemaphore(self.CONCURRENT_TRIES)
        self.turns: set[str] = set()  # labs whose turn runs now (guarded by turns_lock)
        self.turns_lock = threading.Lock()

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="webhooks", daemon=True)
        t.start()
        return t

    def run(self) -> None:
        """Tick every LOOP_S while a lab has a webhook; with none, sleep until one is registered (announced on
        REGISTERED) or RESCAN_S passes."""
        ps, rescan_at = None, 0.0
        while self.running:
            try:
                if ps is None:
                    ps = self.r.pubsub(ignore_subscribe_messages=True)
                    ps.subscribe(REGISTERED)
                if time.time() >= rescan_at:
                    self.hooked = set(self.r.smembers(LABS))
                    rescan_at = time.time() + RESCAN_S
                self.tick()
                msg = ps.get_message(timeout=LOOP_S if self.hooked else max(0.0, rescan_at - time.time()))
                while msg:
                    if msg.get("type") == "message":
                        self.hooked.add(msg["data"])
                    msg = ps.get_message(timeout=0)
            except (redis.ConnectionError, redis.exceptions.OutOfMemoryError):  # restarting, or at maxmemory
                ps, rescan_at = None, 0.0
                time.sleep(0.5)

    def tick(self) -> None:
        for lab in list(self.hooked):
            reg = self.r.hgetall(hook(lab))
            if not reg.get("url"):
                self.hooked.discard(lab)  # none registered: looked at again when one is (or at the rescan)
                continue
            now = clock.now(self.r, lab)
            collect(self.r, lab, reg, now)
            if self.r.zcount(due(lab), "-inf", now) and self.take_turn(lab):
                threading.Thread(target=self.turn, args=(lab, reg), name=f"webhooks-{lab}", daemon=True).start()
            self.drop_if_gone(lab)

    def take_turn(self, lab: str) -> bool:
        """A turn for `lab`, unless it has one running or every slot is taken (then a later tick asks again)."""
        with self.turns_lock:
            if lab in self.turns or not self.slots.acquire(blocking=False):
                return False
            self.turns.add(lab)
            return True

    def turn(self, lab: str, reg: dict) -> None:
        """Send `lab`'s due tries in order (each claimed first), then give the slot back."""
        try:
            now = clock.now(self.r, lab)
            lease_s = TRY_LEASE_S * max(float(registry.settings(self.r, lab)["speed"]), 1e-9)
            for msg_id in self.r.zrangebyscore(due(lab), "-inf", now, start=0, num=self.TURN_TRIES):
                if self.lease(keys=[due(lab)], args=[msg_id, now, now + lease_s]):
                    self.try_once(lab, reg, msg_id)
            self.drop_if_gone(lab)
        except (redis.ConnectionError, redis.exceptions.OutOfMemoryError):  # as in run(): a later turn tries again
            pass
        finally:
            with self.turns_lock:
                self.turns.discard(lab)
                self.slots.release()

    def drop_if_gone(self, lab: str) -> None:
        """Torn down meanwhile: drop what this tick or turn wrote after the sweep."""
        if not registry.exists(self.r, lab):
            self.r.delete(hook(lab), messages(lab), due(lab))

    def target(self, lab: str, url: str) -> tuple[str, list[str]]:
        if url == BUILTIN:
            return self.base + receiver_path(lab), []
        return url, validate_target(url, self.config.webhook_allowlist)

    def try_once(self, lab: str, reg: dict, msg_id: str) -> None:
        raw = self.r.hget(messages(lab), msg_id)
        if raw is None:
            self.r.zrem(due(lab), msg_id)
            return
        msg = json.loads(raw)
        n = len(msg["tries"]) + 1
        sent_at = time.time()
        body = msg["body"].encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "AsyncWorkLab-Webhooks/1",
            **sign(reg["secret"], msg_id, int(sent_at), body),
        }
        try:
            url, addrs = self.target(lab, reg["url"])
            status = post(url, addrs, headers, body)
            reason = f"redirect ({status}) not followed" if 300 <= status < 400 else f"HTTP {status}"
        except TargetRefused as e:  # the target now resolves somewhere it must not reach
            status, reason = None, f"refused: {e.reason}"
        except (OSError, http.client.HTTPException) as e:
            status, reason = None, f"{type(e).__name__}: {e}"[:160]
        attempt = {"try": n, "t_real": round(sent_at, 4), "status": status, "reason": reason}
        settings = registry.settings(self.r, lab)
        now = clock.now(self.r, lab)
        fields = {"job_id": msg["job_id"], "msg": msg_id, "try": n}
        if status is not None and 200 <= status < 300:
            msg["state"] = "delivered"
            self.r.zrem(due(lab), msg_id)
            stream.emit(self.r, lab, "webhook.delivered", now, **fields, status=status)
        elif n >= settings["max_attempts"]:
            msg["state"] = "abandoned"
            self.r.zrem(due(lab), msg_id)
            stream.emit(self.r, lab, "webhook.gave_up", now, **fields, reason=reason)
        else:
            # Chapter 4's full jitter, on the lab's clock and its retry settings, seeded per message and try.
            delay = retry.full_jitter_delay(
                n, settings["retry_base"], settings["retry_cap"], retry.jitter_rng(settings["jitter_seed"], msg_id, n)
            )
            attempt["next_delay_s"] = round(delay, 3)
            self.r.zadd(due(lab), {msg_id: now + delay})
            stream.emit(self.r, lab, "webhook.attempted", now, **fields, reason=reason, delay=round(delay, 2))
        msg["tries"].append(attempt)
        self.r.hset(messages(lab), msg_id, json.dumps(msg))


class Delivery:
    """Webhook delivery for the supervisor (the `Engine` protocol): a thread of its own, nothing in the pass."""

    name = "webhooks"
    wakes = ()
    holder = None

    def start(self, config: Config) -> None:
        Deliverer(config).start()  # outbound calls off the reaper loop

    def read(self, pipe: redis.client.Pipeline, lab: str) -> int:
        return 0

    def busy(self, settings: dict, gauges: list) -> bool:
        return False

    def tick(
        self, r: redis.Redis, rq: redis.Redis, lab: str, settings: dict, state: dict, config: Config, quiet: bool
    ) -> int:
        return 0


ENGINE = Delivery()
