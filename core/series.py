"""Chart series: the shapes a chapter chart's data is made of, computed from the numbers model.

Each chapter home (chapters/chN/) turns its figures into the data of its charts (`CHARTS`) in these
shapes — points ``(x, y, label)``, spans on a time axis, vertical marks — in the model's own units
(seconds, jobs, ρ); `chapters.chart_series` gathers them. No pixels here: `app/charts.py` lays the data
out and `templates/_charts.html` draws it, so a chapter only writes
``{{ charts.line(series.wait_vs_utilisation, ...) }}``.

Every chart also carries a one-paragraph text alternative (`summary`) and its data as table rows,
so what the picture shows is also there for a screen reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# ---------------------------------------------------------------------------------------------
# The shapes a chart is made of
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One datum: `x` (a number, or a category name for bars), `y` (None = unbounded), a label."""

    x: Any
    y: float | None
    label: str = ""


@dataclass(frozen=True)
class Series:
    """A named run of points. `style` (solid/dashed/dotted/hatched/outline) and `marker`
    (circle/square/cross/check/none) are the non-colour signals; `tone` picks the colour."""

    key: str
    label: str
    points: tuple[Point, ...]
    style: str = "solid"
    marker: str = "circle"
    tone: str = "accent"


@dataclass(frozen=True)
class Span:
    """A stretch of time in one lane: [start, end), drawn solid, hatched or as a dashed outline."""

    start: float
    end: float
    label: str = ""
    style: str = "solid"
    tone: str = "accent"
    short: str = ""  # drawn inside the span instead of `label` when only this fits


@dataclass(frozen=True)
class Lane:
    label: str
    spans: tuple[Span, ...] = ()
    events: tuple[Point, ...] = ()  # instants: x = time, label = what happens; marker from y
    note: str = ""  # text after the lane's last span


@dataclass(frozen=True)
class Panel:
    """A group of lanes under one heading (the lock chart's two ticks); one per chart otherwise."""

    label: str
    lanes: tuple[Lane, ...]
    marks: tuple[Mark, ...] = ()


@dataclass(frozen=True)
class Mark:
    """A vertical rule at `x` (or a shaded band from `x` to `end`) with a label."""

    x: float
    label: str
    end: float | None = None
    tone: str = "ink"
    style: str = "dashed"


@dataclass(frozen=True)
class Chart:
    key: str
    kind: str  # line | bars | timeline | histogram
    x_label: str
    y_label: str = ""
    series: tuple[Series, ...] = ()
    panels: tuple[Panel, ...] = ()
    marks: tuple[Mark, ...] = ()
    summary: str = ""
    x_min: float | None = None
    x_max: float | None = None
    y_cap: float | None = None  # values above are drawn cut off at the top, with a break mark
    x_ticks: str = "decimal"  # decimal | time (1, 2, 5 … or 15, 30, 60 … seconds)
    note: str = ""  # a short remark drawn at the right edge (e.g. "∞ at ρ = 1")
    table: tuple[tuple[str, ...], ...] = field(default_factory=tuple)  # header row first


def fmt(x: float | None) -> str:
    """Seconds and counts the way the charts label them: 1,200 · 42.9 · 0.5 · < 0.001 · ∞."""
    if x is None or (isinstance(x, float) and math.isinf(x)):
        return "∞"
    if x == 0:
        return "0"
    if abs(x) < 0.001:
        return "< 0.001"
    if abs(x) < 1:
        return f"{x:.3g}"
    if abs(x) < 10 and x != round(x):
        return f"{x:,.1f}"
    if abs(x) < 100 and x != round(x):
        return f"{x:,.1f}"
    return f"{x:,.0f}"


def g(x: float) -> str:
    return f"{x:,.0f}" if x == round(x) else f"{x:g}"


# ---------------------------------------------------------------------------------------------


def timeline_table(panels: tuple[Panel, ...]) -> tuple[tuple[str, ...], ...]:
    rows: list[tuple[str, ...]] = [("lane", "from (s)", "to (s)", "what")]
    for pn in panels:
        for ln in pn.lanes:
            name = f"{pn.label}: {ln.label}" if pn.label else ln.label
            rows += [(name, g(s.start), g(s.end), s.label) for s in ln.spans]
            rows += [(name, g(e.x), g(e.x), e.label) for e in ln.events]
    return tuple(rows)


class ChartSeries(dict):
    """Every chart's data by name; attribute access for templates (`series.wait_vs_utilisation`)."""

    def __getattr__(self, name: str) -> Chart:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
