"""The challenge attempt: a learner's handler run for one delivery, in its sandbox, served by this work horse.

`workers/tasks.py` receives and claims the delivery as for any job, then, for a job of the lab's running
challenge (core/challenges/run.py), hands the attempt here instead of to its own transcode. The handler (in
core/challenges/box.py's sandbox) asks for everything over its pipe; each `ctx` message is served here, against
the same lab as every other job: the transcode is the lab's real ffmpeg paced on its clock, storage is the lab's
blobs under its outage fault, the email is the lab's outbox, the lease is the broker's. The challenge's fault plan
strikes at named ctx calls (a kill just after an email, a lease that runs out before a transcode), so the same
handler meets the same history every run.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import redis

from core import blobs, media, stream
from core.broker import leases
from core.broker.retry import NonRetryable, StorageDown
from core.challenges import run as runs
from core.challenges.box import CtxRefused, HandlerBox, Outcome
from core.config import Config
from core.keys import key
from workers import tasks

NAME = re.compile(r"[A-Za-z0-9_./-]{1,120}")
TEXT_MAX = 64 * 1024  # characters of a text value put to storage or kv
PARTS_MAX = 16  # parts of one upload
NO_UPLOAD: list[list[float]] = []  # a handler's transcode streams nothing: its upload is its own ctx call
TRIES_MAX = 12  # retry delays one part may plan


class Crash(Exception):
    """The fault plan kills this attempt's work horse here (tasks.crash does it)."""


class Attempt:
    """One attempt of the challenge's handler: what its ctx calls may touch."""

    def __init__(
        self,
        r: redis.Redis,
        lab: str,
        job_id: str,
        attempt: int,
        rec: dict,
        settings: dict,
        start: float,
        rng,
        watch: tasks.Watch,
        row: dict,
    ):
        self.r, self.lab, self.job_id, self.attempt, self.rec = r, lab, job_id, attempt, rec
        self.settings, self.start, self.rng, self.watch, self.row = settings, start, rng, watch, row
        self.payload = json.loads(rec["payload"])
        self.index = runs.job_index(row, job_id)
        self.files: dict[str, Path] = {}  # media handles → temp files, gone with the attempt
        self.outputs: dict[str, str] = {}

    def run(self) -> Outcome:
        job = {
            "id": self.job_id,
            "attempt": self.attempt,
            "idempotency_key": self.payload.get("idempotency_key"),
            "input": {
                "video_id": self.payload.get("video_id"),
                "duration_s": self.payload.get("duration_s"),
                **(self.payload.get("input") or {}),
            },
        }
        try:
            return HandlerBox(self.row["code"], job).run(self.serve)
        finally:
            for tmp in self.files.values():
                tmp.unlink(missing_ok=True)

    def now(self) -> float:
        return self.watch.now()

    def emit(self, type_: str, **data: Any) -> None:
        stream.emit(
            self.r,
            self.lab,
            type_,
            self.now(),
            job_id=self.job_id,
            worker_id=tasks.worker_id(),
            attempt=self.attempt,
            **data,
        )

    # --- the fault plan -------------------------------------------------------------------------
    def strike(self, op: str, when: str, args: dict) -> None:
        for n, fault in runs.faults_at(self.row, self.index, self.attempt, op, when, args):
            if "key" in fault and not runs.strike_once(self.r, self.lab, n):
                continue
            if fault["do"] == "expire":
                leases.cut(self.r, self.lab, self.job_id, self.now())
            elif fault["do"] == "crash":
                raise Crash(op)

    def serve(self, op: str, args: dict) -> Any:
        handler = getattr(self, "op_" + op.replace(".", "_"), None)
        if handler is None:
            raise CtxRefused(f"no such ctx call: {op[:40]}")
        self.strike(op, "before", args)
        value = handler(**args) if _fits(handler, args) else _refuse(op)
        if op != "kv.claim" or value is not None:  # a claim that was refused holds nothing to be killed with
            self.strike(op, "after", args)
        return value

    def pace(self, began: float, duration: float, procs: list[subprocess.Popen], plans: list[list[float]]) -> None:
        """This attempt's share of the lab's clock (tasks.pace): `duration` simulated seconds from `began` while
        `procs` run, and an upload on the retry `plans` (one per part; none: no upload)."""
        tasks.pace(
            self.r,
            self.lab,
            self.job_id,
            self.attempt,
            self.settings,
            began,
            duration,
            procs,
            self.rng,
            self.watch,
            plans=plans,
        )

    # --- the ctx calls --------------------------------------------------------------------------
    def op_now(self) -> float:
        return round(self.now(), 3)

    def op_log(self, text: str) -> None:
        self.emit("handler.log", text=str(text)[:500])

    def op_media_transcode(self, rendition: str = "360p", part: int = 1, of: int = 1) -> dict:
        if rendition not in media.RENDITIONS:
            raise CtxRefused(f"no rendition {str(rendition)[:20]!r}: one of {', '.join(media.RENDITIONS)}")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (part, of)) or not 1 <= part <= of <= 100:
            raise CtxRefused("a transcode's part is 1 … of, and of is 1 … 100")
        began = self.now()
        duration = float(self.payload["duration_s"]) / of
        if part < of:  # a share of the job's time: the clock paces it; the last part runs ffmpeg and makes the file
            self.pace(began, duration, [], NO_UPLOAD)
            self.emit("handler.transcoded", rendition=rendition, began=round(began, 3), part=part, of=of)
            return {"media": None, "rendition": rendition, "part": part, "of": of}
        var_dir = Config.from_env().var_dir
        try:
            src = tasks.source_file(self.r, self.lab, self.rec["source"], var_dir)
            tasks.probe_once(self.r, src)
        except NonRetryable as e:  # the handler decides what an undecodable upload deserves
            raise CtxRefused(str(e), "InvalidMedia") from None
        tmp, _ = tasks.output_paths(var_dir, self.lab, self.job_id, rendition, self.attempt, True)
        tmp = tmp.with_name(f"{tmp.stem}-{len(self.files)}{tmp.suffix}")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        proc = media.start_transcodes(src, [(tmp, media.RENDITIONS[rendition])])
        try:
            self.pace(began, duration, [proc], NO_UPLOAD)
            if proc.wait(timeout=media.LIMITS.ffmpeg_timeout) != 0:
                raise CtxRefused("ffmpeg failed on this clip")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        handle = f"media-{len(self.files) + 1}"
        self.files[handle] = tmp
        self.emit(
            "handler.transcoded", rendition=rendition, began=round(began, 3), part=part, of=of, bytes=tmp.stat().st_size
        )
        return {"media": handle, "rendition": rendition, "part": part, "of": of, "bytes": tmp.stat().st_size}

    def _body(self, name: Any, data: Any) -> bytes:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise CtxRefused("a storage name is 1–120 letters, digits and _ . / -")
        if isinstance(data, dict) and data.get("media") in self.files:
            return self.files[data["media"]].read_bytes()
        if isinstance(data, str) and len(data) <= TEXT_MAX:
            return data.encode()
        raise CtxRefused(f"storage takes a media handle (the last part's) or text of at most {TEXT_MAX} characters")

    def _publish(self, name: str, body: bytes) -> int:
        try:
            blobs.put(self.r, self.lab, runs.blob_name(name), body)
        except blobs.BlobFull as e:
            raise CtxRefused(f"storage is full: {e}") from None
        self.outputs[name] = f"/api/labs/{self.lab}/challenge/outputs/{name}"
        self.emit("output.written", path=name)
        return len(body)

    def op_storage_put(self, name: str, data: Any) -> int:
        body = self._body(name, data)
        now = self.now()
        down = float(self.watch.faults().get("storage_outage_until") or -1) > now
        self.r.hincrby(key(self.lab, "storage"), "calls", 1)
        self.emit(
            "storage.called",
            part=1,
            **{"try": 1},
            ok=not down,
            due=round(now, 3),
            policy="handler",
            outcome="storage down" if down else "ok",
        )
        if down:
            raise CtxRefused("storage unavailable (outage fault)", "StorageDown")
        return self._publish(name, body)

    def op_storage_upload(self, name: str, data: Any, plans: list) -> int:
        """A multipart upload: one storage call per part, in parallel, each retried after a failed call on the
        handler's own delays (`plans`, per part). The parts stream while the clock paces them, as an attempt's
        upload does (tasks.UploadParts); a part whose plan runs out raises StorageDown in the handler."""
        if (
            not isinstance(plans, list)
            or not 1 <= len(plans) <= PARTS_MAX
            or not all(
                isinstance(p, list)
                and len(p) <= TRIES_MAX
                and all(isinstance(d, int | float) and not isinstance(d, bool) and 0 <= d <= 86400 for d in p)
                for p in plans
            )
        ):
            raise CtxRefused(
                f"an upload has 1–{PARTS_MAX} parts, each at most {TRIES_MAX} retry delays of 0–86400 simulated seconds"
            )
        body = self._body(name, data)
        try:
            self.pace(self.now(), 0.0, [], [[float(d) for d in p] for p in plans])
        except StorageDown as e:
            raise CtxRefused(str(e), "StorageDown") from None
        return self._publish(name, body)

    def op_storage_get(self, name: str) -> int | None:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise CtxRefused("a storage name is 1–120 letters, digits and _ . / -")
        return self.r.strlen(blobs.blob_key(self.lab, runs.blob_name(name))) or None

    def op_email_send(self, subject: str) -> None:
        tasks.notify(
            self.r,
            self.lab,
            self.job_id,
            self.attempt,
            {**self.settings, "notify_guard": False},
            self.now(),
            subject=str(subject)[:120],
        )

    def op_kv_get(self, key: str) -> str | None:
        return runs.kv(self.r, self.lab, "get", _key(key))

    def op_kv_put(self, key: str, value: str | None) -> None:
        runs.kv(self.r, self.lab, "put", _key(key), _text(value))

    def op_kv_cas(self, key: str, expected: str | None, new: str | None) -> bool:
        ok = bool(runs.kv(self.r, self.lab, "cas", _key(key), _text(expected), _text(new)))
        self.emit("handler.cas", key=_key(key), ok=ok)
        return ok

    def op_kv_claim(self, key: str, ttl: float | None = None) -> int | None:
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= 1e6):
            raise CtxRefused("a claim's ttl is a number of simulated seconds in (0, 1000000], or None: never")
        now = self.now()
        token = runs.claim(self.r, self.lab, _key(key), now, ttl)
        self.emit("handler.claimed", key=_key(key), token=token, ttl=ttl)
        return token

    def op_kv_release(self, key: str, token: int) -> bool:
        return bool(runs.release(self.r, self.lab, _key(key), token))

    def op_lease_extend(self, seconds: float) -> bool:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= 86400:
            raise CtxRefused("lease.extend takes simulated seconds in (0, 86400]")
        return leases.extend_lease(
            self.r, self.lab, self.job_id, self.attempt, tasks.worker_id(), self.now(), float(seconds)
        )


def _key(k: Any) -> str:
    if not isinstance(k, str) or not 0 < len(k) <= 200:
        raise CtxRefused("a kv key is text of 1–200 characters")
    return k


def _text(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or len(v) > TEXT_MAX):
        raise CtxRefused(f"a kv value is text of at most {TEXT_MAX} characters, or None")
    return v


def _fits(fn, args: dict) -> bool:
    names = fn.__code__.co_varnames[1 : fn.__code__.co_argcount]
    required = names[: len(names) - len(fn.__defaults__ or ())]
    return set(args) <= set(names) and set(required) <= set(args)


def _refuse(op: str) -> Any:
    raise CtxRefused(f"ctx call {op} with the wrong arguments")
