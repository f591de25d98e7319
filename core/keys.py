"""Where a lab's things are named: Redis keys (every key a lab owns starts with `lab:{id}:`, so teardown is a
scan) and the lab's local directory on a host (scratch files only; nothing another host needs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis


def keyspace(r: redis.Redis, name: str) -> str:
    """The keyspace-notification channel of key `name` (or a glob of keys) on `r`'s database."""
    return f"__keyspace@{r.connection_pool.connection_kwargs.get('db', 0)}__:{name}"


def key(lab: str, *parts: str) -> str:
    return ":".join(("lab", lab, *parts))


def job(lab: str, job_id: str) -> str:
    return key(lab, "job", job_id)


def attempts(lab: str, job_id: str) -> str:
    return key(lab, "job", job_id, "attempts")


def lab_dir(var_dir: Path, lab: str) -> Path:
    return var_dir / "labs" / lab


def queue_name(lab: str) -> str:
    """The lab's RQ queue (RQ prefixes it with `rq:queue:`)."""
    return f"lab-{lab}"


LABS = "labs"  # set of live lab ids
PARKED = "labs:parked"  # the live labs that are parked: no processes, no slot (core/parking.py)
HOSTS = "pool:hosts"  # set of pool host ids that have registered (an entry expires when its host goes silent)
HOST_SEQ = "pool:host:seq"  # hands out p1, p2, … to hosts that bring no POOL_HOST_ID


def host_key(host: str) -> str:
    """The host's registry entry (a hash with a TTL its heartbeat renews)."""
    return f"pool:host:{host}"


def spare_assignment(token: str) -> str:
    """The list a pre-started worker process (workers/spare.py) waits on for the lab it will serve."""
    return f"pool:spare:{token}"


def web_alive(process: str) -> str:
    """A web process's heartbeat (app/idempotency.py): gone a few seconds after the process is."""
    return f"web:alive:{process}"


def host_running(host: str) -> str:
    """The processes a pool host really runs now (its workers and scheduler replicas), for /metrics."""
    return f"pool:host:{host}:running"


def host_commands(host: str) -> str:
    """The list a pool host pops kill and replica commands for the labs it owns from."""
    return f"pool:host:{host}:commands"


def owner(lab: str) -> str:
    """The lab's ownership lease: the owning host's id, with a TTL its heartbeat renews."""
    return key(lab, "owner")


def msg(lab: str, job_id: str) -> str:
    """The broker's message for a job (visibility, receive count), kept apart from the job's record."""
    return key(lab, "msg", job_id)
