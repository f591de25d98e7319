"""Prose helpers: how a figure reads in a sentence, and the rounding the prose's what-ifs use."""

from __future__ import annotations

import math


def fmt(x: float | None, spec: str, unit: str = "") -> str:
    """Format a figure for a sentence; None (unbounded) reads as "unbounded"."""
    return "unbounded" if x is None else f"{x:{spec}}{unit}"


def ceil_workers(in_flight: float, rho: float) -> int:
    """Workers for `in_flight` jobs at utilisation `rho`, rounded up (a hair under, so an exact fit stays)."""
    return math.ceil(in_flight / rho - 1e-9)
