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


# Chapter formatters: what each chapter once defined as its own `{% macro %}`, now one
# implementation each, available to every chapter as a global (`{{ wait_secs(x) }}`).


def _is_whole(x: float) -> bool:
    return x == round(x)


def g(x: float) -> str:
    """A figure as written: whole numbers with separators (1,200), others as short as exact (0.25)."""
    return num(x) if _is_whole(x) else f"{x:g}"


def wait_secs(x: float | None) -> str:
    """Seconds that can be astronomically small or unbounded: ∞ · < 0.001 · 0.045 · 4.2 · 150."""
    if x is None:
        return "∞"
    if x < 0.001:
        return "< 0.001"
    if x < 1:
        return num(x, 3)
    return num(x, 1) if x < 10 else num(x)


def prob(p: float) -> str:
    """A probability as a percentage, with tiny ones shown as a bound: < 0.01% · 0.24% · 80%."""
    if p < 0.0001:
        return "< 0.01%"
    return pct(p, 2) if p < 0.1 else pct(p)


def learn_delay(x: float) -> str:
    """Mean delay before a client learns of a change: ≈ 0 (pushed) for push mechanisms."""
    if x == 0:
        return "≈ 0 (pushed)"
    return num(x, 1) if x < 10 else num(x)


def short_s(x: float) -> str:
    """Retry timings: 0.25 · 1.5 · 15 (no trailing .0 on whole seconds)."""
    if x < 1:
        return f"{x:g}"
    if x < 10 and not _is_whole(x):
        return num(x, 1)
    return num(x)


def wait_text(v: float | None, digits: int = 1) -> str:
    """An expected wait in words: unbounded · 42.9 s · 1,650 s (27.5 min)."""
    if v is None:
        return "unbounded"
    if v >= 120:
        return f"{num(v)} s ({num(v / 60, 1)} min)"
    return f"{num(v, digits)} s"


def duration(v: float | None) -> str:
    """A span of time in the unit that reads best: 45 s · 2.5 min · 24 h; — when there is none."""
    if v is None:
        return "—"
    if v < 120:
        return f"{g(round(v, 1))} s"
    if v < 7200:
        return f"{g(round(v / 60, 1))} min"
    return f"{g(round(v / 3600, 1))} h"


def figure_value(v) -> str:
    """Any model figure as a short value: ∞, yes/no, 3 significant digits when tiny, (a table)."""
    if v is None:
        return "∞"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if v != 0 and -0.1 < v < 0.1:
            return f"{v:.3g}"
        if abs(v - round(v)) > 0.001:
            return num(v, 2 if abs(v) < 10 else 1)
        return num(v)
    return "(a table)"


FORMATTERS = {f.__name__: f for f in (g, wait_secs, prob, learn_delay, short_s, wait_text, duration, figure_value)}


def init_app(app: Flask) -> None:
    app.jinja_env.filters.update(num=num, usd=usd, pct=pct)
    app.jinja_env.globals.update(FORMATTERS)
