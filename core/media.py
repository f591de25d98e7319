"""Real media work with the ffmpeg binary from the imageio-ffmpeg wheel.

The wheel has no ffprobe, so validity is checked by decoding: `-xerror` turns any decode error
(including a truncated faststart MP4, which otherwise exits 0) into a non-zero exit.
Every input is opened with SAFE_INPUT: only the `file` protocol and only real video containers
(no HLS playlist, no ffconcat list, so an upload cannot make ffmpeg read /etc/passwd or another
lab's files), and no frame larger than the configured pixel cap (a 30000×30000 header cannot make
the decoder allocate gigabytes). Every run has a real-time limit and is killed when it passes it, and
every run is sandboxed (core/sandbox.py): it reads its inputs and writes its one output directory, and
nothing else, with no network and no environment (the server's URL and password stay outside).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import threading
from functools import lru_cache
from pathlib import Path

from core import sandbox
from core.config import ROOT, Config

RENDITIONS: dict[str, int] = {"360p": 360, "240p": 240, "144p": 144}
LIMITS = Config.from_env()
FORMATS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi"
# One thread per ffmpeg (decode, filters, x264): a lab job runs renditions side by side and a box runs
# several labs, so ffmpeg's default of a thread per core (and x264's lookahead threads) only
# oversubscribes the cores; single-threaded, each encode costs its CPU and nothing more.
THREADS = ["-threads", str(os.environ.get("FFMPEG_THREADS", "1")), "-filter_threads", "1"]
SAFE_INPUT = ["-protocol_whitelist", "file", "-format_whitelist", FORMATS, "-max_pixels", str(LIMITS.max_video_pixels)]
# The sandbox of every run, from measured need (bench sandbox; a 5 s 720p clip, a 1.7 MB 10 s 640×360 upload,
# a 2 s 4K upload): peak 1.12 GB of address space (glibc's per-thread arenas; 139 MB resident at most), 16
# threads (the probe's decoder), 6 open files, 2.0 CPU-s. Limits: CPU as long as the real-time limit (a run is
# killed then anyway), 3 GiB of address space, 64 tasks, twice the `-fs` cap per file, 64 open files.
SANDBOX = sandbox.Limits(
    cpu_s=max(1, math.ceil(LIMITS.ffmpeg_timeout)),
    memory_bytes=3 << 30,
    tasks=64,
    file_bytes=2 * LIMITS.max_output_bytes,
    open_files=64,
)


@lru_cache(maxsize=1)
def ffmpeg() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


def _run(args: list[str], read: list[Path], write: Path | None) -> sandbox.Sandboxed:
    """`ffmpeg args` in the sandbox: the binary and `read` read-only, `write` (a directory) read-write."""
    return sandbox.sandboxed([ffmpeg(), *args], read=[Path(ffmpeg()), *read], write=write, limits=SANDBOX)


# The lab's sample clips (their names and labels: core/events.py SAMPLES), made from ffmpeg's own test
# sources (lavfi testsrc2 and a sine tone) the first time each is used and kept under var/samples/. The recipe
# is deterministic (one encoder thread, a seeded noise source), so every pool host makes the same clip on its
# own disk and none needs another's. Small on purpose: a lab job's real work (two renditions and a thumbnail)
# costs about 0.2 CPU-s; a learner's own upload is transcoded in full, whatever its size.
# name → (frame size, seconds, audio). The car phone clip carries lossless white noise (ALAC) instead of the
# tone: ~570 kB of cheap-to-decode bytes, the size of a real small upload, which the upload and disk-cap tests
# need (one fits in 1 MB, two do not).
SAMPLE_RECIPES: dict[str, tuple[str, float, str]] = {
    "bigbuckbunny": ("320x180", 1.0, "tone"),
    "bikes": ("320x240", 1.0, "tone"),
    "carphone_pristine": ("176x144", 1.5, "noise"),
}
SAMPLE_DIR = ROOT / "var" / "samples"
_AUDIO = {
    "tone": (["-f", "lavfi", "-i", "sine=frequency=440:duration={s}"], ["-c:a", "aac", "-b:a", "64k"]),
    "noise": (["-f", "lavfi", "-i", "anoisesrc=d={s}:c=white:r=96000:a=0.5:seed=1"], ["-ac", "2", "-c:a", "alac"]),
}


def sample_clip(name: str = "bigbuckbunny") -> Path | None:
    """The sample clip `name` (made on first use, see SAMPLE_RECIPES); None if there is no such sample."""
    if name not in SAMPLE_RECIPES:
        return None
    path = SAMPLE_DIR / f"{name}.mp4"
    if not path.exists():
        make_clip(path, *SAMPLE_RECIPES[name])
    return path


def generate_clip(path: Path, seconds: float = 3, size: str = "320x240") -> Path:
    """A synthetic test clip (lavfi testsrc2 + sine tone), for tests."""
    return make_clip(path, size, seconds, "tone")


def make_clip(path: Path, size: str, seconds: float, audio: str) -> Path:
    """Encode a clip next to `path`, then move it into place: processes (and threads of one process) that ask
    at once never see half a file, and each writes its own temporary name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.mp4")
    source, codec = _AUDIO[audio]
    try:
        _run(
            [
                "-v",
                "error",
                "-y",
                "-f",
                "lavfi",
                "-i",
                f"testsrc2=duration={seconds}:size={size}:rate=25",
                *(arg.format(s=seconds) for arg in source),
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-crf",
                "23",
                "-threads",
                "1",
                "-pix_fmt",
                "yuv420p",
                *codec,
                "-shortest",
                str(tmp),
            ],
            [],
            path.parent,
        ).run(check=True, timeout=60)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


class InvalidMedia(ValueError):
    """The file is not a decodable video."""


def _reason(stderr: str, path: Path) -> str:
    """ffmpeg's most telling error line, without its `[demuxer @ 0x…]` prefix or our file path."""
    lines = [
        re.sub(r"\[[^\]]* @ 0x[0-9a-f]+\] ", "", ln).replace(str(path), path.name) for ln in stderr.strip().splitlines()
    ]
    telling = [ln for ln in lines if not ln.startswith(("Error opening input", "Error opening output"))]
    return ((telling or lines or ["not a decodable video"])[0])[:160]


def _decode_check(path: Path, extra: list[str], timeout: float) -> None:
    try:
        proc = _run(
            ["-v", "error", "-xerror", *SAFE_INPUT, "-i", str(path), *extra, "-f", "null", "-"], [path], None
        ).run(capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise InvalidMedia(f"decoding took longer than {timeout:g} s") from None
    if proc.returncode != 0:
        raise InvalidMedia(f"ffmpeg exit {proc.returncode}: {_reason(proc.stderr, path)}")


def probe(path: Path, timeout: float = LIMITS.ffmpeg_timeout) -> None:
    """Decode the whole file; raise InvalidMedia with ffmpeg's first error line if it fails."""
    _decode_check(path, [], timeout)


def check_upload(path: Path, timeout: float = 20) -> None:
    """The upload-time check: an allowed container whose first video frame decodes within the pixel
    cap. Cheap (one frame), so the web process can refuse most bad uploads with a reason at once;
    damage further in (a truncated file) is found by the worker's full `probe` and dead-lettered."""
    _decode_check(path, ["-map", "0:v:0", "-frames:v", "1"], timeout)


def _encode(dst: Path, threads: list[str]) -> list[str]:
    """One output's encode, the same for every transcode: the first 8 s, size-capped, libx264 veryfast crf 28
    with 64 kb/s stereo AAC, to a fast-start .mp4 at `dst`; `threads` the encoder's thread options."""
    return [
        "-t",
        "8",
        "-fs",
        str(LIMITS.max_output_bytes),
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-crf",
        "28",
        *threads,
        "-pix_fmt",
        "yuv420p",
        "-c:a",
        "aac",
        "-ac",
        "2",
        "-b:a",
        "64k",
        "-movflags",
        "+faststart",
        "-f",
        "mp4",
        str(dst),
    ]


def start_transcode(src: Path, dst: Path, height: int) -> subprocess.Popen:
    """Start a real libx264 transcode to `dst` (an .mp4 temp path); the caller paces and waits."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    return _run(
        ["-v", "error", "-y", *SAFE_INPUT, "-threads", "1", "-i", str(src), "-vf", f"scale=-2:{height}"]
        + _encode(dst, THREADS),
        [src],
        dst.parent,
    ).popen(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # dies with the horse


def start_transcodes(src: Path, outputs: list[tuple[Path, int]]) -> subprocess.Popen:
    """Every rendition of one job from ONE decode (`split` filter), each to its own .mp4 temp path:
    measured 0.96 CPU-s for 240p + 144p of the sample against 1.37 for two single-threaded runs
    (1.49 with ffmpeg's default threading). What a transcode attempt runs (workers/tasks.py): one process,
    one decode, one encode per rendition. Same encode per output as `start_transcode` (`_encode`), each on one
    thread. Every output is in one directory (the sandbox writes one)."""
    (out_dir,) = {dst.parent for dst, _h in outputs}
    out_dir.mkdir(parents=True, exist_ok=True)
    n = len(outputs)
    graph = (
        f"[0:v]split={n}"
        + "".join(f"[s{i}]" for i in range(n))
        + ";"
        + ";".join(f"[s{i}]scale=-2:{h}[v{i}]" for i, (_dst, h) in enumerate(outputs))
    )
    args = [
        "-v",
        "error",
        "-y",
        *SAFE_INPUT,
        "-threads",
        "1",
        "-i",
        str(src),
        "-filter_complex",
        graph,
        "-filter_complex_threads",
        "1",
    ]
    for i, (dst, _h) in enumerate(outputs):
        args += ["-map", f"[v{i}]", "-map", "0:a?", *_encode(dst, ["-threads", "1"])]
    return _run(args, [src], out_dir).popen(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_thumbnail(src: Path, dst: Path) -> subprocess.Popen:
    """A 144p JPEG of the first frame, running: a thumbnail attempt paces its job while it works
    (workers/tasks.py), so the lab's clock moves on meanwhile instead of waiting at the claim."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    return _run(
        [
            "-v",
            "error",
            "-y",
            "-threads",
            "1",
            *SAFE_INPUT,
            "-i",
            str(src),
            "-frames:v",
            "1",
            "-vf",
            "scale=-2:144",
            "-f",
            "image2",
            str(dst),
        ],
        [src],
        dst.parent,
    ).popen(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def thumbnail(src: Path, dst: Path) -> None:
    """The same thumbnail, waited for (raw RQ's floor in bench throughput runs exactly this encode)."""
    proc = start_thumbnail(src, dst)
    try:
        _out, err = proc.communicate(timeout=LIMITS.ffmpeg_timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, stderr=err)


def duration_of(path: Path) -> float:
    """Decoded duration in seconds (from ffmpeg's own progress output: no ffprobe in the wheel)."""
    proc = _run(
        ["-v", "error", *SAFE_INPUT, "-i", str(path), "-f", "null", "-progress", "pipe:1", "-"], [path], None
    ).run(capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise InvalidMedia(proc.stderr.strip()[:160])
    us = [
        int(line.split("=")[1])
        for line in proc.stdout.splitlines()
        if line.startswith("out_time_us=") and line.split("=")[1].isdigit()
    ]
    return (max(us) if us else 0) / 1e6


def sniff(head: bytes) -> str | None:
    """The container a file's first bytes announce (never trust the filename), or None."""
    if len(head) >= 12 and head[4:8] == b"ftyp":
        return "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    return None


def atomic_rename(tmp: Path, final: Path) -> None:
    """Publish a finished file in one step, so readers never see a half-written output."""
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
