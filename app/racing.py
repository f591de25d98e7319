"""Race listings: the races on offer as any page lists them (app/races.py runs them).

A race (`RACES` in its chapter home, gathered by `chapters`) sends one input through two to four labs that
differ in one setting: it names its chapter preset, the settings set on every lab (`base`), the variants
(each changes only the settings named in `vary`), the jobs and fault every lab gets, and the counts its
table compares. Kept apart from the races blueprint so any page (a room's, a chapter's) can list them.
"""

from __future__ import annotations

from typing import Any

import chapters
from app import scenarios


def public(race_id: str) -> dict[str, Any]:
    rc = chapters.RACES[race_id]
    return {"id": race_id, "title": rc["title"], "preset": rc["preset"], "summary": rc["summary"],
            "vary": rc["vary"], "variants": [v["label"] for v in rc["variants"]],
            "chapter_url": scenarios.chapter_path(rc["preset"])}


def for_preset(preset: str) -> list[dict[str, Any]]:
    return [public(i) for i, rc in chapters.RACES.items() if rc["preset"] == preset]
