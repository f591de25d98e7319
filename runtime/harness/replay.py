"""A class's server traffic at the scale of hundreds of labs: record a real class with MONITOR, replay copies of it.

This box cannot run hundreds of real labs (each is three rq workers and their work horses), and the server's cost
per lab measured at a few labs is mostly its wake-ups: between two requests it sleeps, and a request that wakes it
costs 3–4 times one that finds it awake. At hundreds of labs requests arrive while it is awake. So the classroom
benchmark records what its real class sent the server (`Recorder`: MONITOR from before the first pool host
starts, so subscriptions made at start-up are known) and replays copies of it at once (`at_scale`, `run`)
against the same server, with its pool hosts and web process stopped, pinned to one core of its own:

- Copy c is the class with every lab id and the room code renamed (same length), its commands at the times they
  were sent plus an offset spread over STAGGER_S, and every Unix time in them (seconds or milliseconds: stream
  ids, scores, script arguments) moved by the same amount, so a stream read asks for what is new, not for the
  whole stream.
- Each copy starts from the recorded labs' keys as they stand after the recording (`clone_keys`: DUMP, RESTORE
  under the copy's names), so its scripts find their clocks, leases and settings and take the paths they took.
- Each recorded connection is a connection of its own in each copy, opened at its first command with AUTH
  (without waiting: a slow accept holds up that connection, not the replay), and closed (reset, as a
  short-lived connection's last reply ends it) after its last one unless it ran to the end.
  Commands the server ran within GROUP_US of each other on one connection were one pipeline and are sent as
  one; otherwise a connection sends its next command only when the replies to the last are in and its time has
  come (closed loop, as a client that waits for its reply), so a busy server is not handed pre-batched reads
  a real client would not have sent. A connection that subscribed reads whatever comes.
- A command's latency is from its send to its last reply (blocking commands left out); the replayer's lateness
  is how far behind its schedule a connection that was free sent.

A subscription made before the recorded window on a connection still open at its start (CLIENT LIST then) is
sent first, at the copy's start. Scripts are the server's own (the same server, so EVALSHA finds them).
"""

from __future__ import annotations

import errno
import heapq
import os
import re
import resource
import selectors
import socket
import struct
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

import redis
from redis.connection import parse_url

from core.procs import run_s
from runtime.harness.stats import pct

GROUP_US = 40  # commands the server ran this close on one connection arrived together (one read)
STAGGER_S = 10.0  # copies start spread over the class's longest period (a page's check-in), so no period is in step
SUBSCRIBING = {b"SUBSCRIBE", b"PSUBSCRIBE", b"SSUBSCRIBE"}
BLOCKING = {b"BLPOP", b"BRPOP", b"BLMOVE", b"BRPOPLPUSH", b"BZPOPMIN", b"BZPOPMAX", b"BLMPOP", b"BZMPOP", b"WAIT"}
_LINE = re.compile(rb"^\+(\d+\.\d+) \[\d+ ([^\]]+)\] (.*)$")
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESC = re.compile(rb"\\(x[0-9a-fA-F]{2}|.)")
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}
_UNIX = re.compile(rb"(?<![0-9.])(1[0-9]{9}(?:[0-9]{3})?)(\.[0-9]+)?(?![0-9])")  # Unix time: s (.frac) or ms


def unescape(arg: bytes) -> bytes:
    """One MONITOR argument (as the server quotes it: sdscatrepr) back to its bytes."""

    def one(m: re.Match) -> bytes:
        e = m.group(1)
        if e[:1] == b"x" and len(e) == 3:
            return bytes([int(e[1:], 16)])
        return _ESCAPES.get(e, e)

    return _ESC.sub(one, arg)


def parse_line(line: bytes) -> tuple[float, str, list[bytes]] | None:
    """(server time, client address or "lua", argv) of one MONITOR line, None for anything else."""
    m = _LINE.match(line.rstrip(b"\r\n"))
    if not m:
        return None
    return float(m.group(1)), m.group(2).decode(), [unescape(a) for a in _ARG.findall(m.group(3))]


def encode(argv: list[bytes]) -> bytes:
    """A command in RESP, as a client sends it."""
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def reply_end(buf: bytes | bytearray, pos: int) -> int:
    """Where the RESP2 reply starting at `pos` ends, or -1 if `buf` does not hold all of it yet."""
    pending, n = 1, len(buf)
    while pending:
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return -1
        kind, size = buf[pos], (int(buf[pos + 1 : end]) if buf[pos] in b"$*" else 0)
        pos = end + 2
        if kind == 36 and size >= 0:  # $: a bulk string of `size` bytes and its CRLF
            pos += size + 2
            if pos > n:
                return -1
        elif kind == 42 and size > 0:  # *: `size` more replies to skip
            pending += size
        pending -= 1
    return pos


def _connect_args(url: str) -> tuple[str, int, list[bytes]]:
    """(host, port, AUTH argv or []) of a redis:// URL, as redis-py reads it."""
    kw = parse_url(url)
    auth = [b"AUTH", *(kw[k].encode() for k in ("username", "password") if kw.get(k))] if kw.get("password") else []
    return kw.get("host", "127.0.0.1"), kw.get("port", 6379), auth


class Recorder:
    """MONITOR on the server from `start()` to `stop()`: every command a client sent (not a script's own), with the
    server's time and the client's address; `mark()` notes the connections open at that moment."""

    def __init__(self, url: str):
        self.url = url
        self.commands: list[tuple[float, str, list[bytes]]] = []
        self.open_at_mark: set[str] = set()
        self.ignore: set[str] = set()  # the bench's own connections (its INFO, this CLIENT LIST)
        self.sock: socket.socket | None = None
        self.file: BinaryIO | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> Recorder:
        host, port, auth = _connect_args(self.url)
        self.sock = socket.create_connection((host, port), timeout=10)
        f = self.sock.makefile("rb")
        for argv in ([auth] if auth else []) + [[b"MONITOR"]]:
            self.sock.sendall(encode(argv))
            if not f.readline().startswith(b"+"):
                raise RuntimeError(f"the server refused {argv[0].decode()} to the recorder")
        self.sock.settimeout(None)
        self.file = f
        self.thread.start()
        return self

    def _read(self) -> None:
        assert self.file is not None
        try:
            for line in self.file:
                got = parse_line(line)
                if got and got[1] != "lua" and got[2]:
                    self.commands.append(got)
        except (OSError, ValueError):
            return  # stopped

    def mark(self, *clients: redis.Redis) -> float:
        """Note the connections open now (their addresses) and the bench's own `clients` to leave out; returns
        now."""
        r = redis.Redis.from_url(self.url)
        self.ignore |= {c.client_info()["addr"] for c in (r, *clients)}
        self.open_at_mark = {c["addr"] for c in r.client_list()}
        r.close()
        return time.time()

    def stop(self) -> list[tuple[float, str, list[bytes]]]:
        assert self.sock is not None
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)
        return list(self.commands)


@dataclass
class Group:
    """Commands one connection sent together: when, as RESP, the replies they make, whether they subscribe and
    whether their latency counts (no blocking command among them)."""

    at: float
    data: bytes
    replies: int
    subscribes: bool
    timed: bool


@dataclass
class Conn:
    """One recorded connection in one copy."""

    groups: list[Group]
    to_end: bool = False  # it ran to the window's end: kept open
    subscriber: bool = False
    sock: socket.socket | None = None
    next: int = 0  # the next group to send
    awaited: list[list] = field(default_factory=list)  # [sent at, replies still to come, timed] per group sent
    connecting: float = 0.0  # when its connect began, while it has not finished
    pending: bytes = b""  # what waits for the connect to finish
    buf: bytearray = field(default_factory=bytearray)


def _groups(cmds: list[tuple[float, list[bytes]]]) -> list[tuple[float, list[list[bytes]]]]:
    """One connection's commands, those the server ran within GROUP_US of the previous one joined to it."""
    out: list[tuple[float, list[list[bytes]]]] = []
    last = -1e18
    for t, argv in cmds:
        if out and (t - last) * 1e6 <= GROUP_US:
            out[-1][1].append(argv)
        else:
            out.append((t, [argv]))
        last = t
    return out


def _replies(argv: list[bytes]) -> int:
    name = argv[0].upper()
    return max(1, len(argv) - 1) if name in SUBSCRIBING or name.endswith(b"UNSUBSCRIBE") else 1


def _timed(argv: list[bytes]) -> bool:
    name = argv[0].upper()
    return name not in BLOCKING and not (name == b"XREAD" and b"BLOCK" in (a.upper() for a in argv[1:4]))


def rename(ids: list[str], copy: int) -> dict[bytes, bytes]:
    """Each recorded lab id and room code → the copy's own, the same length (a 'z' mark and the copy's number)."""
    out = {}
    for i in ids:
        new = f"z{copy:03d}{i[4:]}"
        out[i.encode()] = (new.upper() if i.isupper() else new).encode()
    return out


def rewrite(data: bytes, names: dict[bytes, bytes], shift_s: float, span: tuple[float, float]) -> bytes:
    """data with each recorded name renamed and each Unix time within `span` (s, or ms) moved by shift_s; every
    change keeps its length, so RESP's lengths stay true."""
    for old, new in names.items():
        data = data.replace(old, new)

    def move(m: re.Match) -> bytes:
        whole, frac = m.group(1), m.group(2) or b""
        ms = len(whole) == 13
        if not span[0] <= int(whole) / (1000 if ms else 1) <= span[1]:
            return m.group(0)
        if ms:
            return b"%d" % (int(whole) + round(shift_s * 1000)) + frac
        moved = b"%.*f" % (max(0, len(frac) - 1), float(whole + frac) + shift_s)
        return moved if len(moved) == len(whole) + len(frac) else m.group(0)

    return _UNIX.sub(move, data)


def clone_keys(r: redis.Redis, copies: list[dict[bytes, bytes]]) -> int:
    """Copy every key whose name holds a recorded name under each copy's name for it (DUMP, RESTORE REPLACE, its TTL
    kept), through `r`, a client that answers bytes: each recorded name's keys are found and dumped once, whatever
    the copies. Returns the keys copied."""
    n = 0
    for old in {name for names in copies for name in names}:
        keys = list(r.scan_iter(match=b"*" + old + b"*", count=1000))
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.dump(k)
            pipe.pttl(k)
        got = pipe.execute()
        pipe = r.pipeline(transaction=False)
        for k, dumped, ttl in zip(keys, got[::2], got[1::2], strict=True):
            for names in copies if dumped is not None else ():
                pipe.restore(k.replace(old, names[old]), max(ttl, 0), dumped, replace=True)
                n += 1
        pipe.execute()
    return n


Plan = dict[str, tuple[list[tuple[float, list[bytes]]], bool]]


def plan(
    commands: list[tuple[float, str, list[bytes]]],
    window: tuple[float, float],
    open_at_start: set[str],
    ignore: set[str],
) -> Plan:
    """Per recorded connection: its commands to replay (subscriptions it made before the window, if it was open at
    the window's start, at the start; then its commands within the window) and whether it ran to the end."""
    per: dict[str, list[tuple[float, list[bytes]]]] = defaultdict(list)
    w0, w1 = window
    for t, addr, argv in commands:
        if addr in ignore or argv[0].upper() in (b"AUTH", b"HELLO", b"MONITOR"):
            continue
        if t < w0 and addr in open_at_start and argv[0].upper() in SUBSCRIBING:
            per[addr].append((w0, argv))
        elif w0 <= t <= w1:
            per[addr].append((t, argv))
    return {a: (cmds, cmds[-1][0] > w1 - 1.0) for a, cmds in per.items() if cmds}


def build(per: Plan, names: dict[bytes, bytes], w0: float, start: float, span: tuple[float, float]) -> list[Conn]:
    """One copy's connections: their groups encoded and rewritten, on the wall clock from `start` (for w0)."""
    conns = []
    for cmds, to_end in per.values():
        groups = [
            Group(
                start + t - w0,
                rewrite(b"".join(encode(a) for a in argvs), names, start - w0, span),
                sum(map(_replies, argvs)),
                any(a[0].upper() in SUBSCRIBING for a in argvs),
                all(map(_timed, argvs)),
            )
            for t, argvs in _groups(cmds)
        ]
        conns.append(Conn(groups, to_end=to_end))
    return conns


@dataclass
class Result:
    sent: int = 0
    errors: int = 0
    dropped: int = 0  # connections the server refused or closed
    connections: int = 0
    latency_ms: list[float] = field(default_factory=list)
    late_ms: list[float] = field(default_factory=list)
    connect_ms: list[float] = field(default_factory=list)  # how long each connection took to open
    client_cpu_s: float = 0.0
    at_measure: tuple = ()  # what `probe` returned as the window opened, and then as it closed
    at_end: tuple = ()
    measured_s: float = 0.0


def run(url: str, conns: list[Conn], measure: tuple[float, float], probe: Callable[[], tuple]) -> Result:
    """Replay `conns` (their groups on the wall clock) until measure[1]. Latency and lateness are kept for groups
    sent within `measure`; `probe()` is read as it opens and as it closes (the server's counters)."""
    host, port, auth = _connect_args(url)
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    hello = encode(auth) if auth else b""
    sel = selectors.EpollSelector()
    res = Result()
    cpu0 = time.process_time()
    due: list[tuple[float, int]] = [(c.groups[0].at, i) for i, c in enumerate(conns) if c.groups]
    heapq.heapify(due)
    waiting: set[int] = set()  # due, but awaiting the replies to its last group (sent when they are in)
    t_measure = 0.0

    def send(i: int, now: float, free: bool) -> None:
        c = conns[i]
        if c.next >= len(c.groups):  # dropped meanwhile: nothing more goes on it
            return
        g = c.groups[c.next]
        inside = measure[0] <= now <= measure[1]
        try:
            if c.sock is None:  # opened without waiting: a slow accept holds up this connection, not the replay
                c.sock = socket.socket(family, socket.SOCK_STREAM)
                c.sock.setblocking(False)
                c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                if c.sock.connect_ex(address) not in (0, errno.EINPROGRESS):
                    raise ConnectionRefusedError
                c.connecting = now
                sel.register(c.sock, selectors.EVENT_WRITE, i)
                res.connections += 1
                c.pending = hello
                if hello:
                    c.awaited.append([now, 1, False])
            if c.connecting:
                c.pending += g.data
            else:
                c.sock.sendall(g.data)
        except OSError:  # the server refused or dropped it (maxclients, an output buffer limit): counted, let go
            drop(i)
            return
        c.subscriber = c.subscriber or g.subscribes
        c.awaited.append([now, g.replies, g.timed and inside])
        if free and inside:
            res.late_ms.append(1000 * (now - g.at))
        res.sent += 1
        c.next += 1
        if c.next < len(c.groups):
            heapq.heappush(due, (c.groups[c.next].at, i))

    def close(i: int) -> None:
        c = conns[i]
        if c.sock is not None:
            sel.unregister(c.sock)
            c.sock.close()
            c.sock, c.connecting, c.pending = None, 0.0, b""

    def drop(i: int) -> None:
        res.dropped += 1
        close(i)
        conns[i].next = len(conns[i].groups)

    def connected(i: int) -> None:
        """Its connect finished: send what waited for it, then read."""
        c = conns[i]
        assert c.sock is not None
        if c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            drop(i)
            return
        res.connect_ms.append(1000 * (time.time() - c.connecting))
        c.connecting = 0.0
        c.sock.setblocking(True)
        sel.modify(c.sock, selectors.EVENT_READ, i)
        try:
            c.sock.sendall(c.pending)
        except OSError:
            drop(i)
        c.pending = b""

    def read(i: int) -> None:
        c = conns[i]
        try:
            chunk = c.sock.recv(1 << 16) if c.sock else b""
        except OSError:
            chunk = b""
        if not chunk:
            if c.next < len(c.groups) or c.to_end:
                drop(i)
            else:
                close(i)
            return
        if c.subscriber:  # pushed messages: read and let go
            c.awaited.clear()
            return
        c.buf += chunk
        got, pos = time.time(), 0
        while c.awaited:
            end = reply_end(c.buf, pos)
            if end < 0:
                break
            res.errors += c.buf[pos] == 45  # "-": an error reply
            pos = end
            head = c.awaited[0]
            head[1] -= 1
            if head[1] == 0:
                c.awaited.pop(0)
                if head[2]:
                    res.latency_ms.append(1000 * (got - head[0]))
        del c.buf[:pos]
        if c.awaited:
            return
        if i in waiting:
            waiting.discard(i)
            send(i, got, free=False)
        elif c.next >= len(c.groups) and not c.to_end:
            close(i)  # a short-lived connection: its last reply ends it

    while True:
        now = time.time()
        if not t_measure and now >= measure[0]:
            res.at_measure, t_measure = probe(), time.time()
        if now >= measure[1]:
            break
        while due and due[0][0] <= now:
            _, i = heapq.heappop(due)
            if conns[i].awaited and not conns[i].subscriber:
                waiting.add(i)
            else:
                send(i, now, free=True)
        timeout = min(due[0][0] if due else measure[1], measure[1]) - time.time()
        if not t_measure:
            timeout = min(timeout, measure[0] - time.time())
        for key, mask in sel.select(max(0.0, min(timeout, 0.05))):
            (connected if mask & selectors.EVENT_WRITE else read)(key.data)
    res.at_end, res.measured_s = probe(), time.time() - t_measure
    for i in range(len(conns)):
        close(i)
    sel.close()
    res.client_cpu_s = time.process_time() - cpu0
    return res


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` onto `cpus`."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # a thread that ended


def at_scale(
    url: str,
    server_pid: int,
    commands: list[tuple[float, str, list[bytes]]],
    window: tuple[float, float],
    open_at_start: set[str],
    ids: list[str],
    labs: int,
    copies: list[int],
    ignore: set[str],
) -> list[dict]:
    """Replay `n` copies of the recorded class (`labs` labs; `ids` its lab ids and room code) for each n in
    `copies`, the server pinned to one core and this process to another (where the box has two): per step the
    server's CPU, requests and commands per lab-second, latency and the replayer's lateness."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    per = plan(commands, window, open_at_start, ignore)
    w0, w1 = window
    span = (w0 - 86400.0, w1 + 86400.0)
    admin = redis.Redis.from_url(url)
    admin.config_set("maxmemory", 0)  # the copies' keys on top of the class's (a bench server, thrown away after)
    # no AOF rewrite meanwhile: it forks a child, which on a server's own machine runs on another core, and here
    # would share the server's one core (the AOF itself is still written, and fsynced every second)
    admin.config_set("auto-aof-rewrite-percentage", 0)
    two = (os.cpu_count() or 1) >= 2
    own = os.sched_getaffinity(0)
    if two:
        pin(server_pid, {0})
        os.sched_setaffinity(0, {1})

    def probe() -> tuple[float, int, int, int, int, int, int]:
        stats, clients, aof = admin.info("stats"), admin.info("clients"), admin.info("persistence")
        return (
            run_s(server_pid),
            int(stats["total_reads_processed"]),
            int(stats["total_commands_processed"]),
            int(stats["rejected_connections"]),
            int(clients["connected_clients"]),
            int(stats["total_forks"]),
            int(aof.get("aof_delayed_fsync", 0)),
        )

    rows, made = [], 0
    try:
        for n in copies:
            names = [rename(ids, c) for c in range(n)]
            clone_keys(admin, names[made:n])
            made = max(made, n)
            t = time.time()
            build(per, names[0], w0, t, span)
            start = time.time() + 1.0 + 1.5 * n * (time.time() - t)  # building the copies takes about this long
            conns = [conn for c in range(n) for conn in build(per, names[c], w0, start + STAGGER_S * c / n, span)]
            late_start = max(0.0, time.time() - start)
            time.sleep(max(0.0, start - time.time()))
            res = run(url, conns, (start + STAGGER_S + 2.0, start + (w1 - w0) - 0.5), probe)
            cpu0, reads0, ops0, rej0, _, forks0, delayed0 = res.at_measure
            cpu1, reads1, ops1, rej1, clients, forks1, delayed1 = res.at_end
            s, total = res.measured_s, n * labs
            srv = (cpu1 - cpu0) / s
            rows.append(
                {
                    "labs": total,
                    "copies": n,
                    "server_cpu_pct": round(100 * srv, 1),
                    "server_ms_per_lab_s": round(1000 * srv / total, 3),
                    "requests_per_lab_s": round((reads1 - reads0) / s / total, 1),
                    "commands_per_lab_s": round((ops1 - ops0) / s / total, 1),
                    "latency_p50_ms": round(pct(res.latency_ms, 50), 2) if res.latency_ms else None,
                    "latency_p99_ms": round(pct(res.latency_ms, 99), 2) if res.latency_ms else None,
                    "late_p99_ms": round(pct(res.late_ms, 99), 1) if res.late_ms else None,
                    "error_replies": res.errors,
                    "groups_sent": res.sent,
                    "connections": res.connections,
                    "clients_at_end": clients,
                    "dropped": res.dropped,
                    "rejected": rej1 - rej0,
                    "forks": forks1 - forks0,
                    "aof_delayed_fsync": delayed1 - delayed0,  # writes that waited on a slow fsync (the disk)
                    "connect_max_ms": round(max(res.connect_ms), 1) if res.connect_ms else None,
                    "replayer_cores": round(res.client_cpu_s / (time.time() - start), 2),
                    "late_start_s": round(late_start, 2),
                    "pinned": two,
                }
            )
            print(f"  replay {rows[-1]}", flush=True)
    finally:
        if two:
            os.sched_setaffinity(0, own)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        admin.close()
    return rows
