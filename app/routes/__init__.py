"""The route blueprints: one module per blueprint, registered by the app factory in this order.

`pages` is the server-rendered course; the JSON API is split by resource (health, meta, labs, settings,
clock, jobs, inline, workers, faults, dlq, events) and by lesson (fairness, loadgen, retries, schedule,
status, webhooks, branch); the classroom has rooms, races and export. `ws` (live event push) is a
WebSocket extension rather than a blueprint: the factory starts it with `ws.init_app`.
"""

from __future__ import annotations

from flask import Blueprint

from app.routes import (
    branch,
    challenges,
    clock,
    dlq,
    events,
    export,
    fairness,
    faults,
    health,
    inline,
    jobs,
    labs,
    loadgen,
    meta,
    pages,
    races,
    retries,
    rooms,
    schedule,
    settings,
    status,
    webhooks,
    workers,
)

BLUEPRINTS: tuple[Blueprint, ...] = (
    pages.bp,
    health.bp,
    meta.bp,
    labs.bp,
    settings.bp,
    clock.bp,
    jobs.bp,
    inline.bp,
    workers.bp,
    faults.bp,
    dlq.bp,
    events.bp,
    fairness.bp,
    loadgen.bp,
    retries.bp,
    schedule.bp,
    status.bp,
    webhooks.bp,
    branch.bp,
    rooms.bp,
    races.bp,
    export.bp,
    challenges.bp,
)
