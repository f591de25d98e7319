"""Figure machinery: what every chapter's figure function shares (the core quantities, JSON-safe values,
dotted-key lookup). The chapter figures themselves live in their homes (chapters/chN/) and `chapters.derive`
gathers them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from core.numbers.inputs import Inputs
from core.numbers.queueing import approx_wait, blended_duration, littles_law_L, workers_for_utilisation


def finite(x: float) -> float | None:
    """inf → None so derive() output stays JSON-serialisable; None reads as "unbounded"."""
    return None if math.isinf(x) or math.isnan(x) else x


def core_quantities(inputs: Inputs) -> dict[str, float]:
    """The handful of quantities nearly every chapter reuses."""
    W = blended_duration(inputs.job_mix)
    lam = inputs.arrival_rate
    workers = workers_for_utilisation(lam, W, inputs.target_utilisation)
    return {
        "W": W,
        "lam": lam,
        "L": littles_law_L(lam, W),
        "workers": workers,
        "wait": approx_wait(W, inputs.target_utilisation),
    }


def lookup(figures: Mapping[str, Any], key: str) -> Any:
    """Resolve a dotted figure key such as ``"ch2.workers_at_target"`` (used by chapter templates
    and by Chapter 8's inputs table, whose ``feeds`` lists are dotted keys)."""
    value: Any = figures
    for part in key.split("."):
        value = value[part]
    return value
