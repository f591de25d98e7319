"""Chart layout: turns a `core.series.Chart` (model units) into SVG coordinates.

All geometry lives here — scales, "nice" ticks, where a label fits — so that
`templates/_charts.html` only draws what this returns and a chapter only names the series.
"""

from __future__ import annotations

import math
from typing import Any

from flask import Flask

from core.series import Chart, fmt

WIDTH = 720
CHAR_W = 7.4  # average glyph width at 14px system-ui, for "does this label fit?"
_DECIMAL = [m * 10**e for e in range(-3, 8) for m in (1, 2, 5)]
_TIME = [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 14400, 21600, 43200, 86400, 172800]


def nice_step(span: float, max_ticks: int, kind: str = "decimal") -> float:
    """The smallest 1-2-5 (or clock-friendly) step giving at most `max_ticks` intervals."""
    steps = _TIME if kind == "time" else _DECIMAL
    for s in steps:
        if span / s <= max_ticks:
            return s
    return span / max_ticks


def nice_top(value: float, max_ticks: int, kind: str = "decimal") -> tuple[float, float]:
    value = value if value > 0 else 1
    step = nice_step(value, max_ticks, kind)
    return math.ceil(value / step - 1e-9) * step, step


def tick_label(v: float, step: float) -> str:
    if step >= 1:
        return f"{v:,.0f}"
    return "0" if abs(v) < 1e-9 else f"{v:.{max(0, -math.floor(math.log10(step) + 1e-9))}f}"


def _scale(d0: float, d1: float, p0: float, p1: float):
    k = (p1 - p0) / (d1 - d0) if d1 != d0 else 0

    def f(v: float) -> float:
        return round(p0 + (v - d0) * k, 1)

    return f


def _fits(text: str, width: float) -> bool:
    return len(text) * CHAR_W + 10 <= width


def line(chart: Chart) -> dict[str, Any]:
    """A line chart (or a histogram: series of [start, end) bins) with a legend box."""
    px0, px1, py0, py1 = 80, 640 if chart.note else 690, 300, 24
    x_min = chart.x_min if chart.x_min is not None else min(p.x for s in chart.series for p in s.points)
    x_max = chart.x_max if chart.x_max is not None else max(p.x for s in chart.series for p in s.points)
    ys = [p.y for s in chart.series for p in s.points if p.y is not None]
    y_raw = chart.y_cap if chart.y_cap is not None else max(ys, default=1)
    y_top, y_step = nice_top(y_raw, 6 if chart.kind == "line" else 5)
    X = _scale(x_min, x_max, px0, px1)
    Y = _scale(0, y_top, py0, py1)
    clip = y_top * (1.08 if chart.kind == "line" else 1)

    def y_px(v: float) -> float:
        return Y(min(v, clip))

    x_step = nice_step(x_max - x_min, 8 if chart.kind == "histogram" else 10)
    first = math.ceil(x_min / x_step - 1e-9)
    x_ticks = [
        (X(k * x_step), tick_label(k * x_step, x_step))
        for k in range(first, int(math.floor(x_max / x_step + 1e-9)) + 1)
    ]
    y_ticks = [(Y(k * y_step), tick_label(k * y_step, y_step)) for k in range(int(round(y_top / y_step)) + 1)]
    series = []
    for s in chart.series:
        pts = [(X(p.x), y_px(p.y), p) for p in s.points if p.y is not None]
        item: dict[str, Any] = {
            "s": s,
            "points": " ".join(f"{x},{y}" for x, y, _ in pts),
            "markers": [] if s.marker == "none" else pts,
        }
        if chart.kind == "histogram" and len(pts) >= 2:
            x0, x1, y, top = pts[0][0], pts[-1][0], pts[0][1], s.points[0].y
            w = max(x1 - x0, 6)
            cut = chart.y_cap is not None and top > y_top
            label_w = len(s.label) * CHAR_W
            if w > label_w + 10:  # centred above the bar
                lab = {"x": round(x0 + w / 2, 1), "y": round(y - 10 if y > py1 + 40 else y + 22, 1), "anchor": "middle"}
            else:  # to the left of a narrow bar, near its top
                lab = {"x": round(x0 - 8, 1), "y": round(max(y, py1) + 14, 1), "anchor": "end"}
            item.update(
                bar={"x": x0, "y": y, "w": round(w, 1), "h": round(py0 - y, 1)}, cut=cut, cut_y=py1 + 30, label=lab
            )
        series.append(item)
    marks = [
        {"m": m, "x": X(m.x), "label_x": X(m.x) - 6, "label_y": round(py1 + (py0 - py1) * 0.45, 1)} for m in chart.marks
    ]
    legend = chart.kind == "line"
    return {
        "w": WIDTH,
        "h": 360,
        "px0": px0,
        "px1": px1,
        "py0": py0,
        "py1": py1,
        "mid_x": (px0 + px1) / 2,
        "mid_y": (py0 + py1) / 2,
        "x_ticks": x_ticks,
        "y_ticks": y_ticks,
        "series": series,
        "marks": marks,
        "legend": legend,
        "legend_h": 28 * len(chart.series) + 8,
        "legend_w": max(len(s.label) for s in chart.series) * CHAR_W + 70,
        "note_x": X(x_max) + 10,
        "note_lines": chart.note.split("\n") if chart.note else [],
        "end_x": X(x_max),
        "tick_y2": py0 + 5,
        "arrow_y2": py1 + 6,
    }


def bars(chart: Chart) -> dict[str, Any]:
    """Horizontal bars: one bar per category, or a group of bars (one per series) per category."""
    grouped = len(chart.series) > 1
    x0, x1 = (150, 520) if grouped else (130, 600)
    cats = [p.x for p in chart.series[0].points]
    vals = [p.y for s in chart.series for p in s.points if p.y is not None]
    top, step = nice_top(max(vals, default=1), 6)
    X = _scale(0, top, x0, x1)
    bar_h, gap = (20, 6) if grouped else (28, 16)
    y = 10
    rows, heads = [], []
    for ci, cat in enumerate(cats):
        if grouped:
            heads.append({"y": y + 16, "label": cat})
            y += 24
        for s in chart.series:
            p = s.points[ci]
            w = x1 - x0 if p.y is None else max(X(p.y) - x0, 1.5)
            rows.append(
                {
                    "s": s,
                    "p": p,
                    "y": y,
                    "h": bar_h,
                    "w": round(w, 1),
                    "unbounded": p.y is None,
                    "name": s.label if grouped else cat,
                    "text_x": round(x0 + w + 8, 1),
                    "text_y": y + bar_h * 0.7,
                }
            )
            y += bar_h + gap
        if grouped:
            y += 8
    bottom = y
    ticks = [(X(k * step), tick_label(k * step, step)) for k in range(int(round(top / step)) + 1)]
    return {
        "w": WIDTH,
        "h": bottom + (50 if grouped else 10),
        "x0": x0,
        "x1": x1,
        "top": 10,
        "bottom": bottom,
        "rows": rows,
        "heads": heads,
        "ticks": ticks,
        "mid_x": (x0 + x1) / 2,
        "grouped": grouped,
    }


def timeline(chart: Chart) -> dict[str, Any]:
    """Lanes of spans on one time axis, grouped in panels, with vertical marks and shaded bands."""
    x0, x1, row = 150, 690, 36
    x_min = chart.x_min or 0
    top, step = nice_top(chart.x_max or 1, 6 if chart.x_ticks == "decimal" else 8, chart.x_ticks)
    X = _scale(x_min, top, x0, x1)
    line_marks = any(m.end is None for m in chart.marks)
    bands = any(m.end is not None for m in chart.marks)
    y = 40 if line_marks or bands else 20
    panels = []
    for pn in chart.panels:
        head_y = None
        if pn.label:
            head_y = y + 14
            y += 40
        lanes = []
        top_y = y
        for ln in pn.lanes:
            spans = []
            for sp in ln.spans:
                sx, ex = X(sp.start), X(sp.end)
                w = max(ex - sx, 1)
                inside = _fits(sp.label, w)
                text = sp.label
                if not inside and sp.short and _fits(sp.short, w):
                    inside, text = True, sp.short
                if inside:
                    lab = {"x": sx + 6, "anchor": "start", "on_fill": sp.style == "solid"}
                elif ex + 6 + len(sp.label) * CHAR_W <= x1 + 20:
                    lab = {"x": ex + 6, "anchor": "start", "on_fill": False}
                else:
                    lab = {"x": ex - 6, "anchor": "end", "on_fill": sp.style == "solid"}
                if sp.style == "outline" and not inside and ex > x1 - 40:
                    lab = {"x": ex - 6, "anchor": "end", "on_fill": False}
                spans.append({"sp": sp, "x": sx, "w": round(w, 1), "label": lab, "text": text})
            end = max((X(sp.end) for sp in ln.spans), default=x0)
            events = [{"e": e, "x": X(e.x)} for e in ln.events]
            lanes.append(
                {
                    "ln": ln,
                    "y": y,
                    "h": row - 10,
                    "spans": spans,
                    "events": events,
                    "show_event_labels": len(ln.events) == 1,
                    "note_x": end + 6,
                }
            )
            y += row
        bottom = y - 10
        pmarks = [_mark(m, X, top_y, bottom, x1) for m in pn.marks]
        panels.append({"pn": pn, "head_y": head_y, "lanes": lanes, "marks": pmarks, "top": top_y, "bottom": bottom})
        y += 22 if any(m.end for m in pn.marks) else 6
    grid_top, grid_bottom = (30 if line_marks else 10), y
    marks = [
        _mark(m, X, grid_top if m.end is None else (44 if line_marks else 16), grid_bottom, x1, below=False)
        for m in chart.marks
    ]
    ticks = [(X(k * step), tick_label(k * step, step)) for k in range(int(round((top - x_min) / step)) + 1)]
    return {
        "w": WIDTH,
        "h": grid_bottom + 50,
        "x0": x0,
        "x1": x1,
        "panels": panels,
        "marks": marks,
        "ticks": ticks,
        "grid_top": grid_top,
        "grid_bottom": grid_bottom,
        "mid_x": (x0 + x1) / 2,
    }


def _mark(m, X, top: float, bottom: float, x1: float, below: bool = True) -> dict[str, Any]:
    x = X(m.x)
    if m.end is not None:
        ex = X(m.end)
        fits = _fits(m.label, ex - x)
        return {
            "m": m,
            "band": True,
            "x": x,
            "w": round(max(ex - x, 1), 1),
            "top": top - 4,
            "height": round(bottom - top + 4, 1),
            "label_x": round((x + ex) / 2, 1) if fits else x,
            "label_y": bottom + 14 if below else top + 12,
            "anchor": "middle" if fits else "start",
        }
    right = x + 6 + len(m.label) * CHAR_W > x1 + 20
    return {
        "m": m,
        "band": False,
        "x": x,
        "top": top - 8,
        "bottom": bottom,
        "label_x": x - 4 if right else x + 4,
        "label_y": top - 12,
        "anchor": "end" if right else "start",
    }


def layout(chart: Chart) -> dict[str, Any]:
    if chart.kind in ("line", "histogram"):
        return line(chart)
    return {"bars": bars, "timeline": timeline}[chart.kind](chart)


def init_app(app: Flask) -> None:
    app.jinja_env.globals.update(chart_layout=layout, chart_fmt=fmt)
