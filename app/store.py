"""The shared Redis connection, one pool per process, reached through the app."""

from __future__ import annotations

import redis
from flask import Flask, current_app


def connect(url: str) -> redis.Redis:
    """A client with decoded strings; every key the lab writes is text or JSON."""
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)


def init_app(app: Flask) -> None:
    app.extensions["redis"] = connect(app.config["LAB"].redis_url)


def get_redis() -> redis.Redis:
    return current_app.extensions["redis"]


def get_rq() -> redis.Redis:
    """RQ pickles job data, so it needs a connection that returns bytes."""
    if "rq_redis" not in current_app.extensions:
        current_app.extensions["rq_redis"] = redis.Redis.from_url(current_app.config["LAB"].redis_url)
    return current_app.extensions["rq_redis"]
