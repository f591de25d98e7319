"""Drill: one client at its cap of WebSockets or of slow connections, or a room filling its lab, and everyone
else is still answered within 200 ms (p99): issue 23's floods, against a stack at the README's default limits.

Before the gevent web tier, 257 WebSockets opened with a view token (every student of a room has one) made
`/healthz`, chapter pages and the owner's own calls time out for the whole hold, and 260 slowloris
connections with no credentials did the same. Here, on a stack started with core.config's defaults
(`WS_PER_CLIENT`, `WS_PER_LAB`, `CONN_PER_CLIENT`, `HEADER_TIMEOUT`, every rate limit), one attack at a time:

- `sockets`: one client (127.0.0.1) opens `sockets` WebSockets with a lab's view token and holds them;
- `slowloris`: one client opens N connections (the issue's 260, and past `CONN_PER_CLIENT`), each sending a
  request's headers a byte every `drip_s` and never the blank line, and opens each one the server cuts again;
- `room`: a whole room — several addresses, each under its own cap — opens more sockets than `WS_PER_LAB`.

Meanwhile another address (127.0.0.2: another client to a server without a proxy) times `/healthz`, a chapter
page and the owner's snapshot of the lab, over and over; a quiet run of the same probes first is the baseline.
"""

from __future__ import annotations

import math
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import websocket

from app.routes.ws import CLOSE_LIMIT
from chaos.common import Result
from core.config import Config
from runtime.harness.client import Api
from runtime.harness.drill import drill_client
from runtime.harness.stack import UNLIMITED, Stack
from runtime.harness.stats import pct

NAME = "conn_flood"
INVARIANT = (
    "one client holding its maximum of WebSockets (a view token) or of slow-header connections, or a "
    "room filling its lab, at the default limits: /healthz, a chapter page and the owner's snapshot from "
    "another address all answer, p99 ≤ 200 ms; sockets past a cap are closed with 4429, slow headers are "
    "cut (past CONN_PER_CLIENT at once, the rest at HEADER_TIMEOUT), held sockets stay open"
)
DEFAULTS = Config()
LIMITS = {k: str(getattr(DEFAULTS, k.lower())) for k in UNLIMITED}
"""The limits the harness turns off, at their defaults; the header and body timeouts are defaults already."""
P99_MS = 200.0
PROBE_TIMEOUT_S = 5.0
ATTACKER, PROBER = "127.0.0.1", "127.0.0.2"
GRACE_S = 3.0  # past HEADER_TIMEOUT, a slow connection still open is one the server did not cut
HEADERS = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\nX-Padding: " + b"a" * 4096


# --- the probes --------------------------------------------------------------------------------------


def measure(api: Api, lab: dict, seconds: float, every: float = 0.05) -> dict[str, dict]:
    """Time /healthz, a chapter page and the owner's snapshot in turn for `seconds`: probe → {ms, failed}.
    A failure is any answer but 200, a refused or cut connection, or no answer within PROBE_TIMEOUT_S."""
    probes = {
        "healthz": ("/healthz", None),
        "chapter": ("/chapters/1", None),
        "owner": (f"/api/labs/{lab['lab_id']}", lab["token"]),
    }
    out: dict[str, dict] = {name: {"ms": [], "failed": []} for name in probes}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name, (path, token) in probes.items():
            t = time.perf_counter()
            reply = api.call("GET", path, token=token)
            out[name]["ms"].append((time.perf_counter() - t) * 1000)
            if reply.status != 200:
                out[name]["failed"].append(f"{reply.status} {reply.body[:80]!r}")
        time.sleep(every)
    return out


def figures(samples: dict) -> dict:
    """One probe's samples as n, p50, p99 and max in ms, and its failures."""
    ms = samples["ms"]
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 50), 1),
        "p99_ms": round(pct(ms, 99), 1),
        "max_ms": round(max(ms, default=math.nan), 1),
        "failed": len(samples["failed"]),
    }


# --- WebSockets --------------------------------------------------------------------------------------


def open_socket(url: str, server: tuple[str, int], source: str) -> tuple[websocket.WebSocket | None, int | None, str]:
    """Open one WebSocket from `source`: (the socket, None, "") if the server keeps it, else (None, the close
    code, its reason), or (None, None, the error) if the handshake failed. The server's first frame says which:
    catch-up events, or a close at once."""
    try:
        raw = socket.create_connection(server, timeout=10, source_address=(source, 0))
        ws = websocket.create_connection(url, timeout=10, socket=raw)
        ws.settimeout(3)
        op, data = ws.recv_data(control_frame=True)
    except websocket.WebSocketTimeoutException:
        return ws, None, ""  # nothing to catch up on, and no close: kept
    except (OSError, websocket.WebSocketException) as e:
        return None, None, f"{type(e).__name__}: {e}"
    if op == websocket.ABNF.OPCODE_CLOSE:
        ws.close()
        return None, int.from_bytes(data[:2], "big"), data[2:].decode(errors="replace")
    return ws, None, ""


@dataclass
class Holder:
    """Sockets the attack holds, kept alive (each read answers the server's pings) in a thread of their own;
    `cut` counts the ones the server closed meanwhile."""

    sockets: list[websocket.WebSocket]
    cut: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name="ws-holder", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for ws in self.sockets:
            sel.register(ws.sock, selectors.EVENT_READ, ws)
        while not self.stop.is_set():
            for sk, _ in sel.select(0.5):
                ws = sk.data
                try:
                    op, _ = ws.recv_data(control_frame=True)  # a ping is answered inside
                    gone = op == websocket.ABNF.OPCODE_CLOSE
                except (OSError, websocket.WebSocketException):
                    gone = True
                if gone:
                    self.cut += 1
                    sel.unregister(ws.sock)
        sel.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for ws in self.sockets:
            ws.close()


def flood_sockets(stack: Stack, lab: dict, sources: dict[str, int]) -> tuple[Holder, dict]:
    """Open sockets[source] WebSockets from each source with the lab's view token; the ones kept are held.
    Counts: kept, closed with 4429 by the cap its reason names (WS_PER_CLIENT, WS_PER_LAB), anything else."""
    url = f"{stack.ws_base}/ws/labs/{lab['lab_id']}?token={lab['view_token']}"
    server = (urlsplit(stack.url).hostname, stack.port)
    kept: list[websocket.WebSocket] = []
    counts: dict = {"kept": 0, "WS_PER_CLIENT": 0, "WS_PER_LAB": 0, "other": 0}
    for source, n in sources.items():
        for _ in range(n):
            ws, code, reason = open_socket(url, server, source)
            if ws is not None:
                kept.append(ws)
                counts["kept"] += 1
            elif code == CLOSE_LIMIT:
                counts["WS_PER_LAB" if "this lab" in reason else "WS_PER_CLIENT"] += 1
            else:
                counts["other"] += 1
                counts.setdefault("errors", []).append(reason)
    return Holder(kept), counts


# --- slowloris ---------------------------------------------------------------------------------------


class Slowloris(threading.Thread):
    """`conns` connections from ATTACKER, each sending HEADERS a byte every `drip_s` (never the blank line); a
    connection the server cuts is opened again after `reopen_s`. `lifetimes`: how long each cut one lived."""

    def __init__(self, stack: Stack, conns: int, drip_s: float = 2.0, reopen_s: float = 1.0):
        super().__init__(name="slowloris", daemon=True)
        self.address = (urlsplit(stack.url).hostname, stack.port)
        self.conns, self.drip_s, self.reopen_s = conns, drip_s, reopen_s
        self.lifetimes: list[float] = []
        self.opened = 0
        self.refused = 0  # connects that failed outright (the attack retries them)
        self.oldest_s = 0.0  # age of the oldest connection still open when the attack stopped
        self.ready = threading.Event()  # the first `conns` connections are open
        self.stop = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        live: dict[socket.socket, list[float]] = {}  # → [opened at, next drip at, bytes sent]
        reopen: list[float] = [0.0] * self.conns

        def cut(s: socket.socket, now: float) -> None:
            self.lifetimes.append(now - live.pop(s)[0])
            sel.unregister(s)
            s.close()
            reopen.append(now + self.reopen_s)

        try:
            while not self.stop.is_set():
                now = time.monotonic()
                due = sum(t <= now for t in reopen)
                reopen[:] = [t for t in reopen if t > now]
                for _ in range(due):
                    try:
                        s = socket.create_connection(self.address, timeout=5, source_address=(ATTACKER, 0))
                    except OSError:
                        self.refused += 1
                        reopen.append(now + self.reopen_s)
                        continue
                    s.setblocking(False)
                    opened = time.monotonic()
                    live[s] = [opened, opened, 0]
                    sel.register(s, selectors.EVENT_READ)
                    self.opened += 1
                self.ready.set()
                for key, _ in sel.select(0.1):
                    try:
                        gone = key.fileobj.recv(1024) == b""  # an answer is not expected: only a close
                    except OSError:
                        gone = True
                    if gone:
                        cut(key.fileobj, time.monotonic())
                now = time.monotonic()
                for s, state in list(live.items()):
                    if state[1] <= now:
                        try:
                            s.send(HEADERS[state[2] : state[2] + 1])
                        except OSError:
                            cut(s, now)
                            continue
                        state[1], state[2] = now + self.drip_s, min(state[2] + 1, len(HEADERS) - 1)
        except Exception as e:  # noqa: BLE001 - reported in the result, never a silent end of the attack
            self.error = f"{type(e).__name__}: {e}"
        finally:
            now = time.monotonic()
            self.oldest_s = max((now - state[0] for state in live.values()), default=0.0)
            for s in live:
                s.close()
            sel.close()

    def halt(self) -> None:
        self.stop.set()
        self.join(10)


# --- the drill ---------------------------------------------------------------------------------------


def hold_sockets(
    res: Result,
    phase: str,
    stack: Stack,
    lab: dict,
    sources: dict[str, int],
    cap: str,
    probe: Api,
    quiet: dict[str, dict],
    hold_s: float,
) -> None:
    """Open sources' sockets on `lab` and probe for `hold_s` while holding the ones kept; check that `cap` kept
    exactly its number, closed the rest with 4429 and its reason, and did not cut a kept one meanwhile."""
    total, limit = sum(sources.values()), getattr(DEFAULTS, cap.lower())
    holder, c = flood_sockets(stack, lab, sources)
    try:
        judge(res, phase, measure(probe, lab, hold_s), quiet)
    finally:
        holder.close()
    res.counts.update({f"{phase}_kept": c["kept"], f"{phase}_4429": c[cap], f"{phase}_cut": holder.cut})
    res.check(c["kept"] == min(total, limit), f"{phase}: {c['kept']} sockets kept, not {min(total, limit)} ({cap})")
    res.check(
        c[cap] == total - c["kept"],
        f"{phase}: of {total - c['kept']} past {cap} only {c[cap]} were closed with 4429 for it ({c})",
    )
    res.check(holder.cut == 0, f"{phase}: the server closed {holder.cut} of the sockets it kept")


def hold_slowloris(
    res: Result,
    phase: str,
    stack: Stack,
    conns: int,
    drip_s: float,
    probe: Api,
    lab: dict,
    quiet: dict[str, dict],
    hold_s: float,
) -> None:
    """Keep `conns` slow connections open from one address and probe for `hold_s` (at least HEADER_TIMEOUT +
    GRACE_S, so the cuts are seen); check that the ones past CONN_PER_CLIENT were cut at accept and every other
    one at the header timeout."""
    timeout, cap = DEFAULTS.header_timeout, DEFAULTS.conn_per_client
    attack = Slowloris(stack, conns, drip_s)
    attack.start()
    try:
        attack.ready.wait(60)
        probes = measure(probe, lab, max(hold_s, timeout + GRACE_S))
    finally:
        attack.halt()
    judge(res, phase, probes, quiet)
    res.check(attack.error is None, f"{phase}: the attack itself failed: {attack.error}")
    at_accept = [t for t in attack.lifetimes if t < timeout / 2]
    at_timeout = [t for t in attack.lifetimes if t >= timeout / 2]
    late = max([*at_timeout, attack.oldest_s])
    res.counts.update(
        {
            f"{phase}_opened": attack.opened,
            f"{phase}_cut_at_accept": len(at_accept),
            f"{phase}_cut_at_timeout": len(at_timeout),
            f"{phase}_longest_s": round(late, 1),
        }
    )
    res.details.setdefault("slowloris", {})[phase] = {
        "connect_failed": attack.refused,
        "timeout_cut_p50_s": round(pct(at_timeout, 50), 2),
        "oldest_open_at_stop_s": round(attack.oldest_s, 2),
    }
    res.check(
        bool(at_accept) == (conns > cap),
        f"{phase}: {len(at_accept)} connections cut at accept with CONN_PER_CLIENT {cap}",
    )
    res.check(bool(at_timeout), f"{phase}: no slow connection was cut at the header timeout")
    res.check(late <= timeout + GRACE_S, f"{phase}: a slow connection lived {late:.1f} s (HEADER_TIMEOUT {timeout} s)")


def judge(res: Result, phase: str, probes: dict[str, dict], quiet: dict[str, dict] | None) -> None:
    """Record a phase's figures (notes and details, with the box's 1-minute load average) and check that every
    probe answered, within P99_MS at the 99th percentile beside a flood."""
    load = round(os.getloadavg()[0], 1)
    res.details.setdefault("latency", {})[phase] = {"loadavg_1m": load}
    for name, samples in probes.items():
        f = figures(samples)
        if quiet:
            base = figures(quiet[name])["p99_ms"]
            f["p99_vs_quiet"] = round(f["p99_ms"] / base, 1) if base else None
        res.details["latency"][phase][name] = {**f, "failures": samples["failed"][:5]}
        res.notes.append(
            f"{phase:<14} {name:<8} p50 {f['p50_ms']:6.1f}  p99 {f['p99_ms']:6.1f}  max "
            f"{f['max_ms']:6.1f} ms"
            + (f"  (p99 ×{f['p99_vs_quiet']} quiet)" if quiet else "")
            + f"  {f['failed']} failed of {f['n']}, load {load}"
        )
        res.check(
            f["n"] > 0 and not f["failed"],
            f"{phase}: {f['failed']} of {f['n']} {name} probes failed ({samples['failed'][:3]})",
        )
        if quiet:
            res.check(f["p99_ms"] <= P99_MS, f"{phase}: {name} p99 {f['p99_ms']} ms > {P99_MS:.0f} ms")
    worst = max(figures(s)["p99_ms"] for s in probes.values())
    res.counts[f"{phase}_p99_ms"] = worst
    res.counts[f"{phase}_failed"] = sum(len(s["failed"]) for s in probes.values())


def run(
    sockets: int = 300,
    slowloris: tuple[int, ...] = (260, 600),
    room: int = 450,
    hold_s: float = 20.0,
    baseline_s: float = 10.0,
    drip_s: float = 2.0,
) -> Result:
    """Each attack in turn against one stack at the default limits, probed from another address for `hold_s`
    once it is in place (a slowloris phase for at least HEADER_TIMEOUT + GRACE_S, so its cuts are seen)."""
    res = Result(NAME, INVARIANT)
    t0 = time.monotonic()
    with Stack(NAME, env=LIMITS, logs=True) as stack:
        api = drill_client(stack)
        probe = stack.api(offline_ok=True, timeout=PROBE_TIMEOUT_S, source=PROBER)
        lab = api.lab("ch1", workers=0)
        measure(probe, lab, 1)  # warm-up: the first render of a chapter compiles its template
        quiet = measure(probe, lab, baseline_s)
        judge(res, "quiet", quiet, None)

        if sockets:
            hold_sockets(
                res, f"sockets{sockets}", stack, lab, {ATTACKER: sockets}, "WS_PER_CLIENT", probe, quiet, hold_s
            )
        for n in slowloris:
            hold_slowloris(res, f"slowloris{n}", stack, n, drip_s, probe, lab, quiet, hold_s)
        if room:  # each address under its own cap, so only the lab's refuses
            students = math.ceil(room / (DEFAULTS.ws_per_client - 1))
            sources = {f"127.0.1.{i + 1}": room // students + (i < room % students) for i in range(students)}
            hold_sockets(
                res, f"room{room}", stack, api.lab("ch1", workers=0), sources, "WS_PER_LAB", probe, quiet, hold_s
            )
        res.details["limits"] = {
            k: getattr(DEFAULTS, k.lower())
            for k in ("WS_PER_CLIENT", "WS_PER_LAB", "CONN_PER_CLIENT", "HEADER_TIMEOUT", "BODY_TIMEOUT")
        }
    res.seconds = time.monotonic() - t0
    return res
