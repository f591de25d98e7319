"""The command log: which commands each role really sends the Redis-protocol server, recorded from MONITOR.

The ACL allowlists (runtime/embedded_redis.py ROLES) are written from it. `tests/conftest.py` starts one on
the session's server when COMMAND_LOG names a file: every command is attributed to the process that sent it
(its connection's port, looked up with `ss`, then the process's command line: gunicorn → web, the supervisor,
its spares, rq workers and replicas → pool, pytest itself → test), and a script's commands to the client that
ran the script (MONITOR lists them right after its EVALSHA, and the server checks them against that client's
ACL). At the end the file holds role → sorted `command` or `command|subcommand` names.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path

import redis

CONTAINERS = {
    "CLIENT",
    "CONFIG",
    "XINFO",
    "XGROUP",
    "OBJECT",
    "MEMORY",
    "SCRIPT",
    "FUNCTION",
    "ACL",
    "COMMAND",
    "CLUSTER",
    "LATENCY",
    "SLOWLOG",
    "MODULE",
    "PUBSUB",
    "DEBUG",
}
SCRIPTS = {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"}
_PEER = re.compile(r"127\.0\.0\.1:(\d+)\s+\S+:(\d+)\s+users:\(\(\"[^\"]*\",pid=(\d+)")


def role_of(pid: int) -> str:
    """web, pool or test, from the process's command line."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "gunicorn" in cmd or "web_worker" in cmd:
        return "web"
    if "pytest" in cmd:
        return "test"
    if "workers." in cmd or "rq" in cmd:
        return "pool"
    return "other"


def name_of(command: str) -> str:
    words = command.split(" ", 2)
    head = words[0].upper()
    if head in CONTAINERS and len(words) > 1:
        return f"{head.lower()}|{words[1].lower()}"
    return head.lower()


class CommandLog:
    """MONITOR on `url` (a user that may run it) while it runs; `stop()` writes `path` and returns the log."""

    def __init__(self, url: str, port: int, path: Path):
        self.url, self.port, self.path = url, port, path
        self.roles: dict[str, str] = {}  # client port → role
        self.lines: list[tuple[str, str]] = []  # (client port, or "lua"; command name), in the server's order
        self.running = True
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.threads = [
            threading.Thread(target=self._monitor, daemon=True),
            threading.Thread(target=self._map_ports, daemon=True),
        ]

    def start(self) -> CommandLog:
        for t in self.threads:
            t.start()
        return self

    def _map_ports(self) -> None:
        while self.running:
            out = subprocess.run(
                ["ss", "-tnpH", "state", "established", f"dport = :{self.port}"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            for local, _remote, pid in _PEER.findall(out):
                if local not in self.roles:
                    self.roles[local] = role_of(int(pid))
            threading.Event().wait(0.05)

    def _monitor(self) -> None:
        try:
            with self.client.monitor() as m:
                for cmd in m.listen():
                    if not self.running:
                        return
                    port = "lua" if cmd["client_type"] == "lua" else str(cmd["client_port"])
                    self.lines.append((port, name_of(cmd["command"])))
        except redis.RedisError:
            return  # the server stopped

    def stop(self) -> dict[str, list[str]]:
        self.running = False
        seen: dict[str, set[str]] = {}
        last = "unknown"
        for port, name in list(self.lines):  # a connection too short-lived for `ss` to see stays "unknown"
            role = last if port == "lua" else self.roles.get(port, "unknown")
            if name.upper() in SCRIPTS:
                last = role
            seen.setdefault(role, set()).add(name)
        log = {role: sorted(names) for role, names in sorted(seen.items())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(log, indent=1) + "\n")
        return log
