"""Chapter 9, A Stub Chapter: its home — the smallest chapter the course can hold.

Its prose is chapter.md beside this file; here are its preset, its one guided step and its one claim.
chapters/__init__.py finds this folder by its name and gathers its tables with every other chapter's.
"""

from __future__ import annotations

from typing import Any

from chapters.common import SHOWS_RETRIES
from core.lesson import Claim

SLUG = "a-stub-chapter"  # the page is /chapters/9-a-stub-chapter

PRESETS: dict[str, dict[str, Any]] = {
    "ch9": {"shows": SHOWS_RETRIES, "title": "A stub: two workers", "settings": {"workers": 2},
            "controls": ["upload", "clock"]},
}

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch9": [
        {"claim": "ch9.workers", "title": "Upload one clip",
         "predict": {"question": "How many workers are there to take the clip?"}},
    ],
}

CLAIMS: tuple[Claim, ...] = (
    Claim("ch9.workers", 9, "Try this 1", "The stub chapter's page states its preset's worker count",
          "test_try1_the_page_states_the_presets_worker_count"),
)
