"""The browser's launch arguments: the tests' pages and the benchmarks' page loads start Chromium alike."""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_launch_args(base: dict | None = None) -> dict:
    """System Chromium when present (playwright install cannot download here), else Playwright's."""
    args = {**(base or {}), "args": CHROMIUM_ARGS}
    system = shutil.which("chromium") or "/usr/bin/chromium"
    if Path(system).exists():
        args["executable_path"] = system
    return args
