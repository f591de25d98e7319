"""The widget's model (static/js/widget/model.js, timeline-model.js) tested without a browser.

The reducer that folds a snapshot and the events after it into the numbers on screen is plain
JavaScript with no DOM, so node runs its tests (tests/js/*.test.mjs) directly; this wrapper puts
them in `python3 lab.py test`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_widget_model_node_tests_pass():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    proc = subprocess.run([node, "--test", "tests/js/"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
