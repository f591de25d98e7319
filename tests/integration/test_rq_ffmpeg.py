"""A real `rq worker` process runs a real ffmpeg command; the output is a valid video."""

import subprocess
import sys
from pathlib import Path

import redis
from rq import Queue

from core import media


def transcode_to(src: str, dst: str) -> str:
    proc = media.start_transcode(Path(src), Path(dst), 144)
    assert proc.wait(60) == 0, proc.stderr.read()
    return dst


def test_a_real_rq_worker_transcodes_a_generated_clip(redis_server, tmp_path):
    src = media.generate_clip(tmp_path / "testsrc.mp4", seconds=2)
    conn = redis.Redis.from_url(redis_server.url)
    q = Queue("skeleton-check", connection=conn)
    job = q.enqueue(f"{__name__}.transcode_to", str(src), str(tmp_path / "out.mp4"))
    subprocess.run(
        [str(Path(sys.executable).with_name("rq")), "worker", "--burst", "--url", redis_server.url, "skeleton-check"],
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
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


def test_every_sample_is_made_by_ffmpeg_and_the_same_on_every_host(tmp_path):
    from core.events import SAMPLES

    assert set(media.SAMPLE_RECIPES) == set(SAMPLES) - {"poison"}, "each sample a learner can pick has a recipe"
    for name, recipe in media.SAMPLE_RECIPES.items():
        a = media.make_clip(tmp_path / "a" / f"{name}.mp4", *recipe)
        b = media.make_clip(tmp_path / "b" / f"{name}.mp4", *recipe)
        assert a.read_bytes() == b.read_bytes(), f"two hosts making {name} would disagree"
    for name in media.SAMPLE_RECIPES:
        media.probe(media.sample_clip(name))  # decodes without error
    assert media.sample_clip("no-such-sample") is None


def test_the_default_sample_job_makes_playable_renditions_and_a_thumbnail(api, tmp_path):
    lab = api.lab("ch1", speed=200, workers=2)
    api.workers_ready(lab, 2)
    base = f"/api/labs/{lab['lab_id']}/jobs"
    transcode = api.call("POST", base, {"duration_s": 10}, lab["token"]).json()["job_id"]
    thumb = api.call("POST", base, {"job_type": "thumbnail", "duration_s": 10}, lab["token"]).json()["job_id"]
    snap = api.wait_for(lab, lambda s: s["counts"]["done"] == 2, timeout=120, what="both default jobs done")
    outputs = {j["id"]: j["outputs"] for j in snap["jobs"]}
    got = {**{rend: outputs[transcode][rend] for rend in ("240p", "144p")}, "thumb": outputs[thumb]["thumb"]}
    for rend, url in got.items():
        res = api.call("GET", url, token=lab["token"])
        assert res.status == 200, f"{rend}: {res.status}"
        path = tmp_path / f"{rend}{'.jpg' if rend == 'thumb' else '.mp4'}"
        path.write_bytes(res.body)
        if rend == "thumb":
            assert res.body[:2] == b"\xff\xd8", "the thumbnail is not a JPEG"
        else:
            media.probe(path)  # ffmpeg decodes every frame without error
            assert media.duration_of(path) > 0.5
