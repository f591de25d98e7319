"""The type checker over core/ and the broker: mypy, configured in pyproject.toml ([tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def checked_paths() -> list[str]:
    """Every package under core/ (core/broker and core/engines with it)."""
    return ["core"]


def test_core_and_the_broker_type_check():
    out = subprocess.run([sys.executable, "-m", "mypy", *checked_paths()], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
