"""Process configuration from environment variables, with defaults that work on a laptop.

Every tunable a deployer may set lives here, once; lab *settings* (what a learner changes)
live in `app.settings` instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


@dataclass
class Config:
    """What one web or pool process needs to know; `from_env()` reads it."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    """The Redis-protocol server every process shares (labs, RQ queues, event streams)."""
    port: int = 8000
    """Port the web process listens on."""
    host: str = "127.0.0.1"
    """Interface the web process binds; set HOST=0.0.0.0 for a classroom on the local network."""
    speed: float = 20.0
    """Default simulated seconds per real second for new labs (the lesson's demo runs at 20x)."""
    max_upload_bytes: int = 20 * 1024 * 1024
    """Largest video upload accepted; larger requests get 413 before they reach a worker."""
    max_labs: int = 40
    """Labs alive at once on this deployment; creating one more answers 429."""
    lab_idle_ttl: int = 1800
    """Real seconds without activity after which a lab is removed with its keys, files and workers."""
    var_dir: Path = field(default_factory=lambda: ROOT / "var")
    """Where uploads, transcoded outputs and the embedded server's data live."""
    secret_key: str = ""
    """Flask secret (signs nothing security-critical; tokens are random and checked in Redis)."""
    long_poll_max: int = 32
    """Long-polls this web process holds at once. gthread spends a thread per held request (and per
    WebSocket), so the cap keeps held polls from starving everything else; beyond it: 503."""
    long_poll_per_lab: int = 12
    """Long-polls one lab may hold at once, so one lab cannot take the whole budget; beyond it: 429."""
    webhook_allowlist: tuple[str, ...] = ()
    """URL prefixes a webhook may target despite resolving to a private or loopback address. Empty in
    any real deployment; the test suite sets it to one loopback port it owns (WEBHOOK_TEST_ALLOWLIST)."""
    testing: bool = False

    @classmethod
    def from_env(cls) -> Config:
        return cls(
            redis_url=os.environ.get("REDIS_URL") or cls.redis_url,
            port=_int("PORT", cls.port),
            host=os.environ.get("HOST") or cls.host,
            speed=_float("SPEED", cls.speed),
            max_upload_bytes=_int("MAX_UPLOAD_BYTES", cls.max_upload_bytes),
            max_labs=_int("MAX_LABS", cls.max_labs),
            lab_idle_ttl=_int("LAB_IDLE_TTL", cls.lab_idle_ttl),
            var_dir=Path(os.environ.get("VAR_DIR") or ROOT / "var"),
            secret_key=os.environ.get("SECRET_KEY") or os.urandom(16).hex(),
            long_poll_max=_int("LONG_POLL_MAX", cls.long_poll_max),
            long_poll_per_lab=_int("LONG_POLL_PER_LAB", cls.long_poll_per_lab),
            webhook_allowlist=tuple(p for p in os.environ.get("WEBHOOK_TEST_ALLOWLIST", "").split(",") if p),
        )
