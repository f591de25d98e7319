"""Percentiles of measured samples, as the benchmarks and the fault drills report them."""

from __future__ import annotations

import math
from collections.abc import Iterable


def pct(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0–100), linear interpolation between closest ranks; nan if empty."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
