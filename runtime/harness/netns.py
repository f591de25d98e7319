"""A class on several machines, made on one: the server, the web tier and each pool host in a network
namespace of its own (issue 30).

`Net` is a bridge in this namespace (so the test process reaches every part) and one namespace per part,
joined to it by a veth pair, on a /24 of its own chosen free. Each namespace's loopback is its own, as on a
machine of its own: a process that still named 127.0.0.1 for another part would find nothing there.
`NetStack` runs each part with the launcher's own role (`python -m runtime.launcher server|web|pool`,
the commands of docs/deploy.md's "More than one machine") under `ip netns exec`: the server listens on its namespace's
address only, with an ACL user and password per role; the web and pool hosts reach it with their own user
and share nothing but the network (each its own VAR_DIR).
"""

from __future__ import annotations

import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

import redis

from core.config import ROOT
from core.procs import alive, children, processes_matching, server_tag, wait
from runtime import embedded_redis
from runtime.harness.hosts import LEASE_S, HostsStack
from runtime.launcher import wait_healthy

SERVER_PORT = 6390  # fixed: each namespace has ports of its own, nothing else listens there
WEB_PORT = 8000


def unavailable() -> str:
    """Why network namespaces cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if not shutil.which("ip"):
        return "no `ip` command (apt-get install iproute2)"
    probe = f"awlprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def free_subnet() -> str:
    """A 10.x.y.0/24 prefix ("10.x.y") no address or route of this machine is in."""
    used = (
        subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
        + subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    )
    taken = set(re.findall(r"\b10\.(\d+)\.(\d+)\.", used))
    for _ in range(1000):
        x, y = random.randint(100, 250), random.randint(0, 254)
        if (str(x), str(y)) not in taken:
            return f"10.{x}.{y}"
    raise RuntimeError("no free 10.x.y.0/24 subnet")


class Net:
    """A bridge and one namespace per part. close() removes everything it made, whatever failed."""

    def __init__(self) -> None:
        self.tag = f"awl{os.getpid() % 100000}"  # link names stay within 15 characters
        self.prefix = free_subnet()
        self.bridge = f"{self.tag}br"
        self.spaces: dict[str, str] = {}  # part → namespace
        self.addrs: dict[str, str] = {}  # part → its address
        self.links: list[str] = []  # this namespace's ends of the veth pairs

    def open(self) -> None:
        """Make the bridge (apart from __init__: close() can then undo whatever part of it was made)."""
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.prefix}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self, part: str) -> str:
        n = len(self.spaces) + 2
        ns, outer, inner = f"{self.tag}-{part}", f"{self.tag}v{n}", f"{self.tag}n{n}"
        _ip("netns", "add", ns)
        self.spaces[part] = ns
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        self.links.append(outer)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        addr = self.addrs[part] = f"{self.prefix}.{n}"
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
        _ip("-n", ns, "link", "set", inner, "up")
        _ip("-n", ns, "link", "set", "lo", "up")  # a machine's own address is reached through it
        return addr

    def exec(self, part: str) -> list[str]:
        """The prefix that runs a command inside `part`'s namespace (`ip netns exec` execs: same pid)."""
        return ["ip", "netns", "exec", self.spaces[part]]

    def close(self) -> None:
        """Kill what still runs inside (a namespace lives on while a process is in it, and an orphan such as
        a server whose launcher was SIGKILLed would keep it and its port), then remove it and the bridge."""
        pids = [
            int(pid)
            for ns in self.spaces.values()
            for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        ]
        try:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in pids:
                wait(lambda pid=pid: not alive(pid), 10, f"process {pid} of a namespace to exit")
        finally:
            for ns in self.spaces.values():
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            for link in [*self.links, self.bridge]:  # a veth's pair goes with it (gone already with its namespace)
                subprocess.run(["ip", "link", "del", link], capture_output=True)
            self.links.clear()
            self.spaces.clear()


class NetStack(HostsStack):
    """HostsStack's parts (a server, a web process, `n_hosts` pool hosts) each in a namespace of its own; each
    pool host with its CPU budget when `host_cpus` is given (HostsStack's cgroup quota, as a machine's cores)."""

    def __init__(self, name: str, n_hosts: int = 2, lease_s: float = LEASE_S, **kw):
        super().__init__(name, n_hosts=n_hosts, lease_s=lease_s, **kw)
        self.net: Net | None = None
        self.server_part: subprocess.Popen | None = None  # the server's launcher (`launcher server`)
        self.passwords = {role: secrets.token_urlsafe(16) for role in embedded_redis.ROLES}
        self.port = WEB_PORT

    # --- addresses ----------------------------------------------------------------------------
    def role_url(self, role: str) -> str:
        assert self.net is not None
        return embedded_redis.server_url(self.net.addrs["server"], SERVER_PORT, role, self.passwords[role])

    @property
    def redis_url(self) -> str:
        """The test's own client (the drill's reads, blob probes) is the operator: the admin user."""
        return self.role_url("admin")

    @property
    def url(self) -> str:
        assert self.net is not None
        return f"http://{self.net.addrs['web']}:{WEB_PORT}"

    @property
    def ws_base(self) -> str:
        return self.url.replace("http://", "ws://", 1)

    def part_env(self, role: str, **extra: str) -> dict[str, str]:
        """A part's environment: the defaults, its role's URL (its own ACL user) and nothing of another's."""
        env = dict(self.env(), REDIS_URL=self.role_url(role), PUBLIC_URL=self.url, **extra)
        for k in ("REDIS_WEB_PASSWORD", "REDIS_POOL_PASSWORD", "REDIS_ADMIN_PASSWORD"):
            env.pop(k, None)
        return env

    # --- parts --------------------------------------------------------------------------------
    def start(self) -> NetStack:
        self.net = Net()
        self.net.open()
        for part in ("server", "web", *(f"p{i}" for i in range(1, self.n_hosts + 1))):
            self.net.add(part)
        return super().start()

    def start_redis(self) -> None:
        assert self.net is not None
        env = dict(
            self.env(),
            SERVER_BIND=self.net.addrs["server"],
            SERVER_PORT=str(SERVER_PORT),
            VAR_DIR=str(self.root / "var-server"),
            **{f"REDIS_{r.upper()}_PASSWORD": pw for r, pw in self.passwords.items()},
        )
        env.pop("REDIS_URL")
        self.server_part = self._part("server", env, "server")
        r = self.redis_client()
        wait(lambda: _answers(r), 30, f"the server on {self.net.addrs['server']}:{SERVER_PORT} to answer the admin")

    def start_supervisor(self) -> subprocess.Popen:
        for i in range(1, self.n_hosts + 1):
            self.start_host(f"p{i}")
        self.supervisor = self.hosts["p1"]
        return self.supervisor

    def start_host(self, host: str) -> subprocess.Popen:
        env = self.part_env("pool", POOL_HOST_ID=host, VAR_DIR=str(self.root / f"var-{host}"))
        proc = self.hosts[host] = self._budgeted(host, lambda: self._part(host, env, "pool"))
        return proc

    @property
    def server_pid(self) -> int | None:
        """The server process (valkey, the server launcher's child), for its own CPU and commands."""
        if self.server_part is None:
            return None
        return wait(lambda: (children(self.server_part.pid) or [0])[0], 20, "the server launcher's valkey")

    def start_web(self, timeout: float = 60) -> subprocess.Popen:
        assert self.net is not None
        env = self.part_env("web", HOST=self.net.addrs["web"], PORT=str(WEB_PORT), VAR_DIR=str(self.root / "var-web"))
        self.web = self._part("web", env, "web")
        wait_healthy(self.url, [self.web], timeout=timeout)
        return self.web

    def _part(self, part: str, env: dict[str, str], role: str) -> subprocess.Popen:
        assert self.net is not None and self.log_dir is not None
        out = open(self.log_dir / f"{part}.log", "ab")
        try:
            proc = subprocess.Popen(
                [*self.net.exec(part), sys.executable, "-m", "runtime.launcher", role],
                env=env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        finally:
            out.close()
        self.started.append(proc)
        return proc

    # --- teardown -----------------------------------------------------------------------------
    def leftovers(self) -> dict[int, str]:
        if self.net is None:
            return {}
        return processes_matching(f"{self.root}/var-", f"{server_tag(self.redis_url)} ")

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self.net is not None:
                self.net.close()


def _answers(r: redis.Redis) -> bool:
    try:
        return bool(r.ping())
    except redis.RedisError:
        time.sleep(0.1)
        return False
