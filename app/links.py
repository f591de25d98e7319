"""Links: where each chapter, ready-made scenario and race lives, as any page or the API lists them.

A scenario's shareable URL reproduces a set-up an instructor prepares before class.

The set-ups themselves (`SCENARIOS`) live in their chapter homes and are gathered by `chapters`; read by the
API (`/api/scenarios`), the room and index pages, and the chapter page's scenario banner. A scenario is a
chapter preset plus settings on top (every one of them travels in the shareable URL's query string, so the
link alone reproduces the set-up) and the action that makes the effect happen: a fault to inject and/or jobs
to send.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import chapters
from core import settings


def chapter_for(preset: str) -> chapters.Chapter | None:
    """The chapter whose page runs this preset (a room and a scenario open that page)."""
    return next((c for c in chapters.all_chapters() if c.preset == preset), None)


def room_presets() -> list[str]:
    """Presets a room can run: one per chapter, since students land on that chapter's page."""
    return [c.preset for c in chapters.all_chapters() if c.preset in chapters.PRESETS]


def chapter_path(preset: str) -> str:
    ch = chapter_for(preset)
    return f"/chapters/{ch.url_slug}" if ch else "/"


def query_for(scenario_id: str) -> dict[str, str]:
    """The query string that reproduces a scenario: its id plus every setting, as text."""
    sc = chapters.SCENARIOS[scenario_id]
    return {"scenario": scenario_id, **{name: _text(v) for name, v in sc["settings"].items()}}


def _text(value: Any) -> str:
    """A setting as a query-string value the settings validator reads back to the same value."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def url_for(scenario_id: str) -> str:
    """The shareable link: the chapter page with the scenario in its query string."""
    return f"{chapter_path(chapters.SCENARIOS[scenario_id]['preset'])}?{urlencode(query_for(scenario_id))}"


def settings_for(scenario_id: str) -> dict[str, Any]:
    """Full lab settings for a scenario: the preset's, with the scenario's on top (validated)."""
    sc = chapters.SCENARIOS[scenario_id]
    clean, errors = settings.validate(sc["settings"])
    if errors:
        raise ValueError(f"scenario {scenario_id}: {errors}")
    return {**chapters.settings_for(sc["preset"]), **clean}


def public(scenario_id: str) -> dict[str, Any]:
    """A scenario as the API and pages show it, with its link."""
    sc = chapters.SCENARIOS[scenario_id]
    return {
        "id": scenario_id,
        **sc,
        "url": url_for(scenario_id),
        "short_url": f"/s/{scenario_id}",
        "chapter_url": chapter_path(sc["preset"]),
    }


def all_public() -> list[dict[str, Any]]:
    return [public(s) for s in chapters.SCENARIOS]


def race_public(race_id: str) -> dict[str, Any]:
    """A race as any page lists it (app/routes/races.py runs them): the labs it compares and its chapter.

    A race (`RACES` in its chapter home, gathered by `chapters`) sends one input through two to four labs that
    differ in one setting (`vary`)."""
    rc = chapters.RACES[race_id]
    return {
        "id": race_id,
        "title": rc["title"],
        "preset": rc["preset"],
        "summary": rc["summary"],
        "vary": rc["vary"],
        "variants": [v["label"] for v in rc["variants"]],
        "chapter_url": chapter_path(rc["preset"]),
    }


def races_for(preset: str) -> list[dict[str, Any]]:
    return [race_public(i) for i, rc in chapters.RACES.items() if rc["preset"] == preset]
