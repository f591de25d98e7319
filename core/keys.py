"""Redis key names for one lab: every key a lab owns starts with `lab:{id}:`, so teardown is a scan."""

from __future__ import annotations


def key(lab: str, *parts: str) -> str:
    return ":".join(("lab", lab, *parts))


def job(lab: str, job_id: str) -> str:
    return key(lab, "job", job_id)


def attempts(lab: str, job_id: str) -> str:
    return key(lab, "job", job_id, "attempts")


def queue_name(lab: str) -> str:
    """The lab's RQ queue (RQ prefixes it with `rq:queue:`)."""
    return f"lab-{lab}"


LABS = "labs"  # set of live lab ids
POOL_COMMANDS = "pool:commands"  # list the supervisor pops kill/scale commands from


def msg(lab: str, job_id: str) -> str:
    """The broker's message for a job (visibility, receive count), kept apart from the job's record."""
    return key(lab, "msg", job_id)
