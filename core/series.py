"""Chart series: every point a chapter chart draws, computed from the numbers model.

`core.numbers` is the one source of the lesson's figures; this module turns those figures into
the data of the eight charts the chapters draw — points ``(x, y, label)``, spans on a time axis,
vertical marks — in the model's own units (seconds, jobs, ρ). No pixels here: `app/charts.py`
lays the data out and `templates/_charts.html` draws it, so a chapter only writes
``{{ charts.line(series.wait_vs_utilisation, ...) }}``.

Every chart also carries a one-paragraph text alternative (`summary`) and its data as table rows,
so what the picture shows is also there for a screen reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from core import numbers

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


def _g(x: float) -> str:
    return f"{x:,.0f}" if x == round(x) else f"{x:g}"


# ---------------------------------------------------------------------------------------------
# Chapter 1: one job's redelivery timeline; crash detection, static VT vs heartbeat
# ---------------------------------------------------------------------------------------------


def redelivery_timeline(inputs: numbers.Inputs, fig: dict) -> Chart:
    c1 = fig["ch1"]
    vt, dur = c1["visibility_timeout_s"], c1["transcode_mean_s"]
    collides = vt < dur
    if collides:
        lanes = (
            Lane("Broker", (Span(0, vt, "hidden", "outline"),)),
            Lane("Worker A", (Span(0, dur, "transcoding"),), note="done, deletes"),
            Lane("Worker B", (Span(vt, vt + dur, "same job again", "hatched", "accent-2"),)),
        )
        marks = (Mark(vt, f"VT runs out at {_g(vt)} s: message visible again"),
                 Mark(vt, f"overlap: {_g(c1['collision_overlap_s'])} s", end=dur, tone="bad"))
        summary = (f"Worker A works from 0 to {_g(dur)} seconds. The message is hidden only until "
                   f"{_g(vt)} seconds, when Worker B claims it and runs the same job until "
                   f"{_g(vt + dur)} seconds, so both workers run the same job for "
                   f"{_g(c1['collision_overlap_s'])} seconds.")
    else:
        broker = [Span(0, dur, "hidden", "outline")]
        if vt > dur:
            broker.append(Span(dur, vt, f"lease would have run to {_g(vt)} s", "dashed"))
        lanes = (
            Lane("Broker", tuple(broker)),
            Lane("Worker A", (Span(0, dur, "transcoding"),), note="done: deletes the message"),
            Lane("Worker B", note="never sees the message"),
        )
        marks = ()
        summary = (f"Worker A works from 0 to {_g(dur)} seconds and deletes the message before the "
                   f"{_g(vt)}-second visibility timeout runs out; no other worker claims it.")
    return Chart("redelivery_timeline", "timeline", "time since the first claim (simulated seconds)",
                 panels=(Panel("", lanes),), marks=marks, summary=summary, x_min=0,
                 x_max=max(vt, dur, *(r["t_s"] for r in c1["redelivery_timeline"])),
                 table=_timeline_table((Panel("", lanes),)))


def heartbeat_vs_static_vt(inputs: numbers.Inputs, fig: dict) -> Chart:
    c1 = fig["ch1"]
    crash, expiry = c1["heartbeat_crash_at_s"], c1["heartbeat_redelivered_at_s"]
    static = c1["fixed_vt_s"]
    lanes = (
        Lane("Static VT", (Span(0, static, f"lease held by a dead worker → redelivered at {_g(static)} s",
                                "outline"),)),
        Lane("Heartbeat", (Span(0, expiry, f"redelivered at {_g(expiry)} s", "outline"),)),
    )
    summary = (f"A worker dies at {_g(crash)} seconds. With a static {_g(static)}-second visibility "
               f"timeout the job is redelivered at {_g(static)} seconds. With a heartbeat every "
               f"{_g(c1['heartbeat_interval_s'])} seconds extending the lease by "
               f"{_g(c1['heartbeat_extend_s'])} seconds, it is redelivered at {_g(expiry)} seconds.")
    return Chart("heartbeat_vs_static_vt", "timeline", "time since the claim (simulated seconds)",
                 panels=(Panel("", lanes),),
                 marks=(Mark(crash, f"✕ worker dies at t = {_g(crash)} s", tone="bad"),),
                 summary=summary, x_min=0, x_max=max(static, expiry),
                 table=_timeline_table((Panel("", lanes),)))


# ---------------------------------------------------------------------------------------------
# Chapter 2: mean queue wait against utilisation
# ---------------------------------------------------------------------------------------------

def small_pool_wait_s(rho: float, W: float, c: int) -> float | None:
    """Exact (Erlang C) mean wait for a `c`-worker pool at utilisation ρ — numbers.erlang_c_wait."""
    if rho >= 1:
        return None
    return numbers.erlang_c_wait(rho * c / W, W, c)


def wait_vs_utilisation(inputs: numbers.Inputs, fig: dict) -> Chart:
    c2 = fig["ch2"]
    W, small_c = c2["blended_duration_s"], c2["small_pool_workers"]  # the lab-sized pool the chapter compares with
    rows = sorted(c2["wait_curve"], key=lambda r: r["rho"])
    approx = tuple(Point(r["rho"], r["approx_wait_s"], f"{r['workers']:,} workers")
                   for r in rows if r["approx_wait_s"] is not None)
    exact = tuple(Point(r["rho"], r["mmc_wait_s"], f"{r['workers']:,} workers")
                  for r in rows if r["mmc_wait_s"] is not None)
    small = tuple(Point(r["rho"], small_pool_wait_s(r["rho"], W, small_c), f"{small_c} workers")
                  for r in rows if r["rho"] < 1)
    workers = [r["workers"] for r in rows]
    ymax = max((p.y for p in approx), default=0)
    mmc_max = max((p.y for p in exact), default=0)
    rho = inputs.target_utilisation
    first = approx[0] if approx else Point(rho, 0)
    summary = (f"The approximation rises from {fmt(first.y)} seconds at ρ = {first.x:.2f} to "
               f"{fmt(ymax)} seconds near ρ = 1 and is unbounded at ρ = 1. The exact wait for this "
               f"pool, sized for each ρ, "
               + ("stays below a millisecond" if mmc_max < 0.001 else f"stays at or below {fmt(mmc_max)} seconds")
               + f" at every ρ below 1. A pool of just {small_c} workers sits in between.")
    series = (
        Series("approx", "approximation W/(1−ρ) (solid)", approx, "solid", "circle", "accent"),
        Series("small", f"exact, a {small_c}-worker pool (dotted)", small, "dotted", "none", "ok"),
        Series("exact", f"exact, this pool: {min(workers):,}–{max(workers):,} workers (dashed)",
               exact, "dashed", "square", "accent-2"),
    )
    x_min = min([math.floor(min((r["rho"] for r in rows), default=rho) * 10) / 10, rho - 0.05])
    table = (("ρ", "approx. wait (s)", f"exact, {small_c} workers (s)", "exact, this pool (s)"),) + tuple(
        (f"{r['rho']:.2f}", fmt(r["approx_wait_s"]), fmt(small_pool_wait_s(r["rho"], W, small_c)),
         fmt(r["mmc_wait_s"]))
        for r in rows)
    return Chart("wait_vs_utilisation", "line", "utilisation ρ = L / workers", "mean queue wait (s)",
                 series=series, marks=(Mark(rho, f"target ρ = {rho:.2f}", style="dotted", tone="muted"),),
                 summary=summary, x_min=x_min, x_max=1.0, note="∞\nat ρ = 1,\nin every\nmodel",
                 table=table)


# ---------------------------------------------------------------------------------------------
# Chapter 3: status-path requests per second by delivery mechanism
# ---------------------------------------------------------------------------------------------


def status_requests(inputs: numbers.Inputs, fig: dict) -> Chart:
    rows = fig["ch3"]["delivery_mechanisms"]
    pts = tuple(Point(r["mechanism"], r["requests_per_s"],
                      f"{r['requests_per_s']:,.0f}/s"
                      + (" — events pushed over open sockets" if r["requests_per_s"] == 0 else ""))
                for r in rows)
    summary = " ".join(f"{r['mechanism']}: {r['requests_per_s']:,.0f} requests per second." for r in rows)
    return Chart("status_requests", "bars", "status-path requests per second",
                 series=(Series("requests", "requests per second", pts, "solid", "none", "accent"),),
                 summary=summary, x_min=0,
                 table=(("mechanism", "requests per second"),) + tuple((p.x, f"{p.y:,.0f}") for p in pts))


# ---------------------------------------------------------------------------------------------
# Chapter 4: the synchronised herd; the first retry wave with and without full jitter
# ---------------------------------------------------------------------------------------------


def retry_herd(inputs: numbers.Inputs, fig: dict) -> Chart:
    c4 = fig["ch4"]
    N, outage = c4["outage_workers"], c4["outage_s"]
    rows = c4["herd_waves"]
    events = tuple(Point(r["herd_retry_at_s"], "fails" if r["dependency_down"] else "succeeds",
                         f"{N:,} retries at t = {_g(r['herd_retry_at_s'])} s: "
                         + ("storage still down, all fail" if r["dependency_down"] else "storage back, all succeed"))
                   for r in rows)
    lanes = (Lane(f"{N:,} at once", events=events),)
    marks = (Mark(0, f"storage down ({_g(outage)} s)", end=outage, tone="bad", style="hatched"),) if outage > 0 else ()
    summary = (f"Storage is down from 0 to {_g(outage)} seconds. Without jitter, all {N:,} workers retry together"
               + "".join(f" at {_g(r['herd_retry_at_s'])} seconds ({'fails' if r['dependency_down'] else 'succeeds'})"
                         for r in rows) + ".")
    t_max = max([outage] + [r["herd_retry_at_s"] for r in rows])
    return Chart("retry_herd", "timeline", "seconds since the failure", panels=(Panel("", lanes),),
                 marks=marks, summary=summary, x_min=0, x_max=max(t_max * 1.1, inputs.retry_base_s),
                 table=(("retry at (s)", "retries at once", "outcome"),)
                 + tuple((_g(r["herd_retry_at_s"]), f"{N:,}", "fails" if r["dependency_down"] else "succeeds")
                         for r in rows))


def jitter_first_wave(inputs: numbers.Inputs, fig: dict) -> Chart:
    c4 = fig["ch4"]
    N, win = c4["outage_workers"], c4["jitter_window_s"]
    bucket_s = inputs.jitter_bucket_ms / 1000
    band = c4["full_jitter_peak_per_bucket"]
    band_txt = f"{band:,.1f}".removesuffix(".0")
    clipped = N > band * 6
    jitter = Series("jitter", f"full jitter: ≈ {band_txt} per bucket (dashed)",
                    (Point(0, band, f"{band_txt} per bucket from 0 to {_g(win)} s"), Point(win, band, "")),
                    "dashed", "none", "accent")
    spike = Series("spike", f"no jitter: {N:,} in one bucket (solid)" + (", off the scale" if clipped else ""),
                   (Point(win, N, f"{N:,} at {_g(win)} s"), Point(win + bucket_s, N, "")),
                   "solid", "none", "bad")
    summary = (f"Without jitter, all {N:,} retries land in one bucket at {_g(win)} seconds. With full jitter "
               f"they spread evenly from 0 to {_g(win)} seconds, about {band:,.1f} per bucket"
               + ("; the no-jitter bar is far taller than the chart and is cut off" if clipped else "") + ".")
    return Chart("jitter_first_wave", "histogram", "seconds since the failure",
                 f"retries per {inputs.jitter_bucket_ms:,.0f} ms bucket", series=(jitter, spike),
                 summary=summary, x_min=0, x_max=max(win * 1.3, win + bucket_s * 1.5),
                 y_cap=band * 5 if clipped else None,
                 table=(("shape", "from (s)", "to (s)", "retries per bucket"),
                        ("full jitter", "0", _g(win), band_txt),
                        ("no jitter", _g(win), _g(win + bucket_s), f"{N:,}")))


# ---------------------------------------------------------------------------------------------
# Chapter 6: expected wait per tier under shared FIFO, a hard split, and the spike
# ---------------------------------------------------------------------------------------------


def _wait_text(v: float | None) -> str:
    if v is None:
        return "unbounded (ρ ≥ 1)"
    return f"{v:,.0f} s ({v / 60:,.1f} min)" if v >= 120 else f"{v:,.1f} s"


def tier_waits(inputs: numbers.Inputs, fig: dict) -> Chart:
    c6 = fig["ch6"]
    pro, free = c6["hard_split"]
    spro, sfree = c6["spike_split"]
    groups = [
        ("Shared FIFO", c6["fifo_wait_s"], c6["fifo_wait_s"]),
        ("Hard split", pro["approx_wait_s"] if pro["in_flight"] > 0 else 0, free["approx_wait_s"]),
        (f"Hard split, {c6['spike_multiplier']:g}× spike",
         spro["approx_wait_s"] if spro["in_flight"] > 0 else 0, sfree["approx_wait_s"]),
    ]
    series = (
        Series("pro", "pro", tuple(Point(g, p, _wait_text(p)) for g, p, _ in groups), "solid", "none", "accent"),
        Series("free", "free", tuple(Point(g, f, _wait_text(f)) for g, _, f in groups), "hatched", "none", "accent-2"),
    )
    summary = " ".join(f"{g}: pro {_wait_text(p)}, free {_wait_text(f)}." for g, p, f in groups)
    return Chart("tier_waits", "bars", "expected queue wait, seconds (W / (1 − ρ))", series=series,
                 summary=summary, x_min=0,
                 table=(("strategy", "pro wait", "free wait"),)
                 + tuple((g, _wait_text(p), _wait_text(f)) for g, p, f in groups))


# ---------------------------------------------------------------------------------------------
# Chapter 7: the short lock TTL against the sized one
# ---------------------------------------------------------------------------------------------

_LETTERS = "ABCDEFGHIJ"


def _lock_panel(ttl: float, p99: float, replicas: int, label: str) -> Panel:
    if ttl >= p99:
        lanes = (
            Lane("lock key", (Span(0, p99, "held by A", "solid", "muted"),
                              Span(p99, ttl, "unused TTL (only for a crash)", "dashed", "muted"))),
            Lane("replica A runs", (Span(0, p99, "task"),), note=f"done at {_g(p99)} s, releases the lock"),
            Lane("replica B", events=(Point(0, "skips", "✓ finds the lock held and skips the tick"),)),
        )
        return Panel(label, lanes, (Mark(ttl, f"TTL ends ({_g(ttl)} s)"),))
    runs = min(replicas, math.ceil(p99 / ttl - 1e-9))
    shown = min(runs, 4)
    lock = tuple(Span(i * ttl, min((i + 1) * ttl, p99) if i == shown - 1 else (i + 1) * ttl,
                      f"held by {_LETTERS[i]}", "solid", "muted", _LETTERS[i]) for i in range(shown))
    lanes = (Lane("lock key", lock),) + tuple(
        Lane(f"replica {_LETTERS[i]} runs",
             (Span(i * ttl, i * ttl + p99, "task" if i == 0 else "duplicate",
                   "solid" if i == 0 else "hatched", "accent" if i == 0 else "accent-2"),))
        for i in range(shown))
    overlap_end = (shown - 2) * ttl + p99
    copies = "two or more copies" if shown > 2 else "two copies"
    marks = (Mark(ttl, f"TTL ends ({_g(ttl)} s)"),
             Mark(ttl, f"↑ {copies} running: {_g(overlap_end - ttl)} s"
                  + (f" (+{runs - shown} more replicas)" if runs > shown else ""), end=overlap_end, tone="bad"))
    return Panel(label, lanes, marks)


def lock_timeline(inputs: numbers.Inputs, fig: dict) -> Chart:
    c7 = fig["ch7"]
    p99, short, sized, replicas = c7["task_p99_s"], c7["short_lock_ttl_s"], c7["lock_ttl_s"], c7["scheduler_replicas"]
    panels = (
        _lock_panel(short, p99, replicas,
                    f"TTL {_g(short)} s " + ("(too short)" if short < p99 else "(the short TTL)")),
        _lock_panel(sized, p99, replicas, f"TTL {_g(sized)} s " + ("(sized)" if sized >= p99 else "(also too short)")),
    )
    parts = []
    for pn, ttl in zip(panels, (short, sized), strict=True):
        if ttl < p99:
            runs = min(replicas, math.ceil(p99 / ttl - 1e-9))
            end = (min(runs, 4) - 2) * ttl + p99
            parts.append(f"{pn.label}: the lock expires at {_g(ttl)} s while replica A is still running; "
                         f"{runs} copies of the task run, overlapping from {_g(ttl)} s to {_g(end)} s.")
        else:
            parts.append(f"{pn.label}: replica A finishes at {_g(p99)} s and releases the lock, "
                         f"{_g(ttl - p99)} s before the TTL would have expired; other replicas skip.")
    x_max = max(max((s.end for ln in pn.lanes for s in ln.spans), default=0) for pn in panels)
    return Chart("lock_timeline", "timeline", "seconds since the tick", panels=panels,
                 summary=" ".join(parts), x_min=0, x_max=max(x_max, p99, sized if sized >= p99 else 0),
                 x_ticks="time", table=_timeline_table(panels))


# ---------------------------------------------------------------------------------------------


def _timeline_table(panels: tuple[Panel, ...]) -> tuple[tuple[str, ...], ...]:
    rows: list[tuple[str, ...]] = [("lane", "from (s)", "to (s)", "what")]
    for pn in panels:
        for ln in pn.lanes:
            name = f"{pn.label}: {ln.label}" if pn.label else ln.label
            rows += [(name, _g(s.start), _g(s.end), s.label) for s in ln.spans]
            rows += [(name, _g(e.x), _g(e.x), e.label) for e in ln.events]
    return tuple(rows)


CHARTS = {
    "redelivery_timeline": redelivery_timeline,
    "heartbeat_vs_static_vt": heartbeat_vs_static_vt,
    "wait_vs_utilisation": wait_vs_utilisation,
    "status_requests": status_requests,
    "retry_herd": retry_herd,
    "jitter_first_wave": jitter_first_wave,
    "tier_waits": tier_waits,
    "lock_timeline": lock_timeline,
}


class ChartSeries(dict):
    """Every chart's data by name; attribute access for templates (`series.wait_vs_utilisation`)."""

    def __getattr__(self, name: str) -> Chart:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def chart_series(inputs: numbers.Inputs, fig: dict) -> ChartSeries:
    """All chart data for `inputs` and their figures (`chapters.derive(inputs)`)."""
    return ChartSeries({name: build(inputs, fig) for name, build in CHARTS.items()})
