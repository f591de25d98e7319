"""Partial outputs swept while their folders come and go (a lab reset or moved mid-sweep)."""

import os
import shutil
import time

from core import blobs


def test_a_folder_removed_between_listing_and_sweeping_is_skipped_and_the_rest_are_swept(tmp_path):
    for job in ("1", "2", "3"):
        (tmp_path / job).mkdir()
        (tmp_path / job / ".tmp-w1-a1-720.mp4").write_bytes(b"partial")
        (tmp_path / job / "720.mp4").write_bytes(b"published")
    (tmp_path / "note.txt").write_text("a file is not a job folder")
    folders = blobs.subfolders(tmp_path)
    assert sorted(f.name for f in folders) == ["1", "2", "3"]
    shutil.rmtree(tmp_path / "2")  # its lab was reset after the listing
    assert blobs.remove_partials(folders, ".tmp-*") == 2
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "1",
        "1/720.mp4",
        "3",
        "3/720.mp4",
        "note.txt",
    ]
    assert blobs.subfolders(tmp_path / "2") == [] and blobs.subfolders(tmp_path / "note.txt") == []


def test_only_partials_untouched_longer_than_the_limit_are_swept(tmp_path):
    old, young = tmp_path / ".tmp-w1-a1-old", tmp_path / ".tmp-w2-a1-young"
    old.write_bytes(b"x")
    young.write_bytes(b"x")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert blobs.remove_partials([tmp_path], ".tmp-*", older_than=60) == 1
    assert not old.exists() and young.exists()
