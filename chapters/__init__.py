"""The course's chapters: the collector that gathers every chapter home into the tables the code reads.

A chapter lives in one folder, chapters/chN/: its prose (chapter.md) and its declarations (__init__.py:
PRESETS, BUTTONS, STEPS, SCENARIOS, RACES, CLAIMS, an optional lab model and add-on). This module finds
the homes by their folder names, in number order, and merges their tables, so adding a chapter is a new
folder and nothing else. Like core/, it has no Flask and imports neither app/ nor workers/.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from types import ModuleType
from typing import Any

from chapters.common import settings_of
from chapters.prose import Chapter, from_home, parse_front_matter, render_body, scrollable_tables
from core.lesson import Claim
from core.numbers import Inputs, core_quantities, spec_values
from core.series import ChartSeries


def _homes() -> tuple[tuple[int, ModuleType], ...]:
    found = [(int(m.name[2:]), m.name) for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"ch\d+", m.name)]
    return tuple((n, importlib.import_module(f"{__name__}.{name}")) for n, name in sorted(found))


HOMES = _homes()


def _merged(table: str) -> dict[str, Any]:
    return {k: v for _, home in HOMES for k, v in getattr(home, table, {}).items()}


PRESETS: dict[str, dict[str, Any]] = _merged("PRESETS")  # preset id → settings, controls, shows, title
DEFAULT_PRESET = "ch8"  # the lab a bare /api/labs call starts from: the assembled pipeline
ROOM_PRESET = "ch1"  # what a new room's form offers first: the course's first lab with a failure to watch
BUTTONS: dict[str, list[dict[str, Any]]] = _merged("BUTTONS")  # preset id → the widget's scenario buttons
STEPS: dict[str, list[dict[str, Any]]] = _merged("STEPS")  # preset id → the guided "Try this" steps
SCENARIOS: dict[str, dict[str, Any]] = _merged("SCENARIOS")  # id → a shared set-up (an instructor's link)
RACES: dict[str, dict[str, Any]] = _merged("RACES")  # id → a race of labs that differ in one setting
CHALLENGES: dict[str, dict[str, Any]] = _merged("CHALLENGES")  # id → a handler the learner writes, checked
PANEL: dict[str, Any] = _merged("PANEL")  # what the chapters' lab-panel templates read
CLAIMS: tuple[Claim, ...] = tuple(c for _, home in HOMES for c in home.CLAIMS)
BY_ID = {c.id: c for c in CLAIMS}
CHAPTERS: tuple[Chapter, ...] = tuple(from_home(n, home) for n, home in HOMES)


def settings_for(preset: str) -> dict[str, Any]:
    """Full settings for a preset: the schema defaults with the preset's overrides on top."""
    return settings_of(PRESETS[preset])


def lab_facts() -> dict[str, Any]:
    """What the chapters' text says about their labs: each chapter's lab model (`lab.ch4_model`, …)."""
    return {k: v for _, home in HOMES if hasattr(home, "lab_facts") for k, v in home.lab_facts().items()}


def derive(inputs: Inputs | None = None) -> dict[str, dict[str, Any]]:
    """Every figure the course shows, computed from `inputs`, grouped by chapter
    (``figures["ch2"]["workers_at_target"]``): each home's `figures` in chapter order (a chapter may read
    the ones before it), then each home's `prose` figures, then its `lesson_notes`. Values are numbers,
    booleans, strings, ``None`` (unbounded) or lists of row dicts for tables; the whole result is
    JSON-serialisable."""
    inputs = inputs or Inputs()
    core = core_quantities(inputs)
    fig: dict[str, dict[str, Any]] = {}
    with_figures = [(f"ch{n}", home) for n, home in HOMES if hasattr(home, "figures")]
    for name, home in with_figures:
        fig[name] = home.figures(inputs, core, fig)
    for _, home in with_figures:
        home.prose(inputs, fig)
    for name, home in with_figures:
        fig[name]["lesson_notes"] = home.lesson_notes(inputs, fig) if hasattr(home, "lesson_notes") else []
    return fig


def figures_of(addon: str, inputs: Inputs | None = None) -> dict[str, Any]:
    """The figures of the chapter whose lab panel is `addon` (its `ADDON`: "fairness", "schedule" …), so a
    feature's code reads its chapter's figures without naming the chapter."""
    [n] = [n for n, home in HOMES if getattr(home, "ADDON", None) == addon]
    return derive(inputs)[f"ch{n}"]


def to_json(inputs: Inputs | None = None) -> dict[str, Any]:
    """Inputs, their specs and every figure as one JSON-serialisable dict — the `/api/model` body."""
    inputs = inputs or Inputs()
    return {
        "inputs": dict(inputs.flat(), job_mix=[dataclasses.asdict(jt) for jt in inputs.job_mix]),
        "specs": spec_values(inputs),
        "figures": derive(inputs),
    }


def chart_series(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> ChartSeries:
    """Every chapter's chart data for `inputs` and their figures (`derive(inputs)`), by chart name."""
    return ChartSeries(
        {name: build(inputs, fig) for _, home in HOMES for name, build in getattr(home, "CHARTS", {}).items()}
    )


def all_chapters() -> tuple[Chapter, ...]:
    """Every chapter, in order (read once per process)."""
    return CHAPTERS


def find(number: int) -> Chapter | None:
    return next((c for c in CHAPTERS if c.number == number), None)


def steps_public() -> dict[str, list[dict[str, Any]]]:
    """The steps as /api/meta serves them: each with its claim's text (revealed after the verdict) and its
    button's question when the step asks none of its own."""
    buttons = {(p, b["id"]): b for p, bs in BUTTONS.items() for b in bs}
    out: dict[str, list[dict[str, Any]]] = {}
    for preset, steps in STEPS.items():
        rows = []
        for step in steps:
            row = {**step, "claim_text": BY_ID[step["claim"]].claim}
            scn = next((a["scenario"] for a in step.get("do", ()) if "scenario" in a), None)
            if "predict" not in step and scn:
                row["predict"] = buttons[(preset, scn)]["predict"]
            rows.append(row)
        out[preset] = rows
    return out


__all__ = [
    "BUTTONS",
    "BY_ID",
    "CHAPTERS",
    "CLAIMS",
    "DEFAULT_PRESET",
    "HOMES",
    "PANEL",
    "PRESETS",
    "RACES",
    "SCENARIOS",
    "STEPS",
    "Chapter",
    "all_chapters",
    "chart_series",
    "derive",
    "find",
    "lab_facts",
    "parse_front_matter",
    "render_body",
    "scrollable_tables",
    "settings_for",
    "steps_public",
    "to_json",
]
