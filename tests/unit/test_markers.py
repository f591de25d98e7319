"""Markers by folder (tests/conftest.py): a marker filter means what it says."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT_ONLY = "not integration and not e2e and not lesson"
STACK_FIXTURES = ("redis_server", "stack", "api", "r", "browser", "page")


def test_a_unit_run_sets_up_no_server_stack_or_browser():
    """pytest's own setup plan for the unit filter (the fixtures it would set up, nothing run): only tests under
    tests/unit, and no fixture that starts a server, a stack or Chromium."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--setup-plan", "-n", "0", "-p", "no:randomly", "-m", UNIT_ONLY],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    tests = re.findall(r"^\s*(tests/\S+?)::", out.stdout, re.M)
    assert tests and all(t.startswith("tests/unit/") for t in tests), sorted(set(tests))
    set_up = set(re.findall(r"^\s*SETUP\s+[SMCF]\s+(\w+)", out.stdout, re.M))
    assert set_up, "the plan lists no fixture at all: nothing was checked"
    assert not set_up & set(STACK_FIXTURES), f"a unit run would set up {set_up & set(STACK_FIXTURES)}"
