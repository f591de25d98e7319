"""Chapter 9, A Stub Chapter: its page states what its preset sets up (the worker count)."""

from __future__ import annotations

import pytest

import chapters
from tests.lesson.helpers import page_text

pytestmark = pytest.mark.lesson

PRESET = chapters.settings_for("ch9")


def test_try1_the_page_states_the_presets_worker_count(api, measured):
    text = page_text(api, 9)
    assert f"starts with {PRESET['workers']} workers" in text
    measured.update(workers=PRESET["workers"])
