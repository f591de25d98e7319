#!/usr/bin/env python3
"""The two-command entry point: `python3 lab.py` runs the app, `python3 lab.py test` runs every test.

Stdlib only, because it runs before anything is installed: it creates `.venv`, installs the
project into it (again only when pyproject.toml changed), then hands over to the venv's Python.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".installed"

COMMANDS = {
    "run": [["-m", "runtime.launcher"]],
    "test": [["-m", "ruff", "check", "."], ["-m", "pytest"]],
    "bench": [["-m", "bench"]],
    "chaos": [["-m", "chaos"]],
}


def ensure_venv() -> None:
    """Create the venv and install the project with its test extras, once per pyproject change."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    if not PYTHON.exists():
        print("lab: creating .venv …", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print("lab: installing dependencies (first run takes about a minute) …", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", f"{ROOT}[test]"], check=True)
    STAMP.write_text(digest)


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "run"
    if name not in COMMANDS:
        print(f"usage: python3 lab.py [{'|'.join(COMMANDS)}] [extra args]", file=sys.stderr)
        return 2
    ensure_venv()
    *before, last = COMMANDS[name]
    os.chdir(ROOT)
    for step in before:
        rc = subprocess.call([str(PYTHON), *step])
        if rc != 0:
            return rc
    # exec, not a child: Ctrl-C must reach the launcher itself so it can stop what it started.
    os.execv(str(PYTHON), [str(PYTHON), *last, *argv[1:]])


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
