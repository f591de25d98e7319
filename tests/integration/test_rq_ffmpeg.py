"""A real `rq worker` process runs a real ffmpeg command; the output is a valid video."""

import subprocess
import sys
from pathlib import Path

import redis
from rq import Queue

from workers import media

pytestmark = __import__("pytest").mark.integration


def transcode_to(src: str, dst: str) -> str:
    proc = media.start_transcode(Path(src), Path(dst), 144)
    assert proc.wait(60) == 0, proc.stderr.read()
    return dst


def test_a_real_rq_worker_transcodes_a_generated_clip(redis_server, tmp_path):
    src = media.generate_clip(tmp_path / "testsrc.mp4", seconds=2)
    conn = redis.Redis.from_url(redis_server.url)
    q = Queue("skeleton-check", connection=conn)
    job = q.enqueue(f"{__name__}.transcode_to", str(src), str(tmp_path / "out.mp4"))
    subprocess.run([str(Path(sys.executable).with_name("rq")), "worker", "--burst", "--url",
                    redis_server.url, "skeleton-check"], check=True, timeout=120,
                   cwd=Path(__file__).resolve().parents[2])
    job.refresh()
    assert job.get_status() == "finished", job.exc_info
    out = tmp_path / "out.mp4"
    media.probe(out)  # decodes without error
    assert abs(media.duration_of(out) - 2.0) < 0.2


def test_probe_refuses_what_is_not_a_video(tmp_path):
    bad = tmp_path / "x.mp4"
    bad.write_text("hello")
    try:
        media.probe(bad)
    except media.InvalidMedia as e:
        assert "183" in str(e)
    else:
        raise AssertionError("a text file passed the probe")
