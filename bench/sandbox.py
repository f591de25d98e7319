"""sandbox: what the sandbox every ffmpeg runs in (core/sandbox.py) costs per call.

The thumbnail step (`media.start_thumbnail`, a 144p JPEG of the sample's first frame: what a thumbnail attempt
runs) timed from start to exit, sandboxed as the lab runs it, against the very same ffmpeg command started
plainly (no bwrap, no setpriv/prlimit, the caller's environment). Beside it, `/bin/true` both ways: the fixed
price of making the namespaces and mounts. Runs alternate (plain, sandboxed, plain, …) so a busy moment of the
shared box falls on both; RATIO = median sandboxed ÷ median plain thumbnail, measured in this run.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from bench.common import Bench, median, report, rnd
from core import media, sandbox
from core.procs import die_with_parent

NAME = "sandbox"
RUNS = 30


def inner(args: list[str]) -> list[str]:
    """The command a sandboxed argv runs: what follows its last `--` (bwrap's, setpriv's, prlimit's); an
    unconfined one (no sandbox on this host) is the command itself."""
    return args[len(args) - args[::-1].index("--") :] if "--" in args else list(args)


def timed(start) -> float:
    """Real seconds from start to exit of `start()`'s process."""
    t0 = time.perf_counter()
    proc = start()
    _out, err = proc.communicate(timeout=120)
    real = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {err[:200]!r}")
    return real


def plain(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent
    )


def run(b: Bench) -> dict:
    why = sandbox.unavailable()
    tmp = b.stack.root / "sandbox-bench"
    tmp.mkdir(parents=True, exist_ok=True)
    src = media.sample_clip()
    dst = tmp / "thumb.jpg"
    first = media.start_thumbnail(src, dst)
    first.communicate(timeout=120)
    thumb_argv = inner(first.args)
    cases = {
        "ffmpeg thumbnail, plain": lambda: plain(thumb_argv),
        "ffmpeg thumbnail, sandboxed": lambda: media.start_thumbnail(src, dst),
        "/bin/true, plain": lambda: plain(["/bin/true"]),
        "/bin/true, sandboxed": lambda: sandbox.sandboxed(
            ["/bin/true"], read=[], write=Path(tmp), limits=media.SANDBOX
        ).popen(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
    }
    real: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(RUNS):
        for what, start in cases.items():
            real[what].append(timed(start))
    shutil.rmtree(tmp, ignore_errors=True)
    rows = [
        {
            "what": what,
            "runs": RUNS,
            "median_ms": rnd(median(real[what]) * 1000, 1),
            "min_ms": rnd(min(real[what]) * 1000, 1),
            "max_ms": rnd(max(real[what]) * 1000, 1),
        }
        for what in cases
    ]
    by = {row["what"]: row for row in rows}
    for kind in ("ffmpeg thumbnail", "/bin/true"):
        sandboxed, bare = by[f"{kind}, sandboxed"], by[f"{kind}, plain"]
        sandboxed["added_ms"] = rnd(sandboxed["median_ms"] - bare["median_ms"], 1)
        sandboxed["vs_plain"] = rnd(sandboxed["median_ms"] / bare["median_ms"], 2)
    thumb = by["ffmpeg thumbnail, sandboxed"]
    notes = [
        f"sample {src.name}; the thumbnail's command is the sandboxed one's own (after its last `--`)",
        "added_ms = median sandboxed − median plain (start to exit, real time)",
    ]
    if why:
        notes.append(f"UNSANDBOXED here ({why}): both rows run the same unconfined command")
    return report(
        NAME,
        "the sandbox's price per ffmpeg call",
        ["what", "runs", "median_ms", "min_ms", "max_ms", "added_ms", "vs_plain"],
        rows,
        {
            "label": "sandboxed ÷ plain ffmpeg thumbnail (median, start to exit)",
            "value": thumb["vs_plain"],
            "baseline": "the same ffmpeg command started plainly, alternating with it in this run",
            "also": f"+{thumb['added_ms']} ms per call",
        },
        {"runs": RUNS, "limits": asdict(media.SANDBOX)},
        notes,
    )
