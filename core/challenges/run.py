"""A challenge run: the learner's handler, the workload and fault plan it meets, and its verdict, in one lab.

A run is one hash, `lab:{id}:challenge`: which challenge, the run's number, the handler's code, its jobs (in
workload order), the fault plan, the invariants to check, the stream id it started after, the CPU seconds its
attempts have used, its state (`running` → `checked`, or `error` when a handler broke a limit) and the verdict.
`start` writes it and enqueues the workload through the lab's own producer; the pool's work horses find it on
their first read (workers/tasks.py) and run the jobs' attempts in the sandbox (workers/challenge.py); `verdict`
waits for nothing: it answers `running` until every job of the run has settled, then checks the lab's events once
(core/challenges/checker.py) and keeps the answer.

A challenge with a `schedule` (chapter 7's) has no workload of its own: the lab's real scheduler replicas make it.
At each tick of its own clock each replica that is up enqueues one job of the run (`fire`); the run's `plan`
(`plan_of`) says when each replica goes down and comes back, and the fleet (workers/engines/fleet.py) follows it,
holding the lab's clock at each of its moments until the replicas have done what the plan says, so the same
replicas fire the same ticks at any speed and load.

The handler's key-value store and claims live beside it (`kv`, `claims`): one Lua step each, on the lab's
simulated clock, so a claim's TTL runs out in simulated seconds like a lease.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import redis
from redis.client import Pipeline

from core import blobs, clock, media, registry, stream
from core.broker import producer
from core.challenges import checker, workload
from core.engines.scheduler import PLAN, clock_offset, cron_key
from core.keys import job, key, msg

FINISHED = ("done", "dlq", "lost")
DEADLINE_S = 3600.0  # simulated seconds a run may take before it is checked as it stands (a job never finished)
VIDEO_PREFIX = "challenge-"  # a challenge job's video id: challenge-<run>-<n>, + checker.POISON_SUFFIX for a pill
LEAD_S = 10.0  # simulated seconds between the replicas' last start-up check and the first of them firing tick 1
# the run's jobs (a JSON list in its row) with one more: in the job's own transaction, so no worker takes a job
# its run does not list yet, and two replicas firing at once both land
_JOIN = """
local ids = cjson.decode(redis.call('HGET', KEYS[1], 'jobs') or '[]')
table.insert(ids, ARGV[1])
redis.call('HSET', KEYS[1], 'jobs', cjson.encode(ids))
"""


def row_key(lab: str) -> str:
    return key(lab, "challenge")


def blob_name(name: str) -> str:
    """Where a handler's `storage.put(name)` lands among the lab's blobs."""
    return f"challenge/{name}"


def read(r: redis.Redis, lab: str) -> dict[str, str]:
    return r.hgetall(row_key(lab))


def start(
    r: redis.Redis, rq_conn: redis.Redis, lab: str, challenge_id: str, spec: dict[str, Any], code: str
) -> dict[str, Any]:
    """Begin a run of `spec` (a chapter's CHALLENGES entry) with `code` in this lab: its settings applied, its
    store emptied, the outage (if any) begun, its jobs enqueued. The lab's settings are the caller's to apply
    first (registry.update_settings), so the web's validation and pool resize stay where they are."""
    n = int(r.hincrby(row_key(lab), "run", 1))
    last = r.xrevrange(key(lab, "events"), count=1)
    started = last[0][0] if last else "0"
    r.delete(key(lab, "kv"), key(lab, "claims"))
    r.hdel(row_key(lab), "verdict", "schedule", *[k for k in r.hkeys(row_key(lab)) if k.startswith("struck:")])
    now = clock.now(r, lab)
    plan = ""
    if "schedule" in spec:
        clock.hold(r, lab, PLAN, now)  # the clock waits here until the fleet has the plan (workers/engines/fleet.py)
        plan = json.dumps(plan_of(spec["schedule"], registry.settings(r, lab), now))
        r.hset(cron_key(lab, "fault"), "plan", plan)
    r.hset(
        row_key(lab),
        mapping={
            "challenge": challenge_id,
            "code": code,
            "state": "running",
            "error": "",
            "cpu_s": 0,
            "started": started,
            "jobs": "[]",
            "faults": json.dumps(spec.get("faults", [])),
            "started_at": now,
            "deadline_s": spec.get("deadline_s", DEADLINE_S),
            "invariants": json.dumps(spec["invariants"]),
            **({"schedule": plan} if plan else {}),
        },
    )
    stream.emit(r, lab, "challenge.started", now, challenge=challenge_id, run=n, workload=workload(spec))
    outage = spec.get("outage")
    if outage:
        r.hset(
            key(lab, "faults"),
            mapping={
                "storage_outage_from": now + outage["at"],
                "storage_outage_until": now + outage["at"] + outage["duration_s"],
            },
        )
        stream.emit(r, lab, "fault.started", now, fault="storage_outage", duration=outage["duration_s"])
    ids = [
        _enqueue(r, rq_conn, lab, f"{n}-{i}", entry if isinstance(entry, dict) else {"duration_s": entry})
        for i, entry in enumerate(spec.get("workload", []), 1)
    ]
    return {"run": n, "challenge": challenge_id, "jobs": ids, "workload": workload(spec), "state": "running"}


def _enqueue(r: redis.Redis, rq_conn: redis.Redis, lab: str, name: str, job_spec: dict[str, Any]) -> str:
    """One job of the run (`name`: its place, unique in the lab), listed in the run's row as it is created."""
    clip = media.sample_clip()
    if clip is None:
        raise FileNotFoundError("the sample clip is missing: the lab is not installed whole")
    pill = bool(job_spec.get("poison"))

    def join(pipe: Pipeline, payload: dict[str, Any]) -> None:
        pipe.eval(_JOIN, 1, row_key(lab), payload["job_id"])

    return producer.enqueue_job(
        r,
        rq_conn,
        lab,
        job_type="transcode",
        video_id=f"{VIDEO_PREFIX}{name}{checker.POISON_SUFFIX if pill else ''}",
        source=blobs.poison(r, lab, clip.read_bytes()) if pill else str(clip),
        duration_s=float(job_spec["duration_s"]),
        resolutions=["360p"],
        idempotency_key=f"upload-{name}",
        job_input=job_spec.get("input"),
        also=join,
    )["job_id"]


def plan_of(schedule: dict[str, Any], settings: Mapping[str, Any], now: float) -> dict[str, Any]:
    """Where a scheduled run stands on the lab's clock, started at `now`: its tick 1 (`base` + 1 on the replicas'
    own count) is the first tick boundary every replica's clock reaches at least LEAD_S after the replicas are up;
    `down` each replica's window (absolute), `moments` where the fleet holds the clock (the replicas up, each
    window's ends, the last tick fired) and `end`, the last of them: the run's jobs are all fired once the clock
    is past it."""
    interval = float(settings["cron_interval"])
    ahead = max(clock_offset(settings, f"r{k}") for k in range(1, int(settings["scheduler_replicas"]) + 1))
    ready = now + 2 * LEAD_S  # where the clock waits for the replicas to be up
    first = interval * math.ceil((ready + LEAD_S + ahead) / interval)  # tick 1 on replica 1's clock
    down = {rid: [first + a, first + b] for rid, (a, b) in schedule["down"].items()}
    end = first + (int(schedule["ticks"]) - 1) * interval + LEAD_S
    moments = sorted({ready, end, *(t for window in down.values() for t in window)})
    return {
        "base": round(first / interval) - 1,
        "ticks": int(schedule["ticks"]),
        "duration_s": float(schedule["duration_s"]),
        "interval": interval,
        "down": down,
        "moments": moments,
        "end": end,
    }


def fire(r: redis.Redis, rq_conn: redis.Redis, lab: str, tick: int, replica: str, reading: float) -> bool:
    """Replica `replica`'s cron fired `tick` (its own count; its clock read `reading`). During a scheduled run this
    tick's task is the learner's handler: one job of the run for ticks 1 … `ticks`, none past them, and True. False
    when no scheduled run is going (the replica runs its own task)."""
    state, raw, n = r.hmget(row_key(lab), "state", "schedule", "run")
    if state != "running" or not raw:
        return False
    plan = json.loads(raw)
    nth = tick - int(plan["base"])
    if 1 <= nth <= plan["ticks"]:
        reading_s = round(reading - plan["base"] * plan["interval"], 3)  # on the run's own count: tick n at n × 60
        _enqueue(
            r,
            rq_conn,
            lab,
            f"{n}-t{nth}{replica}",
            {"duration_s": plan["duration_s"], "input": {"tick": nth, "replica": replica, "clock": reading_s}},
        )
    return True


def job_index(row: dict[str, str], job_id: str) -> int | None:
    """The job's place in the workload (1, 2, …), or None if it is not this run's."""
    ids = json.loads(row.get("jobs") or "[]")
    return ids.index(job_id) + 1 if job_id in ids else None


def is_challenge_job(rec: dict[str, str]) -> bool:
    """Whether a job record was enqueued by a challenge run (its handler, never the lab's transcode, runs it)."""
    return json.loads(rec.get("payload") or "{}").get("video_id", "").startswith(VIDEO_PREFIX)


def active(row: dict[str, str], job_id: str) -> bool:
    """Whether this job's attempts are the running challenge's (its handler runs them)."""
    return row.get("state") == "running" and job_index(row, job_id) is not None


def faults_at(
    row: dict[str, str], index: int | None, attempt: int, op: str, when: str, args: dict[str, Any]
) -> list[tuple[int, dict[str, Any]]]:
    """The fault plan's strikes at this ctx call, with their place in the plan: a fault names its job and attempt
    ({"job": 2, "attempt": 1, …}), or the call's key ({"key": "tick:2", …}: whichever attempt makes that call
    first, which `strike_once` decides)."""
    return [
        (n, f)
        for n, f in enumerate(json.loads(row.get("faults") or "[]"))
        if f["op"] == op
        and f.get("when", "after") == when
        and (f.get("key") == args.get("key") if "key" in f else (f["job"] == index and f["attempt"] == attempt))
    ]


def strike_once(r: redis.Redis, lab: str, n: int) -> bool:
    """Whether this call is the first of the run to meet keyed fault `n` (it strikes once per run)."""
    return bool(r.hsetnx(row_key(lab), f"struck:{n}", 1))


def end(r: redis.Redis, lab: str, why: str) -> None:
    """The run ends now with `why` (a handler broke a limit): no job of it runs the handler again."""
    if r.hget(row_key(lab), "state") == "running":
        r.hset(row_key(lab), mapping={"state": "error", "error": why[:500]})
        if r.hdel(cron_key(lab, "fault"), "plan"):  # a scheduled run's replicas go back to their own ticks
            clock.lift(r, lab, PLAN)
        stream.emit(r, lab, "challenge.ended", clock.now(r, lab), error=why[:300])


def spend_cpu(r: redis.Redis, lab: str, seconds: float, budget: float) -> bool:
    """Count an attempt's CPU seconds against the run's budget (Config.challenge_cpu_s); False once it is spent."""
    return float(r.hincrbyfloat(row_key(lab), "cpu_s", seconds)) <= budget


# --- the handler's store ---------------------------------------------------------------------------
_KV = """
local kv, op, k, a, b = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if op == 'get' then return redis.call('HGET', kv, k) end
if op == 'put' then
  if a == '\\0' then redis.call('HDEL', kv, k) else redis.call('HSET', kv, k, a) end
  return 1
end
local cur = redis.call('HGET', kv, k)
if (a == '\\0' and cur) or (a ~= '\\0' and cur ~= a) then return 0 end
if b == '\\0' then redis.call('HDEL', kv, k) else redis.call('HSET', kv, k, b) end
return 1
"""
NONE = "\0"  # None across the script's arguments (a handler's text never holds NUL: json would not carry it raw)


def kv(r: redis.Redis, lab: str, op: str, k: str, a: str | None = None, b: str | None = None) -> Any:
    """get → the value or None; put → 1; cas(a expected, b new) → 1 if it was `a` (None: absent) and is now `b`."""
    return r.eval(_KV, 1, key(lab, "kv"), op, k, NONE if a is None else a, NONE if b is None else b)


# claims: field → "token|until" (until '' = never); a claim whose until has passed is free
_CLAIM = """
local claims, tokens, k, now, ttl = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), ARGV[3]
local cur = redis.call('HGET', claims, k)
if cur then
  local upto = string.match(cur, '|(.*)$')
  if upto == '' or tonumber(upto) > now then return false end
end
local token = redis.call('INCR', tokens)
redis.call('HSET', claims, k, token .. '|' .. (ttl == '' and '' or tostring(now + tonumber(ttl))))
return token
"""
_RELEASE = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and string.match(cur, '^(%d+)|') == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]); return 1 end
return 0
"""


def claim(r: redis.Redis, lab: str, k: str, now: float, ttl: float | None) -> int | None:
    """Take the claim `k` until now + ttl (None: until released): its fencing token, or None if it is held."""
    token = r.eval(
        _CLAIM, 2, key(lab, "claims"), key(lab, "kv_tokens"), k, repr(now), "" if ttl is None else repr(float(ttl))
    )
    return int(token) if token else None


def release(r: redis.Redis, lab: str, k: str, token: Any) -> int:
    return int(r.eval(_RELEASE, 1, key(lab, "claims"), k, str(token)))


def passed_of(r: redis.Redis, labs: list[str]) -> dict[str, list[str]]:
    """The challenges each lab has passed (as its checker found), in one round trip however many labs."""
    with r.pipeline(transaction=False) as pipe:
        for lab in labs:
            pipe.smembers(key(lab, "challenges_passed"))
        return {lab: sorted(got) for lab, got in zip(labs, pipe.execute(), strict=True)}


# --- the verdict -----------------------------------------------------------------------------------
def settled(r: redis.Redis, lab: str, ids: list[str]) -> bool:
    """Every job of the run finished, its message gone (acked or redriven), and no attempt of it still running."""
    with r.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hget(job(lab, job_id), "state")
            pipe.hget(msg(lab, job_id), "state")
        pipe.hvals(key(lab, "workers"))
        *states, rows = pipe.execute()
    if any(s not in FINISHED for s in states[::2]) or any(s not in ("deleted", "dlq") for s in states[1::2]):
        return False
    busy = {json.loads(w).get("job_id") for w in rows}
    return not busy & set(ids)


def verdict(r: redis.Redis, lab: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    """The run's verdict: `running` until it settles; then each invariant held or broken (with the shortest
    history that breaks it), checked once and kept."""
    row = read(r, lab)
    if not row.get("run"):
        return {"state": "none"}
    base = {"run": int(row["run"]), "challenge": row.get("challenge"), "jobs": json.loads(row.get("jobs") or "[]")}
    if row.get("verdict"):
        return {**base, **json.loads(row["verdict"])}
    if row.get("state") == "error":
        return {**base, "state": "error", "passed": False, "error": row.get("error", "")}
    now = clock.now(r, lab)
    overdue = now >= float(row.get("started_at") or 0) + float(row.get("deadline_s") or DEADLINE_S)
    firing = bool(row.get("schedule")) and now <= float(json.loads(row["schedule"])["end"])  # replicas still to fire
    if spec is None or not ((settled(r, lab, base["jobs"]) and not firing) or overdue):
        return {**base, "state": "running"}
    events = stream.read_after(r, lab, row["started"], count=20000)
    records = {j: r.hgetall(job(lab, j)) for j in base["jobs"]}
    results = checker.check(json.loads(row["invariants"]), base["jobs"], records, events)
    errors = sorted(
        {
            str(e["data"].get("error", ""))[:300]
            for e in events
            if e["type"] == "job.failed" and e.get("job_id") in base["jobs"]
        }
    )
    out = {
        "state": "checked",
        "passed": all(x["held"] for x in results),
        "invariants": results,
        "errors": errors,
        "hint": spec.get("hint", ""),
        "section": spec.get("section", ""),
    }
    if r.hsetnx(row_key(lab), "verdict", json.dumps(out)):  # hsetnx: two readers at once check once
        r.hset(row_key(lab), "state", "checked")
        if out["passed"]:
            r.sadd(key(lab, "challenges_passed"), str(row.get("challenge")))
        stream.emit(
            r,
            lab,
            "challenge.checked",
            clock.now(r, lab),
            run=base["run"],
            passed=out["passed"],
            broken=[x["id"] for x in results if not x["held"]],
        )
    return {**base, **json.loads(r.hget(row_key(lab), "verdict") or json.dumps(out))}
