"""A fault drill's stack and clients: `drill_stack` (its processes log to files under the stack's root),
`drill_client` (a refused or cut connection is status 0, not a raise) and `WsTail`, a WebSocket client
that records every event id and reconnects after any close. The drills and the classroom benchmark use them."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import websocket

from core import stream
from runtime.harness.client import Api
from runtime.harness.stack import Stack


def drill_stack(name: str, redis_url: str | None = None, persist: bool = False, root: Path | None = None) -> Stack:
    return Stack(name, root=root, redis_url=redis_url, persist=persist, logs=True)


def drill_client(s: Stack) -> Api:
    """The drills' client: a refused or cut connection (a server being restarted) is status 0, not a raise."""
    return s.api(offline_ok=True, timeout=30)


class WsTail(threading.Thread):
    """One WebSocket client: records every event id, reconnects with after=<last id> on any close."""

    def __init__(self, stack: Stack, lab: dict, name: str, after: str = "0"):
        super().__init__(name=f"ws-{name}", daemon=True)
        self.stack, self.lab = stack, lab
        self.first_after = after
        self.ids: list[str] = []
        self.seen: Counter[str] = Counter()  # events received, by type
        self.lags: list[float] = []  # receive time − the event's t_real, seconds
        self.arrivals: list[float] = []
        self.connections = 0
        self.connect_failures = 0
        self.target: str | None = None
        self.stop = threading.Event()
        self.finished = threading.Event()
        self.error: str | None = None

    def url(self) -> str:
        after = self.ids[-1] if self.ids else self.first_after
        return f"{self.stack.ws_base}/ws/labs/{self.lab['lab_id']}?after={after}&token={self.lab['token']}"

    def reached(self) -> bool:
        return self.target is not None and bool(self.ids) and stream.order(self.ids[-1]) >= stream.order(self.target)

    def run(self) -> None:
        try:
            while not self.stop.is_set() and not self.reached():
                try:
                    ws = websocket.create_connection(self.url(), timeout=5, origin=self.stack.url)
                except (OSError, websocket.WebSocketException):
                    self.connect_failures += 1
                    time.sleep(0.2)
                    continue
                self.connections += 1
                ws.settimeout(0.5)
                try:
                    while not self.stop.is_set() and not self.reached():
                        try:
                            msg = ws.recv()
                        except websocket.WebSocketTimeoutException:
                            continue
                        if not msg:
                            break  # closed by the server
                        ev = json.loads(msg)
                        now = time.time()
                        self.ids.append(ev["id"])
                        self.seen[ev["type"]] += 1
                        self.arrivals.append(now)
                        self.lags.append(now - float(ev.get("t_real", now)))
                except (OSError, websocket.WebSocketException):
                    pass
                finally:
                    ws.close()
        except Exception as e:  # noqa: BLE001 - reported in the result, never a hang
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.finished.set()
