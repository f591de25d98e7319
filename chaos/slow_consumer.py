"""Drill: one WebSocket consumer that stops reading, next to a fast one, on a lab flooding events.

The slow consumer is a raw socket: a hand-written upgrade handshake with a small receive buffer,
then it never reads again, so the server's writes to it stall as soon as the two kernel buffers
are full. Meanwhile 8 workers run thumbnail jobs with a heartbeat every tick (a `lease.extended`
and `job.progress` stream of events), a fast websocket-client reads everything and an HTTP probe
polls the snapshot. The web process fans events out through one hub thread and a bounded mailbox
per socket (`app.routes.ws.QUEUE_MAX`), so the stalled socket must not slow anyone else down and must not
grow the web process without bound; when its mailbox overflows the server is meant to cut it
(close 1013) so that it reconnects with after=<last id>.

The drill watches the server side of the slow connection in /proc/net/tcp: ESTABLISHED with bytes
queued means nobody cut it yet. At the end the slow consumer reads again and must find a gap-free
prefix of the stream, then the close frame.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import threading
import time
from pathlib import Path

from app.routes.ws import QUEUE_MAX
from chaos.common import Result, workers_registered
from core.procs import rss_kb, wait
from runtime.harness.drill import WsTail, drill_client, drill_stack
from runtime.harness.stack import Stack

NAME = "slow_consumer"
INVARIANT = (
    f"a WebSocket consumer that stops reading does not stall anyone: a fast client on the same lab gets "
    f"every event in order while the lab floods events, HTTP keeps answering, the web process RSS stays "
    f"bounded, and the stalled consumer is cut (close 1013) once its mailbox exceeds QUEUE_MAX="
    f"{QUEUE_MAX}, having received a gap-free prefix of the stream"
)
# 1013: cut when its mailbox overflowed (app/routes/ws.py); 1008: simple-websocket's ping/pong timeout got there first
# (a peer that reads nothing answers no ping either: 2 × ping_interval after connecting, on a slow box)
CUT_CODES = (1013, 1008)
TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


class RawConsumer:
    """A WebSocket client that does the handshake by hand, then reads only when told to."""

    def __init__(self, stack: Stack, lab: dict, after: str, rcvbuf: int = 4096, mss: int = 1460):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connect: a small receive window, and an Ethernet-sized MSS. Loopback's 64 KB MSS would
        # let the server's send buffer autotune to ~1.3 MB (2 x initial cwnd x MSS), hiding ~6000 events
        # in the kernel before the application ever notices; over a real network path it is ~50 KB.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", stack.port))
        key = base64.b64encode(os.urandom(16)).decode()
        path = f"/ws/labs/{lab['lab_id']}?after={after}&token={lab['token']}"
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: {stack.url}\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)  # byte by byte: not one byte of the first frame is consumed
            if not chunk:
                raise ConnectionError("closed during the handshake")
            head += chunk
        self.status = head.split(b"\r\n", 1)[0].decode()
        if " 101 " not in self.status + " ":
            raise ConnectionError(f"handshake refused: {self.status}")
        self.local_port = self.sock.getsockname()[1]

    def drain(self, timeout: float = 30) -> dict:
        """Read everything now and parse the frames. Stops at a close frame or at the first bad frame."""
        buf, out = b"", {"ids": [], "close": None, "bytes": 0, "pings": 0, "corrupt": None}
        self.sock.settimeout(2)
        deadline = time.monotonic() + timeout
        offset = 0  # stream offset of buf[0]
        while time.monotonic() < deadline and out["close"] is None and out["corrupt"] is None:
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            out["bytes"] += len(chunk)
            buf += chunk
            while out["close"] is None and out["corrupt"] is None:
                frame = _frame(buf)
                if frame is None:
                    break
                opcode, payload, used = frame
                if opcode == 1:
                    try:
                        out["ids"].append(json.loads(payload.decode())["id"])
                    except (UnicodeDecodeError, ValueError, KeyError) as e:
                        ping_at = payload.find(b"\x89\x00")
                        out["corrupt"] = {
                            "at_byte": offset,
                            "after_events": len(out["ids"]),
                            "error": str(e)[:120],
                            "ping_frame_inside_text_frame": ping_at >= 0,
                            "payload_head": payload[:80].decode("latin-1"),
                        }
                elif opcode == 8:
                    out["close"] = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                elif opcode == 9:
                    out["pings"] += 1
                elif opcode not in (0, 2, 10):
                    out["corrupt"] = {"at_byte": offset, "after_events": len(out["ids"]), "error": f"opcode {opcode}"}
                buf, offset = buf[used:], offset + used
        return out

    def close(self) -> None:
        self.sock.close()


def _frame(buf: bytes) -> tuple[int, bytes, int] | None:
    """One unmasked server frame from the front of buf: (opcode, payload, bytes used), or None."""
    if len(buf) < 2:
        return None
    opcode, n, pos = buf[0] & 0x0F, buf[1] & 0x7F, 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, pos = struct.unpack("!H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, pos = struct.unpack("!Q", buf[2:10])[0], 10
    if len(buf) < pos + n:
        return None
    return opcode, buf[pos : pos + n], pos + n


def server_side(web_port: int, client_port: int) -> tuple[str, int]:
    """(TCP state, bytes queued to send) of the server's end of one connection, from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        local, remote = parts[1], parts[2]
        if int(local.split(":")[1], 16) == web_port and int(remote.split(":")[1], 16) == client_port:
            tx = int(parts[4].split(":")[0], 16)
            return TCP_STATES.get(parts[3], parts[3]), tx
    return "GONE", 0


def run(
    redis_url: str | None = None,
    workers: int = 8,
    speed: float = 1000,
    duration: float = 2000,
    extra_events: int = 4000,
    produce_s: float = 60,
    cut_grace_s: float = 10,
    rss_bound_mb: float = 64,
    root=None,
) -> Result:
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    with drill_stack(NAME, redis_url=redis_url, root=root) as stack:
        api, r = drill_client(stack), stack.redis_client()
        lab = api.lab(
            "ch8",
            speed=speed,
            workers=workers,
            heartbeat=True,
            heartbeat_interval=5,
            heartbeat_extend=7200,
            vt_seconds=7200,
            job_duration=duration,
            breaker=False,
        )
        lab_id = lab["lab_id"]
        wait(lambda: workers_registered(r, lab) >= workers, 90, f"{workers} workers to register")
        web_pid = stack.web_pid()
        start_id = (api.events(lab) or [{"id": "0"}])[-1]["id"]
        base_len = r.xlen(f"lab:{lab_id}:events")

        slow = RawConsumer(stack, lab, after=start_id)
        fast = WsTail(stack, lab, "fast", after=start_id)
        fast.start()
        wait(lambda: server_side(stack.port, slow.local_port)[0] == "ESTABLISHED", 10, "the slow socket")
        rss = [rss_kb(web_pid)]
        http: list[tuple[int, float]] = []
        stop_probe = threading.Event()

        def probe() -> None:
            while not stop_probe.is_set():
                t = time.monotonic()
                status = api.call("GET", f"/api/labs/{lab_id}", token=lab["token"], timeout=30).status
                http.append((status, time.monotonic() - t))
                rss.append(rss_kb(web_pid))
                stop_probe.wait(0.25)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()

        # flood: keep every worker busy with heart-beating thumbnail jobs until enough events piled up
        accepted, overflow_at = 0, None
        deadline = time.monotonic() + produce_s
        while time.monotonic() < deadline:
            snap = api.snapshot(lab)
            for _ in range(max(0, 2 * workers - snap["counts"]["queued"] - snap["counts"]["running"])):
                accepted += (
                    api.enqueue(lab, {"job_type": "thumbnail", "sample": "bikes", "duration_s": duration}).status == 202
                )
            since = r.xlen(f"lab:{lab_id}:events") - base_len
            if since > QUEUE_MAX + extra_events:
                overflow_at = time.monotonic()
                break
            time.sleep(0.3)
        since = len(api.events(lab, after=start_id))
        res.check(
            overflow_at is not None,
            f"only {since} events in {produce_s:g} s: never more than "
            f"QUEUE_MAX + {extra_events}; the slow mailbox may not have overflowed",
        )

        # was the stalled consumer cut while it still did not read?
        cut_state, cut_wait = server_side(stack.port, slow.local_port), 0.0
        t_cut = time.monotonic()
        while cut_state[0] == "ESTABLISHED" and time.monotonic() - t_cut < cut_grace_s:
            time.sleep(0.25)
            cut_state = server_side(stack.port, slow.local_port)
        cut_wait = time.monotonic() - t_cut
        res.check(
            cut_state[0] != "ESTABLISHED",
            f"the stalled consumer was not cut: {cut_grace_s:g} s after {since} events (> QUEUE_MAX="
            f"{QUEUE_MAX} + what the kernel buffers hold) the server's end of its socket is still ESTABLISHED "
            f"with {cut_state[1]} bytes unsent. app/routes/ws.py lab_events only looks at the mailbox's "
            f"overflowed flag between blocking ws.send() calls, and its ws.close() is one more blocking send "
            f"(of the close frame); nothing aborts the connection, so the handler holds its greenlet until "
            f"the peer reads again or TCP gives up",
        )

        # let the lab go quiet, then compare
        stop_probe.set()
        prober.join(35)
        try:
            api.wait_for(
                lab,
                lambda s: s["counts"]["done"] >= accepted and not s["counts"]["running"],
                120,
                "the flood's jobs to finish",
            )
        except TimeoutError as e:
            res.violations.append(str(e))
        truth = [e["id"] for e in api.events(lab, after=start_id)]
        fast.target = truth[-1] if truth else None
        fast.finished.wait(60)
        fast.stop.set()
        res.check(
            fast.ids == truth,
            f"the fast client got {len(fast.ids)} ids, the stream has {len(truth)} "
            f"(first difference at {_first_diff(fast.ids, truth)})",
        )
        worst_lag = max(fast.lags) if fast.lags else None
        gaps = [b - a for a, b in zip(fast.arrivals, fast.arrivals[1:], strict=False)]

        # now the slow consumer reads: it must find a gap-free prefix and then the close frame
        drained = slow.drain()
        slow.close()
        got, code = drained["ids"], drained["close"]
        res.check(
            got == truth[: len(got)],
            f"the stalled consumer's {len(got)} events are not a prefix of the stream "
            f"(first difference at {_first_diff(got, truth)})",
        )
        bad = drained["corrupt"]
        if bad is not None:
            why = (
                "; a Ping frame (89 00) sits inside a text frame: simple-websocket's ping thread and the handler "
                "thread write to the socket with no lock, and a blocked send lets the kernel interleave them"
                if bad.get("ping_frame_inside_text_frame")
                else ""
            )
            res.violations.append(
                f"the stalled consumer's byte stream is not valid WebSocket framing after "
                f"{bad['after_events']} events ({bad['error']}{why})"
            )
        res.check(
            bad is not None or code in CUT_CODES,
            f"after reading again the stalled consumer got close code "
            f"{code}, not one of {CUT_CODES} (received {len(got)} of "
            f"{len(truth)} events)",
        )
        bad_http = [s for s, _ in http if s != 200]
        res.check(http and not bad_http, f"HTTP probe: {len(bad_http)} of {len(http)} answers were not 200")
        growth_mb = (max(rss) - rss[0]) / 1024
        res.check(growth_mb <= rss_bound_mb, f"web RSS grew {growth_mb:.0f} MB (> {rss_bound_mb:g} MB)")
        res.counts = {
            "events": len(truth),
            "fast_got": len(fast.ids),
            "slow_got": len(got),
            "slow_close": code,
            "cut_while_stalled": cut_state[0] != "ESTABLISHED",
            "fast_max_lag_s": round(worst_lag, 2) if worst_lag is not None else None,
            "fast_max_gap_s": round(max(gaps), 2) if gaps else None,
            "http_ok": len(http) - len(bad_http),
            "http_max_s": round(max((t for _, t in http), default=0), 2),
            "rss_growth_mb": round(growth_mb, 1),
            "jobs": accepted,
        }
        res.details = {
            "slow_server_socket": {
                "state": cut_state[0],
                "unsent_bytes": cut_state[1],
                "watched_s": round(cut_wait, 1),
            },
            "slow_drain": {k: v for k, v in drained.items() if k != "ids"},
            "rss_kb": {"start": rss[0], "max": max(rss)},
            "queue_max": QUEUE_MAX,
        }
        api.delete(lab)
        r.close()
    res.seconds = time.monotonic() - t0
    return res


def _first_diff(a: list[str], b: list[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"#{i}: {x} vs {y}"
    return f"#{min(len(a), len(b))} (one list ends)"
