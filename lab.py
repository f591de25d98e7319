#!/usr/bin/env python3
"""The two-command entry point: `python3 lab.py` runs the app, `python3 lab.py test` runs every test.

Stdlib only, because it runs before anything is installed: it creates `.venv`, installs what the command
needs into it (the runtime dependencies for `run`, the test extras too for everything else; again only when
pyproject.toml changed), then hands over to the venv's Python. The installer is uv, fetched once from PyPI's
simple index into the venv (checked against the index's sha256), so a first run takes seconds; where no uv
wheel fits the machine or PyPI cannot be reached, pip does the same work. The project itself goes on the
venv's path with a .pth file, as an editable install would put it, with no build step.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tomllib
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
UV = VENV / "bin" / "uv"
STAMP = VENV / ".installed"
UV_VERSION = "0.13.9"
INDEX = os.environ.get("UV_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple/"

COMMANDS = {
    "run": [["-m", "runtime.launcher"]],
    "test": [["-m", "ruff", "check", "."], ["-m", "ruff", "format", "--check", "."], ["-m", "pytest"]],
    "bench": [["-m", "bench"]],
    "chaos": [["-m", "chaos"]],
}
RUNTIME_ONLY = {"run"}  # the other commands need the test extras (pytest, ruff, playwright, honcho …)


def requirements(extras: bool) -> list[str]:
    """pyproject.toml's runtime dependencies, and its test extras if asked."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *(project["optional-dependencies"]["test"] if extras else [])]


def uv_wheel(filename: str) -> bool:
    """Whether a uv wheel's file name fits this machine (its OS, its libc on Linux, its architecture)."""
    arch = platform.machine().lower()
    if sys.platform == "darwin":
        return "macosx" in filename and filename.endswith(f"_{'x86_64' if arch == 'x86_64' else 'arm64'}.whl")
    libc = "manylinux" if platform.libc_ver()[0] == "glibc" else "musllinux"
    return sys.platform == "linux" and libc in filename and filename.endswith(f"_{arch}.whl")


def fetch_uv() -> bool:
    """Put uv's binary at .venv/bin/uv, from its wheel on the index; False if that cannot be done here."""
    page = urllib.parse.urljoin(INDEX, "uv/")
    try:
        req = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(req, timeout=30) as res:
            files = json.load(res)["files"]
        wheel = next(f for f in files if f["filename"].startswith(f"uv-{UV_VERSION}-") and uv_wheel(f["filename"]))
        with urllib.request.urlopen(urllib.parse.urljoin(page, wheel["url"]), timeout=120) as res:
            data = res.read()
    except (OSError, ValueError, KeyError, StopIteration) as e:
        print(f"lab: no uv ({e}); installing with pip instead", flush=True)
        return False
    if hashlib.sha256(data).hexdigest() != wheel["hashes"]["sha256"]:
        raise SystemExit(f"lab: {wheel['filename']} does not match the index's sha256")
    with zipfile.ZipFile(io.BytesIO(data)) as whl:
        UV.write_bytes(whl.read(f"uv-{UV_VERSION}.data/scripts/uv"))
    UV.chmod(0o755)
    return True


def ensure_venv(extras: bool = True) -> None:
    """Create the venv and install what a command needs, once per pyproject change (and once more when a
    command first needs the test extras)."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    have = STAMP.read_text().split() if STAMP.exists() else []
    want = [digest, "test"] if extras else [digest]
    if have[:1] == [digest] and set(want) <= set(have):
        return
    if not PYTHON.exists():
        print("lab: creating .venv …", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
    print(f"lab: installing the {'test' if extras else 'runtime'} dependencies …", flush=True)
    reqs = requirements(extras)
    if UV.exists() or fetch_uv():
        subprocess.run(
            [str(UV), "pip", "install", "-q", "--python", str(PYTHON), "--index-url", INDEX, *reqs], check=True
        )
    else:
        if not (VENV / "bin" / "pip").exists():
            subprocess.run([str(PYTHON), "-m", "ensurepip", "-q"], check=True)
        subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check", *reqs], check=True)
    site = subprocess.run(
        [str(PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "async_work_lab.pth").write_text(f"{ROOT}\n")  # the project's packages, from this checkout
    STAMP.write_text(" ".join(want))


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "run"
    if name not in COMMANDS:
        print(f"usage: python3 lab.py [{'|'.join(COMMANDS)}] [extra args]", file=sys.stderr)
        return 2
    ensure_venv(extras=name not in RUNTIME_ONLY)
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
