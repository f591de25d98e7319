"""The chapter engine: what the pool supervisor asks of each (`Engine`), and `ENGINES`, the list its pass,
its wait and its start go through. A chapter adds an engine by adding it to the list, as a dramatiq
middleware is added, without editing the supervisor's loop. Each engine's shared face (state keys,
readers, commands) is core/engines/ under the same name."""

from __future__ import annotations

from typing import Protocol

import redis

from core.config import Config
from workers.engines import autoscale, fairness, fleet, loadgen, webhooks


class Engine(Protocol):
    name: str
    """Its naming key: core/engines/<name>.py, workers/engines/<name>.py."""
    wakes: tuple[str, ...]
    """Lab keys (after `lab:<id>:`, whole names: a pool host subscribes to each of its own labs' keys,
    workers/wait.py) whose change wakes a lab at rest for it. An engine with some is quiet while it is not busy:
    its gauges are not read and its tick is told so, until one changes."""
    holder: str | None
    """The clock barrier it holds at the moment of its next work, if it keeps one (core/clock.py): while it is
    busy, the lab is passed when its clock gets there (wait.engine_moments), not a housekeeping cadence later."""

    def start(self, config: Config) -> None:
        """Once, as the supervisor starts: what runs beside its loop (a thread)."""

    def read(self, pipe: redis.client.Pipeline, lab: str) -> int:
        """Queue its gauges on the pass's one round trip (only while it is not quiet); how many it queued."""

    def busy(self, settings: dict, gauges: list) -> bool:
        """Whether the lab needs a pass on the housekeeping cadence for it (`gauges`: what `read` read, or [])."""

    def tick(
        self, r: redis.Redis, rq: redis.Redis, lab: str, settings: dict, state: dict, config: Config, quiet: bool
    ) -> int:
        """Its work in the lab's pass, at the clock's reading `state`; the deliveries it left to dispatch."""


# in the order a pass ticks them: the generator's arrivals go out with the pass's dispatch
ENGINES: tuple[Engine, ...] = (loadgen.ENGINE, autoscale.ENGINE, fairness.ENGINE, fleet.ENGINE, webhooks.ENGINE)
