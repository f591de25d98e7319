"""term: a class of 30 reads every chapter twice in a day on one deployment at the README's defaults.

Issue 39's day of a term. TERM_STUDENTS (30) students, each from a loopback address of their own (another
client, as the server counts them), read ch0…ch8 in order in the morning and all nine again in the afternoon:
540 chapter opens. A visit does what a chapter page does: the first time it opens a new lab (POST /api/labs),
the second time the lab the browser remembered (GET of its snapshot, which resumes it and first unfolds it if
it was folded); it holds the lab's WebSocket open for the visit, sends one job of the small sample, stays
TERM_VISIT_S (6 s, ± a third, at random), then closes the socket and opens the next chapter. Students start
TERM_STAGGER_S (0.5 s) apart. Between the two passes every lab is left alone until it parks (PARK_AFTER, a
minute at the defaults), and then folded (`core.archive.fold`), as PARKED_MEMORY folds a term's older labs:
the afternoon unfolds every one.

The server runs the defaults: MAX_LABS 40 running, MAX_WORKERS 128 processes, MAX_CLIENT_LABS 4,
MAX_CLIENT_LIVE_LABS 40, RATE_LABS 20 a minute, PARK_AFTER 60 s, LAB_IDLE_TTL. With 30 students at a page each
and the labs they just left still running, the deployment sits at its caps all day: what lets the class in is
the reservation parking the labs nobody is using (core/parking.py `reserve`, `quiet`).

Measured: every answer that was not a success, by its error (labs_full must never appear); the labs whose
history came back whole (the event ids a student saw before leaving are the first ids on return); the most
labs one address kept alive; the time to open a new lab and to reopen a folded one (median, p95); the labs
parked to make room. RATIO: reopen p95 over new-lab p95, both measured in this run.

`python -m bench term` (on demand: minutes; the bench runner's shared stack is not used). Knobs:
TERM_STUDENTS (30), TERM_VISIT_S (6), TERM_STAGGER_S (0.5).
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

import redis
import websocket

from bench.common import Bench, report, rnd, wait
from core import archive, parking, slots, stream
from core.config import Config
from core.keys import PARKED
from runtime.harness.client import Api
from runtime.harness.stack import UNLIMITED, Stack
from runtime.harness.stats import pct

NAME = "term"
STUDENTS = int(os.environ.get("TERM_STUDENTS", "30"))
VISIT_S = float(os.environ.get("TERM_VISIT_S", "6"))
STAGGER_S = float(os.environ.get("TERM_STAGGER_S", "0.5"))
CHAPTERS = [f"ch{i}" for i in range(9)]
JOB = {"sample": "carphone_pristine", "duration_s": 30}


class Student:
    """One browser: its own address, the labs it remembers (as widget/util.js `labStore`), what it saw."""

    def __init__(self, n: int, stack: Stack):
        self.address = f"127.0.3.{n + 1}"
        self.stack = stack
        self.api = Api(stack.url, source=self.address, timeout=60, offline_ok=True)
        self.labs: dict[str, dict] = {}  # preset -> {lab_id, token}
        self.seen: dict[str, list[str]] = {}  # lab -> event ids before it was left
        self.refusals: Counter[str] = Counter()
        self.open_ms: list[float] = []
        self.reopen_ms: list[float] = []
        self.whole: list[bool] = []  # per reopened lab: its history came back whole
        self.delay = n * STAGGER_S

    def walk(self) -> None:
        """One pass through the course, from this student's place in the stagger."""
        time.sleep(self.delay)
        for preset in CHAPTERS:
            self.visit(preset)

    def open(self, preset: str) -> dict | None:
        """The chapter page's opening: the remembered lab if there is one, else a new one (None: refused)."""
        lab = self.labs.get(preset)
        t = time.perf_counter()
        if lab:
            res = self.api.call("GET", f"/api/labs/{lab['lab_id']}", token=lab["token"])
            if res.status == 200:
                self.reopen_ms.append((time.perf_counter() - t) * 1000)
                ids = [e["id"] for e in self.api.events(lab)]
                before = self.seen[lab["lab_id"]]
                self.whole.append(ids[: len(before)] == before)
                return lab
        else:
            res = self.api.call("POST", "/api/labs", {"preset": preset})
            if res.status == 201:
                self.open_ms.append((time.perf_counter() - t) * 1000)
                lab = res.json()
                self.labs[preset] = lab
                return lab
        self.refusals[(res.json() or {}).get("error") or f"http {res.status}"] += 1
        return None

    def socket(self, lab: dict) -> websocket.WebSocket | None:
        """The page's WebSocket, from this student's address."""
        url = f"{self.stack.ws_base}/ws/labs/{lab['lab_id']}?after=0&token={lab['token']}"
        parts = urlsplit(url)
        sock = socket.socket()
        sock.bind((self.address, 0))
        try:
            sock.connect((parts.hostname, parts.port))
            return websocket.create_connection(url, socket=sock, timeout=10, origin=self.stack.url)
        except (OSError, websocket.WebSocketException) as e:
            sock.close()
            self.refusals[f"websocket: {type(e).__name__}"] += 1
            return None

    def visit(self, preset: str) -> None:
        lab = self.open(preset)
        if lab is None:
            return
        ws = self.socket(lab)
        try:
            res = self.api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", JOB, lab["token"])
            if res.status != 202:
                self.refusals[f"job: {(res.json() or {}).get('error') or res.status}"] += 1
            stay = time.monotonic() + VISIT_S * random.uniform(2 / 3, 4 / 3)
            while time.monotonic() < stay:
                if ws is not None:
                    try:
                        ws.settimeout(max(0.05, stay - time.monotonic()))
                        ws.recv()
                    except websocket.WebSocketTimeoutException:
                        pass
                    except (OSError, websocket.WebSocketException):
                        ws = None
                else:
                    time.sleep(0.2)
            self.seen[lab["lab_id"]] = [e["id"] for e in self.api.events(lab)]
        finally:
            if ws is not None:
                ws.close()


def one_pass(students: list[Student]) -> float:
    """Every student walks the course at once (staggered); the pass's real seconds."""
    t = time.monotonic()
    threads = [threading.Thread(target=s.walk, name=f"student-{s.address}", daemon=True) for s in students]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.monotonic() - t


def made_room(r: redis.Redis, labs: list[str]) -> int:
    """How many of `labs` a reservation parked to let another lab run (their stream says why)."""
    return sum(
        e["type"] == "lab.parked" and e["data"].get("why") == parking.FULL_WHY
        for lab in labs
        for e in stream.read_after(r, lab, "0", count=100_000)
    )


def run(_b: Bench | None = None) -> dict:
    cfg = Config()
    env = {name: "" for name in (*UNLIMITED, "MAX_LABS", "LAB_IDLE_TTL")}  # "" reads as the default
    with Stack("term", env=env) as stack:
        r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
        students = [Student(n, stack) for n in range(STUDENTS)]
        morning = one_pass(students)
        kept = Counter(v.split(" ", 1)[0] for v in r.hvals(slots.OWNERS))
        labs = [lab["lab_id"] for s in students for lab in s.labs.values()]
        # the break: every lab parks on its own (PARK_AFTER), then is folded as a term's older labs are
        wait(lambda: set(labs) <= r.smembers(PARKED), cfg.park_after * 3, "every lab to park after the morning")
        folded = sum(archive.fold(r, lab) is not None for lab in labs)
        afternoon = one_pass(students)
        refusals = sum((s.refusals for s in students), Counter())
        new_ms = [x for s in students for x in s.open_ms]
        back_ms = [x for s in students for x in s.reopen_ms]
        whole = [x for s in students for x in s.whole]
        rows = [
            {"what": "chapter opens", "value": len(new_ms) + len(back_ms), "of": 2 * STUDENTS * len(CHAPTERS)},
            {"what": "refused: labs_full", "value": refusals.get("labs_full", 0), "of": "must be 0"},
            {
                "what": "refused, any other way",
                "value": sum(refusals.values()) - refusals.get("labs_full", 0),
                "of": ", ".join(f"{k} {v}" for k, v in refusals.items() if k != "labs_full") or "none",
            },
            {"what": "labs reopened with their whole history", "value": sum(whole), "of": len(whole)},
            {"what": "labs folded over the break", "value": folded, "of": len(labs)},
            {"what": "parks that made room", "value": made_room(r, labs), "of": "a lab may park more than once"},
            {
                "what": "most labs one address kept",
                "value": max(kept.values() or [0]),
                "of": f"cap {cfg.max_client_live_labs}",
            },
            {
                "what": "new lab, ms (median / p95)",
                "value": f"{rnd(pct(new_ms, 50), 0)} / {rnd(pct(new_ms, 95), 0)}",
                "of": len(new_ms),
            },
            {
                "what": "reopen folded lab, ms (median / p95)",
                "value": f"{rnd(pct(back_ms, 50), 0)} / {rnd(pct(back_ms, 95), 0)}",
                "of": len(back_ms),
            },
            {"what": "pass, s (morning / afternoon)", "value": f"{rnd(morning, 0)} / {rnd(afternoon, 0)}", "of": ""},
        ]
        r.close()
        return report(
            NAME,
            f"a class of {STUDENTS} reads all nine chapters twice at the defaults",
            ["what", "value", "of"],
            rows,
            {
                "label": "reopen p95 / new-lab p95",
                "value": rnd(pct(back_ms, 95) / pct(new_ms, 95), 2) if new_ms and back_ms else None,
                "baseline": "a new lab's opening, measured in the same run",
            },
            {
                "students": STUDENTS,
                "visit_s": VISIT_S,
                "stagger_s": STAGGER_S,
                "max_labs": cfg.max_labs,
                "max_workers": cfg.max_workers,
                "park_after": cfg.park_after,
                "lab_idle_ttl": cfg.lab_idle_ttl,
            },
        )
