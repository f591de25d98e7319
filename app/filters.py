"""Jinja filters that format model figures the same way on every page."""

from __future__ import annotations

import math

from flask import Flask


def num(value: float | int | None, digits: int = 0) -> str:
    """Thousands separators, fixed decimals; `None` (an unbounded queue) reads as ∞."""
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "∞"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:,.{digits}f}"


def usd(value: float | None, digits: int = 0) -> str:
    """Dollars, e.g. $54,750."""
    return "∞" if value is None else f"${value:,.{digits}f}"


def pct(value: float | None, digits: int = 0) -> str:
    """A fraction shown as a percentage: 0.8 → 80%."""
    return "∞" if value is None else f"{value * 100:,.{digits}f}%"


def init_app(app: Flask) -> None:
    app.jinja_env.filters.update(num=num, usd=usd, pct=pct)
