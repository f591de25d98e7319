"""Drill: a storm of SIGKILLs on busy workers while a batch of transcodes runs.

Heartbeat on, ack late, 4 workers: every kill leaves a lease that runs out (≤ heartbeat_extend
simulated seconds after the last beat) and the reaper redelivers the job to a survivor or a
respawned worker. When the storm is over the drill waits for the lab to settle, then checks
every accepted job through the public API and every output file with a full ffmpeg decode.
"""

from __future__ import annotations

import random
import time
from collections import Counter

from chaos.common import Result, workers_registered
from core import blobs, media
from core.procs import processes_matching, wait
from runtime.harness.drill import drill_client, drill_stack

NAME = "kill_storm"
INVARIANT = (
    "no job lost: every accepted job ends done or in the DLQ with a reason; every done job has "
    "exactly one success, its renditions on disk and each one decodes as a valid video; no job "
    "gets two completion emails"
)
SAMPLES = ("bigbuckbunny", "bikes")
RENDITIONS = ("240p", "144p")


def run(
    redis_url: str | None = None,
    jobs: int = 30,
    workers: int = 4,
    speed: float = 200,
    duration: float = 300,
    extend: float = 1200,
    every: float = 0.3,
    storm_s: float = 25.0,
    max_kills: int = 60,
    settle_s: float = 120.0,
    seed: int | None = None,
    root=None,
) -> Result:
    res = Result(NAME, INVARIANT)
    rng = random.Random(seed)
    t0 = time.monotonic()
    with drill_stack(NAME, redis_url=redis_url, root=root) as stack:
        api, r = drill_client(stack), stack.redis_client()
        lab = api.lab(
            "ch8",
            speed=speed,
            workers=workers,
            heartbeat=True,
            ack_mode="late",
            job_duration=duration,
            heartbeat_interval=60,
            heartbeat_extend=extend,
            vt_seconds=extend,
            respawn_delay=20,
            max_attempts=8,
            retry_base=5,
            retry_cap=30,
        )
        lab_id = lab["lab_id"]
        wait(lambda: workers_registered(r, lab) >= workers, 60, f"{workers} workers to register")

        accepted: list[str] = []
        refused = 0
        for i in range(jobs):
            reply = api.enqueue(lab, {"sample": SAMPLES[i % 2], "duration_s": duration}, idem=f"storm-{i}")
            if reply.status == 202:
                accepted.append(reply.data["job_id"])
            else:
                refused += 1
                res.violations.append(f"enqueue {i} → {reply.status} {reply.data}")

        # the storm: every ~0.3 s SIGKILL one random busy worker, through the public API
        kills, kill_errors, orphan_ffmpeg = Counter(), Counter(), set()
        killed_attempts: set[tuple[str, int]] = set()
        storm_end = time.monotonic() + storm_s
        while time.monotonic() < storm_end and sum(kills.values()) < max_kills:
            time.sleep(every * rng.uniform(0.5, 1.5))
            snap = api.snapshot(lab)
            c = snap["counts"]
            if c["done"] + c["dlq"] >= len(accepted):
                break
            busy = [w for w in snap["workers"] if w["state"] == "busy" and w.get("job_id")]
            if not busy:
                continue
            victim = rng.choice(busy)
            reply = api.kill(lab, victim["id"])
            if reply.status == 200:
                kills[victim["id"]] += 1
                job, attempt = victim.get("job_id"), victim.get("attempt")
                killed_attempts.add((str(job), int(attempt or 0)))
                # ffmpeg is the horse's child: did it outlive the SIGKILL of worker + horse?
                tag = f"transcoded/{job}/.tmp-{victim['id']}-a{attempt}-"
                orphan_ffmpeg |= set(processes_matching(tag))
            else:
                kill_errors[reply.status] += 1  # 409: it finished or died between snapshot and kill

        # settle: nothing running, queued or retrying; every job in a final state
        try:
            snap = api.wait_for(
                lab,
                lambda s: (
                    s["counts"]["done"] + s["counts"]["dlq"] + s["counts"]["lost"] >= len(accepted)
                    and s["counts"]["running"] == 0
                    and s["counts"]["queued"] == 0
                ),
                settle_s,
                "the lab to settle",
            )
        except TimeoutError as e:
            res.violations.append(str(e))
            snap = api.snapshot(lab)

        dlq = {
            d["job_id"]: d
            for d in (api.call("GET", f"/api/labs/{lab_id}/dlq", token=lab["token"]).data or {}).get("dead_letters", [])
        }
        events = api.events(lab)
        succeeded = Counter(e["job_id"] for e in events if e["type"] == "job.succeeded")
        emails = Counter(e["job_id"] for e in events if e["type"] == "email.sent")
        states: Counter = Counter()
        probed = bad_files = 0
        outdir = stack.var_dir / "labs" / lab_id / "transcoded"
        for job_id in accepted:
            reply = api.job(lab, job_id)
            if not res.check(reply.status == 200, f"job {job_id} (accepted with 202) → {reply.status}"):
                states["missing"] += 1
                continue
            j = reply.data
            states[j["state"]] += 1
            if j["state"] == "dlq":
                reason = (dlq.get(job_id) or {}).get("reason") or j.get("dlq_reason")
                res.check(bool(reason), f"job {job_id} is in the DLQ without a reason")
                continue
            if not res.check(j["state"] == "done", f"job {job_id} ended {j['state']!r}, not done or dlq"):
                continue
            res.check(succeeded[job_id] == 1, f"job {job_id} done with {succeeded[job_id]} job.succeeded events")
            res.check(emails[job_id] <= 1, f"job {job_id} sent {emails[job_id]} completion emails")
            res.check(sorted(j["outputs"]) == sorted(RENDITIONS), f"job {job_id} outputs {sorted(j['outputs'])}")
            for rend in RENDITIONS:
                probed += 1
                try:  # outputs are blobs in the server (core/blobs.py): fetch one, probe it locally
                    path = blobs.save(
                        r,
                        lab_id,
                        f"transcoded/{job_id}/{rend}.mp4",
                        stack.var_dir / "probe" / lab_id / job_id / f"{rend}.mp4",
                    )
                    media.probe(path)
                except (media.InvalidMedia, FileNotFoundError, OSError) as e:
                    bad_files += 1
                    res.violations.append(f"job {job_id} {rend}: not a valid video ({e})")
            got = api.call("GET", f"/api/labs/{lab_id}/jobs/{job_id}/outputs/240p.mp4", token=lab["token"])
            res.check(got.status == 200, f"GET job {job_id} 240p output → {got.status}")
        c = snap["counts"]
        res.check(c["lost"] == 0, f"{c['lost']} job(s) counted lost")
        res.check(sum(kills.values()) > 0, "the storm killed no busy worker: nothing was tested")
        res.check(
            states["done"] + states["dlq"] == len(accepted),
            f"final states {dict(states)} do not cover the {len(accepted)} accepted jobs",
        )
        expired = [(e["job_id"], int(e.get("attempt") or 0)) for e in events if e["type"] == "lease.expired"]
        spurious = [x for x in expired if x not in killed_attempts]
        stale_tmp = len(list(outdir.glob("*/.tmp-*")))
        no_email = sum(1 for j in accepted if succeeded[j] and not emails[j])
        res.counts = {
            "jobs": len(accepted),
            "refused": refused,
            "kills": sum(kills.values()),
            "kill_409": kill_errors.get(409, 0),
            "redelivered": c["redelivered"],
            "spurious_redeliveries": len(spurious),
            "done": states["done"],
            "dlq": states["dlq"],
            "lost": c["lost"],
            "dup_blocked": c["duplicates_blocked"],
            "files_probed": probed,
            "bad_files": bad_files,
        }
        res.details = {
            "kills_per_worker": dict(kills),
            "kill_errors": dict(kill_errors),
            "dlq_reasons": {k: v["reason"] for k, v in dlq.items()},
            "attempts_per_job": dict(Counter(str(e["attempt"]) for e in events if e["type"] == "job.succeeded")),
            "orphan_ffmpeg_after_kill": len(orphan_ffmpeg),
            "stale_tmp_files": stale_tmp,
            "done_without_email": no_email,
        }
        if spurious:
            res.notes.append(
                f"{len(spurious)} lease(s) of attempts that were never killed expired: the worker "
                f"stops heart-beating while it waits for ffmpeg after the paced duration "
                f"(workers/tasks.py do_work), so a transcode slower than that loses its lease"
            )
        if orphan_ffmpeg:
            res.notes.append(
                f"{len(orphan_ffmpeg)} ffmpeg process(es) of a killed attempt were still running "
                f"right after its kill (the supervisor SIGKILLs worker and horse, not the horse's "
                f"process group); they finish writing a temp file nobody renames"
            )
        if stale_tmp:
            res.notes.append(f"{stale_tmp} temp file(s) of killed attempts remain under transcoded/ until teardown")
        if no_email:
            res.notes.append(f"{no_email} done job(s) never sent their email (killed between ack and notify)")
        api.delete(lab)
        r.close()
    res.seconds = time.monotonic() - t0
    return res
