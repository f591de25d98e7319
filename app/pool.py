"""The web process asks the pool for what only the process that spawned a worker may do.

Several pool hosts may share the server (workers/hosts.py): a command goes to the list of the host
that holds the lab's lease. If the lab moves while the command waits (its host went silent, or is
handing over), it is sent again to the new owner; a command id makes sure only one host carries it
out, and every copy answers on the same reply list.
"""

from __future__ import annotations

import json
import time
import uuid

import redis

from app.errors import ApiError
from core.keys import host_commands, owner

WAIT_S = 10.0  # about three lease periods plus worker start: long enough to ride out a move
POLL_S = 0.25  # how often the owner is looked up again while waiting


def ask_pool(r: redis.Redis, command: dict, wait_s: float = WAIT_S) -> dict:
    """Hand a kill to the lab's owning pool host and wait for its answer: only the process that
    spawned a worker (or replica) may signal it, so the web process asks rather than kills."""
    cid = uuid.uuid4().hex
    reply = f"pool:reply:{cid}"
    msg = json.dumps({**command, "reply": reply, "id": cid, "expires": time.time() + wait_s})
    deadline = time.monotonic() + wait_s
    sent_to = None
    answer = None
    while answer is None and time.monotonic() < deadline:
        holder = r.get(owner(command["lab"]))
        if holder and holder != sent_to:
            r.rpush(host_commands(holder), msg)
            sent_to = holder
        answer = r.blpop(reply, timeout=POLL_S)
    if answer is None:
        raise ApiError(
            503,
            "pool_unavailable",
            "no pool host answered for this lab" if sent_to is None else f"pool host {sent_to} did not answer",
        )
    result = json.loads(answer[1])
    if not result.get("ok"):
        raise ApiError(409, "cannot_kill", result.get("error"))
    return result
