"""The web process asks the pool for what only the process that spawned a worker may do."""

from __future__ import annotations

import json
import uuid

import redis

from app.errors import ApiError
from core.keys import POOL_COMMANDS


def ask_pool(r: redis.Redis, command: dict) -> dict:
    """Hand a kill to the supervisor and wait for its answer: only the process that spawned a
    worker (or replica) may signal it, so the web process asks rather than kills."""
    reply = f"pool:reply:{uuid.uuid4().hex}"
    r.rpush(POOL_COMMANDS, json.dumps({**command, "reply": reply}))
    answer = r.blpop(reply, timeout=10)
    if answer is None:
        raise ApiError(503, "pool_unavailable", "the supervisor did not answer")
    result = json.loads(answer[1])
    if not result.get("ok"):
        raise ApiError(409, "cannot_kill", result.get("error"))
    return result
