"""The job state machine: queued → running → retrying → done | dlq (| lost), in Redis Lua.

Every transition is a compare-and-swap fenced by the attempt number: a worker may only move a
job it still owns. When the CAS guard is on, a stale worker's write is refused and counted
(`job.duplicate_blocked`); switched off, the write lands anyway — the lesson's bug, made visible.
Each script appends its event and moves the state gauges in the same atomic step.
"""

from __future__ import annotations

import json

import redis

from core import stream
from core.keys import attempts, job, key

_scripts: dict[tuple[int, str], redis.commands.core.Script] = {}


# A transition moves a job the server already holds, so it must land even at the server's maxmemory: a job
# whose output could not be stored still reaches the DLQ and is counted, never left running forever. New
# records (job creation, uploads) are plain writes, refused there with 507.
ALLOW_OOM = "#!lua flags=allow-oom\n"


def script(r: redis.Redis, body: str):
    """Register a transition script once per connection (EVALSHA after the first call)."""
    k = (id(r), body)
    if k not in _scripts:
        _scripts[k] = r.register_script(ALLOW_OOM + stream.LUA_EMIT + body)
    return _scripts[k]


def lab_keys(lab: str, job_id: str, *extra: str) -> list[str]:
    """KEYS[1..5] shared by every script; extra keys follow from KEYS[6]."""
    return [job(lab, job_id), key(lab, "states"), key(lab, "events"), key(lab, "counts"), attempts(lab, job_id), *extra]


def end_attempt(r: redis.Redis, lab: str, job_id: str, attempt: int, now: float, outcome: str) -> bool:
    """An attempt whose worker is gone (killed, died, stopped with a parked lab) ends there in the job's record:
    it no longer says `running` once nothing runs it. One that already ended (a success that won the race, a
    failure) keeps its own outcome. True if this ended it."""
    raw = r.hget(attempts(lab, job_id), str(attempt))
    if not raw or json.loads(raw).get("outcome") != "running":
        return False
    record_attempt(r, lab, job_id, attempt, end=round(now, 3), outcome=outcome)
    return True


def record_attempt(r: redis.Redis, lab: str, job_id: str, attempt: int, **fields) -> None:
    """Merge fields into one attempt's record (worker, start, end, outcome, …)."""
    k = attempts(lab, job_id)
    raw = r.hget(k, str(attempt))
    rec = json.loads(raw) if raw else {"attempt": attempt}
    rec.update(fields)
    r.hset(k, str(attempt), json.dumps(rec))


# A worker's row (the lab's `workers` hash: id → JSON) merged in one step, where a read and a write from the
# worker's process would be two round trips with room between them for the supervisor's own write.
# `merge_row(rows, wid, fields, owner)`: `fields` a JSON object, `owner` '1' for the supervisor (merge_worker_row).
MERGE_ROW_FN = """
local function merge_row(rows, wid, fields, owner)
  local raw = redis.call('HGET', rows, wid)
  if not raw and owner ~= '1' then return 0 end
  local row = raw and cjson.decode(raw) or {id = wid}
  if owner ~= '1' and (row['state'] == 'dead' or row['state'] == 'respawning') then return 0 end
  for k, v in pairs(cjson.decode(fields)) do row[k] = v end
  redis.call('HSET', rows, wid, cjson.encode(row))
  return 1
end
"""
# KEYS[1]: the lab's worker rows. ARGV: the worker's id, the fields (JSON), '1' if the supervisor writes.
_MERGE_ROW = MERGE_ROW_FN + "return merge_row(KEYS[1], ARGV[1], ARGV[2], ARGV[3])\n"


def merge_worker_row(r: redis.Redis, lab: str, wid: str, fields: dict, owner: bool = False) -> bool:
    """Merge `fields` into worker `wid`'s row, in one round trip. The supervisor is its `owner`: it makes a
    missing row, and only it writes the lifecycle states; a worker's own process leaves a missing row missing
    and a dead or respawning one as it is (False then)."""
    args = [wid, json.dumps(fields), "1" if owner else "0"]
    return bool(script(r, _MERGE_ROW)(keys=[key(lab, "workers")], args=args))
