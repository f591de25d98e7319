"""Live event push over WebSocket: `WS /ws/labs/{lab}?after=ID`.

One hub (a greenlet under the gevent web worker) blocks on the event streams of the labs this process
has sockets on (one XREAD BLOCK over all of them), so it reads each new entry once, as it is appended,
encodes each as a WebSocket frame once and hands the same bytes to every socket of that lab. An append
needs no doorbell beside it, and a lab nobody watches costs the web tier nothing. A socket
never blocks on Redis itself and holds no thread: hundreds cost a mailbox and two greenlets each.
A reconnect with `after=<last id>` resumes with no gap and no repeat.

Bounds (core.config): `WS_PER_CLIENT` sockets per client address and `WS_PER_LAB` per lab; one more
is accepted and closed at once with code 4429 and the reason, which the widget shows.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import select
import socket
import threading
import time
from collections import defaultdict

import redis
from flask import Flask, current_app, request
from flask_sock import Sock
from wsproto.events import CloseConnection
from wsproto.utilities import LocalProtocolError

from app import limits
from app.auth import authorise, bearer_token, same_origin
from app.errors import ApiError, close_after_response
from app.http import parse_after
from app.store import get_redis
from core import parking, slots, stream
from core.config import Config
from core.keys import key

sock = Sock()
QUEUE_MAX = 2000  # events buffered for one slow socket before it is cut off (it reconnects with after=)
HUB_BLOCK_MS = 2000  # the hub's XREAD returns at least this often with nothing new: well inside the client's
# socket timeout (app/longpoll.py blocks likewise), and a lost server is noticed
HUB_BATCH = 5000  # entries one XREAD takes from one lab's stream
# after a read that brought events, the hub gathers this long before it reads again: one read then brings what every
# watched lab wrote meanwhile, so a web process makes at most ~1/HUB_GATHER_S reads a second however many busy labs
# it serves (each read names every watched stream), and an event waits at most this much longer to go out
HUB_GATHER_S = 0.01
STALL_S = 30.0  # a peer that takes no bytes for this long is cut even while its mailbox has room
TOO_SLOW = "too slow: reconnect with after=<last id>"
CLOSE_LIMIT = 4429  # refused: the client or the lab already holds its maximum of sockets
_open: dict[str, int] = defaultdict(int)  # open sockets per "client:<addr>" and per "lab:<id>"
_open_lock = threading.Lock()
try:  # the hub writes to sockets itself only where that cannot race a handler: one gevent thread
    from gevent import monkey

    DIRECT = monkey.is_module_patched("socket")
except ImportError:
    DIRECT = False


def text_frame(text: str) -> bytes:
    """One unmasked, uncompressed, final text frame (server → client): the same bytes serve every
    socket, so an event is encoded once however many sockets watch the lab."""
    payload = text.encode()
    n = len(payload)
    if n < 126:
        head = bytes((0x81, n))
    elif n < 65536:
        head = bytes((0x81, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x81, 127)) + n.to_bytes(8, "big")
    return head + payload


def encode(ev: dict) -> tuple[tuple[int, int], bytes]:
    return stream.order(ev["id"]), text_frame(json.dumps(ev))


class Mailbox(queue.Queue):
    """One socket's pending events; `overflowed` marks a consumer that fell too far behind.

    Once its handler has caught up (`guard` set), the hub writes a new event's frame straight to the
    socket when nothing is queued and nobody is writing (one non-blocking send, no greenlet switch);
    anything it cannot write at once is queued for the handler, so order is kept. `last` is the id
    of the last event written, so nothing is sent twice."""

    overflowed = False
    guard: GuardedSocket | None = None
    last: tuple[int, int] = (0, 0)

    def try_direct(self, eid: tuple[int, int], frame: bytes) -> bool:
        """Write `frame` now if that keeps the order; False: queue it for the handler instead."""
        g = self.guard
        if g is None or g.is_cut or not self.empty() or not g.lock.acquire(blocking=False):
            return False
        try:
            if eid <= self.last:
                return True
            try:
                n = g.raw.sendmsg([frame], (), socket.MSG_DONTWAIT)
            except BlockingIOError:
                n = 0
            except OSError:
                return True  # the peer is gone: its handler finds out on its own
            if n < len(frame):
                self.put_nowait((eid, frame[n:], True))  # the rest, first in line; never skipped
            else:
                self.last = eid
            return True
        finally:
            g.lock.release()


class TooSlow(ConnectionError):
    """Raised to whichever thread was writing when its peer was cut; an OSError, so simple-websocket's
    reader thread treats it as a dead socket too."""


class GuardedSocket:
    """A WebSocket's raw socket with one writer at a time and a way out of a peer that stopped reading.

    simple-websocket writes from two threads (its ping thread and our handler) with a bare
    ``sock.send`` and no lock; a blocked send once let a Ping frame land inside a text frame. Here
    each write is a whole frame under a lock, and a write that cannot make progress keeps watching
    the mailbox: once the mailbox overflowed (or nothing moved for STALL_S) the connection is cut.
    Cutting queues the rest of the frame and a 1013 close frame in a send buffer grown to hold
    them, then shuts both directions: the peer, if it ever reads again, finds a gap-free prefix of
    the stream, the close and EOF, and no server thread waits on it meanwhile.
    """

    def __init__(self, ws, mailbox: Mailbox):
        self.ws, self.raw, self.mailbox = ws, ws.sock, mailbox
        self.lock = threading.Lock()
        self.is_cut = False

    def __getattr__(self, name: str):
        return getattr(self.raw, name)  # recv, fileno, close... for simple-websocket's reader thread

    def send(self, data: bytes) -> int:
        with self.lock:
            if self.is_cut:
                raise TooSlow(TOO_SLOW)
            view, moved = memoryview(data), time.monotonic()
            while view:
                try:
                    n = self.raw.sendmsg([view], (), socket.MSG_DONTWAIT)  # never waits (gevent too)
                except BlockingIOError:
                    n = 0
                if n:
                    view, moved = view[n:], time.monotonic()
                elif self.mailbox.overflowed or time.monotonic() - moved > STALL_S:
                    self._cut(bytes(view))
                    raise TooSlow(TOO_SLOW)
                else:
                    select.select([], [self.raw], [], 0.2)
            return len(data)

    sendall = send

    def cut(self) -> None:
        """Close as too slow now (the handler saw the overflow between sends)."""
        with self.lock:
            if not self.is_cut:
                self._cut(b"")

    def _cut(self, rest: bytes) -> None:
        self.is_cut = True
        self.ws.connected = False
        try:
            tail = rest + self.ws.ws.send(CloseConnection(1013, TOO_SLOW))
        except LocalProtocolError:  # a close frame was already (partly) written
            tail = rest
        try:
            room = self.raw.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) + 2 * len(tail) + 8192
            try:  # root may exceed net.core.wmem_max; others get what the kernel allows
                self.raw.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_SNDBUFFORCE", 32), room)
            except OSError:
                self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, room)
            self.raw.sendmsg([tail], (), socket.MSG_DONTWAIT)
        except OSError:
            pass  # no room after all: the peer sees EOF after a truncated frame, still a prefix
        try:
            self.raw.shutdown(socket.SHUT_RDWR)  # queued bytes still go out; the reader thread wakes with EOF
        except OSError:
            pass


class Hub:
    def __init__(self, config: Config):
        self.config = config
        self.r = redis.Redis.from_url(config.redis_url, decode_responses=True)
        self.subs: dict[str, set[Mailbox]] = defaultdict(set)
        self.last: dict[str, str] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        # this web process as a watcher of labs (core/parking.py): its entries go stale if it dies
        self.me = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        # the hub's blocking read also watches this stream: a lab newly watched is added to it there, so the
        # read in progress returns and the next one includes the lab (it expires with an idle process)
        self.wake_key = f"web:hub:{self.me}:wake"

    def subscribe(self, lab: str) -> Mailbox:
        q = Mailbox(maxsize=QUEUE_MAX)
        with self.lock:
            new = lab not in self.last
            if new:
                top = self.r.xrevrange(key(lab, "events"), count=1)
                self.last[lab] = top[0][0] if top else "0-0"
            self.subs[lab].add(q)
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="ws-hub", daemon=True)
                self.thread.start()
                threading.Thread(target=self.keep_watching, name="ws-watch", daemon=True).start()
        if new:
            try:
                with self.r.pipeline(transaction=False) as pipe:
                    pipe.xadd(self.wake_key, {"lab": lab}, maxlen=1)
                    pipe.expire(self.wake_key, 3600)
                    pipe.execute()
            except redis.ResponseError:
                pass  # the server is at its maxmemory: the hub's next read (within HUB_BLOCK_MS) takes the lab in
        parking.watch(self.r, lab, self.me)
        return q

    def unsubscribe(self, lab: str, q: Mailbox) -> None:
        with self.lock:
            self.subs[lab].discard(q)
            last = not self.subs[lab]
            if last:
                del self.subs[lab]
                self.last.pop(lab, None)
        if last:
            parking.unwatch(self.r, lab, self.me)

    def keep_watching(self) -> None:
        """Every WATCH_REFRESH_S, stamp the labs this process has sockets on as watched, and resume any
        that was parked meanwhile (a park that crossed a socket's connect, or a resume refused at the
        client's cap that a parked or closed lab has made room for since), unless its owner parked it."""
        cfg = self.config
        while True:
            threading.Event().wait(parking.WATCH_REFRESH_S)
            with self.lock:
                labs = list(self.subs)
            try:
                for lab in labs:
                    parking.watch(self.r, lab, self.me)
            except redis.RedisError:
                continue  # the server is restarting: the next round stamps them again
            for lab in labs:
                try:  # no waiting for other pages here: the stamps above must stay on time
                    parking.resume(
                        self.r,
                        lab,
                        cfg.max_client_labs,
                        cfg.max_workers,
                        patience=0,
                        max_labs=cfg.max_labs,
                        still_open=True,
                    )
                except (slots.Refused, redis.RedisError):
                    pass  # still at the cap (its page keeps its own message), or the server is restarting

    def fan_out(self, lab: str, entries: list[tuple[str, dict]]) -> None:
        """Hand a lab's new stream entries (as XREAD returns them) to every socket watching it."""
        with self.lock:
            if lab not in self.subs:
                return
            after = stream.order(self.last[lab])
            entries = [(i, f) for i, f in entries if stream.order(i) > after]  # (a lab watched again meanwhile)
            if not entries:
                return
            self.last[lab] = entries[-1][0]
            targets = list(self.subs.get(lab, ()))
        frames = [encode(stream.decode(i, f)) for i, f in entries]
        for q in targets:
            for eid, frame in frames:
                if DIRECT and q.try_direct(eid, frame):
                    continue
                try:
                    q.put_nowait((eid, frame, False))
                except queue.Full:
                    q.overflowed = True  # the handler sees this and closes the socket
                    break

    def run(self) -> None:
        """Block on every watched lab's stream (and the wake stream) at once; hand out what arrives."""
        woke = "0-0"
        while True:
            try:
                with self.lock:
                    streams = {key(lab, "events"): last for lab, last in self.last.items()}
                streams[self.wake_key] = woke
                got = self.r.xread(streams, count=HUB_BATCH, block=HUB_BLOCK_MS) or ()
                for k, entries in got:
                    if k == self.wake_key:
                        woke = entries[-1][0]
                    else:
                        self.fan_out(k.split(":")[1], entries)
                if got:
                    threading.Event().wait(HUB_GATHER_S)
            except redis.RedisError:  # the server restarts, or a loaded box stalled a read past its timeout: read
                threading.Event().wait(0.5)  # again from .last (the hub must outlive any one failed read)


def init_app(app: Flask) -> None:
    sock.init_app(app)
    app.extensions["ws_hub"] = Hub(app.config["LAB"])
    app.before_request(_guard_ws)


def _guard_ws():
    """Check origin, lab and token before the upgrade, so refusals are plain HTTP errors."""
    if not request.path.startswith("/ws/labs/"):
        return None
    lab = request.path.rsplit("/", 1)[-1]
    # Cross-site WebSocket hijacking: browsers always send Origin on an upgrade, and it must be
    # ours. A client without Origin is not a browser, so it cannot be riding a victim's cookie;
    # it must show its token itself (Authorization header or ?token=).
    if "Origin" in request.headers and not same_origin():
        raise ApiError(403, "bad_origin", "WebSocket from a foreign Origin refused")
    token = bearer_token() or request.args.get("token")
    if token is None and "Origin" in request.headers:
        token = request.cookies.get(f"lab_{lab}")
    authorise(lab, token, write=False)
    parse_after(request.args.get("after"))
    if "Transfer-Encoding" in request.headers or (request.content_length or 0) > 0:
        # An upgrade is a GET with no body: bytes after its head would be read as WebSocket frames.
        close_after_response()
        raise ApiError(400, "body_not_allowed", "a WebSocket upgrade carries no body")
    # No permessage-deflate: events are small, frames are shared by every socket of a lab (one encoding
    # each), and a per-socket zlib context would cost ~300 kB of memory per socket.
    request.environ.pop("HTTP_SEC_WEBSOCKET_EXTENSIONS", None)
    return None


def _claim(lab: str) -> str | None:
    """Count this socket against its client's and its lab's caps; the refusal reason if over one."""
    cfg = current_app.config["LAB"]
    client = f"client:{request.remote_addr}"
    with _open_lock:
        if cfg.ws_per_client and _open[client] >= cfg.ws_per_client:
            return (
                f"too many live connections from your address ({cfg.ws_per_client}): "
                "close another tab of this app and reload"
            )
        if cfg.ws_per_lab and _open[f"lab:{lab}"] >= cfg.ws_per_lab:
            return f"this lab already has {cfg.ws_per_lab} live viewers: try again later"
        _open[client] += 1
        _open[f"lab:{lab}"] += 1
    return None


def _release(lab: str) -> None:
    with _open_lock:
        for k in (f"client:{request.remote_addr}", f"lab:{lab}"):
            _open[k] -= 1
            if _open[k] <= 0:
                del _open[k]


def open_counts() -> dict[str, int]:
    with _open_lock:
        return dict(_open)


@sock.route("/ws/labs/<lab>")
def lab_events(ws, lab: str):
    refused = _claim(lab)
    if refused:
        ws.close(reason=CLOSE_LIMIT, message=refused)
        return
    try:
        _serve(ws, lab)
    finally:
        _release(lab)


def _serve(ws, lab: str) -> None:
    hub: Hub = current_app.extensions["ws_hub"]
    try:
        ws.sock.settimeout(None)  # the web worker's body timeout is for HTTP; pings keep this one honest
        ws.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle wait behind a delayed ACK
    except OSError:
        return
    after = request.args.get("after") or "0"
    q = hub.subscribe(lab)
    try:
        limits.wake(get_redis(), lab)  # opening the page resumes a parked lab (before the catch-up below)
    except ApiError:
        pass  # its client is at the cap with every lab watched: the hub retries while this socket stays
    guard = ws.sock = GuardedSocket(ws, q)
    try:
        last = stream.order(after) if after != "0" else (0, 0)
        while True:  # catch up from the stream itself, then switch to the hub's queue
            batch = stream.read_after(get_redis(), lab, after, count=1000)
            if batch:
                guard.send(b"".join(encode(ev)[1] for ev in batch))
            if len(batch) < 1000:
                break
            after = batch[-1]["id"]
        if batch:
            last = stream.order(batch[-1]["id"])
        q.last = last
        q.guard = guard  # from now on the hub may write to this socket itself
        while ws.connected:
            if q.overflowed:
                guard.cut()
                return
            try:
                eid, frame, rest = q.get(timeout=1.0)  # a closed socket stops watching within a second
            except queue.Empty:
                continue
            if eid <= q.last and not rest:
                continue
            guard.send(frame)
            q.last = max(q.last, eid)
    except OSError:
        pass  # cut as too slow, or the peer went away mid-send
    finally:
        hub.unsubscribe(lab, q)
