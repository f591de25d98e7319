"""Chapter 2's autoscaler: the lesson's drain-time rule out, draining scale-in back.

Out: if the backlog alone would take longer than the target wait to drain
(depth × W / workers > target), scale to ceil(depth × W / target). New workers only help after
their boot lag (the supervisor holds them in `booting`), so the rule counts requested workers,
not running ones — otherwise it would keep adding workers for the same backlog while they boot.
In: with an empty queue, shrink to what the measured arrival rate needs at the utilisation
target; the supervisor drains (or, if the learner chose it, kills) the removed workers.

It decides on the lab's clock: every EVERY_S simulated seconds from its first decision, with a barrier
(`HOLDER`) at the next decision's moment, so a busy host delays a decision in real time, never in simulated
time (as the load generator's arrivals and the reaper's deadlines are held).
"""

from __future__ import annotations

import math
import time

import redis

from core import clock, numbers, registry, slots, stream
from core.config import REAPER_BARRIER_S, Config
from core.engines import loadgen
from core.keys import key
from core.settings import BY_NAME

EVERY_S = 10.0  # simulated seconds between decisions
SCALE_IN_COOLDOWN_S = 60.0  # no scale-in this soon after any change (no flapping on a quiet spell)
MAX_WORKERS = int(BY_NAME["workers"].max)
HOLDER = "autoscale"  # its barrier on the lab's clock, at the next decision's moment
_held: dict[str, float] = {}  # lab → real time its barrier lapses unless held again (the supervisor's process only)


def decide(
    depth: int, workers: int, lam: float, W: float, target_wait: float, floor: int, ceiling: int = MAX_WORKERS
) -> tuple[int, str]:
    """(target workers, why) from queue depth, requested workers and measured arrival rate."""
    drain = depth * W / workers if workers > 0 else math.inf
    if depth and drain > target_wait:
        needed = math.ceil(depth * W / target_wait - 1e-9)
        return min(ceiling, max(needed, floor)), f"drain time {drain:.0f} s > target {target_wait:g} s"
    if depth == 0:
        want = max(
            floor, numbers.workers_for_utilisation(lam, W, numbers.Inputs().target_utilisation) if lam > 0 else floor
        )
        if want < workers:
            return want, f"queue empty; λ {lam:.3f}/s needs {want} at ρ ≤ {numbers.Inputs().target_utilisation:g}"
    return workers, "hold"


def tick(
    r: redis.Redis, lab: str, now: float, settings: dict, machine_max: int = 10**6, state: dict | None = None
) -> int | None:
    """One decision every EVERY_S simulated seconds while `autoscale` is on; returns a new size.
    It never grows the lab past what the machine's worker ceiling leaves free (`machine_max`). `state`: the
    clock's reading `now` is from (the barrier's real lifetime is reckoned on it; read if not given)."""
    k = key(lab, "autoscale")
    if not settings.get("autoscale"):
        if _held.pop(lab, None) is not None:
            clock.lift(r, lab, HOLDER)
        return None
    last = r.hmget(k, "decided_t", "changed_t")
    if last[0] is not None and now - float(last[0]) < EVERY_S - 1e-6:
        hold(r, lab, float(last[0]) + EVERY_S, state)
        return None
    r.hset(k, "decided_t", now)
    hold(r, lab, now + EVERY_S, state, again=True)
    states = r.hgetall(key(lab, "states"))
    depth = int(states.get("queued", 0)) + int(states.get("retrying", 0))
    current = int(settings["workers"])
    ceiling = min(MAX_WORKERS, max(current, machine_max - registry.workers_in_use(r, exclude=lab)))
    target, why = decide(
        depth,
        current,
        loadgen.recent_rate(r, lab, now),
        loadgen.MIX_W,
        float(settings["autoscale_target_wait"]),
        int(settings["autoscale_min"]),
        ceiling,
    )
    if target == current:
        return None
    if target < current and last[1] is not None and now - float(last[1]) < SCALE_IN_COOLDOWN_S:
        return None
    try:  # its processes are reserved before they are asked for, as a PATCH's are (core/slots.py)
        slots.reserve(r, [(lab, registry.processes_of({**settings, "workers": target}))], "autoscaler", 0, machine_max)
    except slots.Refused:
        return None
    r.hset(k, "changed_t", now)
    registry.update_settings(r, lab, {"workers": target})
    stream.emit(r, lab, "autoscale.scaled", now, frm=current, to=target, depth=depth, reason=why)
    return target


def hold(r: redis.Redis, lab: str, at: float, state: dict | None, again: bool = False) -> None:
    """The clock may not pass the next decision's moment `at` before the pass has decided there. Placed when a
    decision is made (`again`) and held again only as it nears its lapse, REAPER_BARRIER_S real seconds after the
    clock would get there (a paused or slowed clock gets there later)."""
    if not again and time.time() < _held.get(lab, 0.0) - REAPER_BARRIER_S / 2:
        return
    ttl = clock.lapse(state or clock.read(r, lab), at, REAPER_BARRIER_S)
    clock.hold(r, lab, HOLDER, at, ttl=ttl)
    _held[lab] = time.time() + ttl


class Autoscaler:
    """The autoscaler in the supervisor's pass (the `Engine` protocol): a decision due every EVERY_S while
    `autoscale` is on."""

    name = "autoscale"
    wakes = ()
    holder = HOLDER

    def start(self, config: Config) -> None:
        """Nothing runs beside the pass."""

    def read(self, pipe: redis.client.Pipeline, lab: str) -> int:
        return 0

    def busy(self, settings: dict, gauges: list) -> bool:
        return bool(settings.get("autoscale"))

    def tick(
        self, r: redis.Redis, rq: redis.Redis, lab: str, settings: dict, state: dict, config: Config, quiet: bool
    ) -> int:
        tick(r, lab, state["t_raw"], settings, config.max_workers, state)
        return 0


ENGINE = Autoscaler()
