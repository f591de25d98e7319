"""A job's source video: an upload checked and stored as a blob, or a sample clip (or the poison pill)."""

from __future__ import annotations

import uuid

from flask import current_app, request

from app.errors import ApiError
from app.store import get_redis
from core import blobs, media
from core.events import SAMPLES


def source_from_upload(lab_id: str) -> tuple[str, str]:
    """Check an uploaded file's bytes, then store it as a blob every host can read; returns (source, video_id).

    The bytes pass through a local temp file only (ffmpeg's one-frame check needs a file), removed
    before the answer: no host relies on this one's disk.
    """
    f = request.files.get("file")
    if f is None:
        raise ApiError(422, "missing_file", {"file": "send the video in the multipart field 'file'"})
    cfg = current_app.config["LAB"]
    head = f.stream.read(64)
    if not head:
        raise ApiError(422, "empty_file", {"file": "the file is empty"})
    if media.sniff(head) is None:
        raise ApiError(
            415,
            "not_a_video",
            {"file": "the file's bytes are not an MP4, WebM or AVI container (the filename is not trusted)"},
        )
    video_id = uuid.uuid4().hex[:12]
    name = f"uploads/{video_id}.bin"
    path = cfg.var_dir / "tmp" / f"upload-{lab_id}-{video_id}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    r = get_redis()
    room = cfg.max_lab_bytes - blobs.usage(r, lab_id)
    size = len(head)
    try:
        with open(path, "wb") as out:
            out.write(head)
            while chunk := f.stream.read(1 << 16):
                size += len(chunk)
                if size > min(cfg.max_upload_bytes, room):
                    if size > cfg.max_upload_bytes:
                        raise ApiError(413, "too_large", f"uploads are limited to {cfg.max_upload_bytes} bytes")
                    raise _storage_full(blobs.BlobFull("lab", cfg.max_lab_bytes))
                out.write(chunk)
        try:
            media.check_upload(path)
        except media.InvalidMedia as e:
            raise ApiError(422, "undecodable_video", {"file": f"refused before queueing: {e}"}) from None
        try:
            blobs.put_file(r, lab_id, name, path)
        except blobs.BlobFull as e:
            raise _storage_full(e) from None
    finally:
        path.unlink(missing_ok=True)
    return blobs.ref(name), video_id


def _storage_full(e: blobs.BlobFull) -> ApiError:
    if e.scope == "lab":
        return ApiError(
            413,
            "lab_storage_full",
            f"this lab's files may take {e.cap} bytes and this upload would pass that; reset the lab to start afresh",
        )
    if e.scope == "client":
        return ApiError(
            507,
            "client_storage_full",
            f"the labs one client opens may hold {e.cap} bytes of "
            "uploads and outputs together, and yours would pass that; delete a lab you no longer "
            "need (other clients are not held back)",
        )
    return ApiError(
        507,
        "server_storage_full",
        f"the server holds at most {e.cap} bytes of uploads and "
        "outputs for all labs together; try again when other labs have ended",
    )


def source_from_sample(lab_id: str, sample: str) -> tuple[str, str]:
    if sample == "poison":
        # A truncated MP4 (moov missing): passes the byte sniff, fails to decode every time.
        try:
            return blobs.poison(get_redis(), lab_id, media.sample_clip().read_bytes()), "poison"
        except blobs.BlobFull as e:
            raise _storage_full(e) from None
    clip = media.sample_clip(sample)  # installed with the app on every host: a path is fine
    if clip is None:
        raise ApiError(422, "unknown_sample", {"sample": f"must be one of {', '.join(SAMPLES)}"})
    return str(clip), sample
