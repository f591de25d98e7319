"""The broker's message and the worker's claim: two layers, kept apart as the lesson keeps them.

*The message* (`lab:{id}:msg:{job}`, SQS-like): `pending` (visible: on its way to a worker),
`inflight` (received; invisible until its deadline in the `leases` zset), `delayed` (a retry's
wait), `deleted` (acked) or `dlq` (redriven). Every receive bumps its receive count; the delivery
number a worker is handed IS the receive count it will become, so a stale copy of an old delivery
cannot receive it twice. A heartbeat (from the holder of the current receive only) pushes the
deadline; ack deletes it; the reaper makes an expired one visible again (see reaper.py).

*The job's record* (`lab:{id}:job:{job}`, the lesson's database row): `queued → running →
retrying → done | dlq` (| `lost`), each move a compare-and-swap. A redelivery does not move it.
What a worker holding a message may do to it is the `guard` setting:

- `off`: no state check: every copy runs; the first completion makes the job done, later ones
  are counted duplicates (chapter 1's world);
- `claim`: the lesson's `UPDATE … WHERE status = 'queued'`: only a receive that finds the record
  queued/retrying runs it; one that finds it running backs off in the same round trip and leaves
  the message in flight (it comes back after its VT); one that finds it done acks and drops it;
- `fence`: newest attempt wins: every receive takes the record over, and a holder that was
  overtaken has its writes refused (fencing tokens) — which livelocks when the VT < the job.

Receive and claim run in one Lua script (one round trip, as the lesson's back-off promises), but
the script's two halves touch only their own layer's keys' fields in the order a broker and a
database would see them.
"""

from __future__ import annotations

import json

import redis

from core import clock, stream
from core.broker.state import lab_keys, script
from core.keys import key, msg
from core.settings import LabSettings

RUN, BLOCKED, REFUSED, STALE = "run", "blocked", "refused", "stale"


def keys_for(lab: str, job_id: str, *extra: str) -> list[str]:
    """KEYS[1..5] of every transition (state.lab_keys), then [6] the message, [7] the leases zset,
    [8] the `alive` zset (running records by last sign of life, read by the stale-job sweeper)."""
    return lab_keys(lab, job_id, msg(lab, job_id), key(lab, "leases"), key(lab, "alive"), *extra)


# Keys: keys_for's, then the hand-offs (handoff.record's notes). deadline '' = ack early; hb '1' if the lease is a
# heartbeat lease; attempt_rec this attempt's record (JSON); note this delivery's hand-off note ('' if none).
# Returns {run | blocked | refused | stale, the record as this receive left it (HGETALL's flat list; empty if
# stale)}. (Each hash read once and written once: a busy lab receives a delivery every two seconds.) The
# delivery has arrived whatever comes of it, so its hand-off note goes (the supervisor sweeps only those
# that never arrive).
_RECEIVE = """
local record, states, events, counts, attempts, message = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local leases, alive, handoffs = KEYS[7], KEYS[8], KEYS[9]
local delivery, job_id, now, deadline, hb, guard = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local worker, claimed_ev, blocked_ev, refused_ev, attempt_rec = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local note = ARGV[12]
if note ~= '' then redis.call('ZREM', handoffs, note) end
-- 1. the broker: only the delivery it sent last may receive the message
local m = redis.call('HMGET', message, 'state', 'receives')
if m[1] ~= 'pending' then return {'stale', {}} end
if tonumber(m[2] or '0') + 1 ~= tonumber(delivery) then return {'stale', {}} end
if deadline == '' then
  redis.call('HSET', message, 'receives', delivery, 'state', 'deleted')  -- ack early: deleted on receive, no lease
else
  redis.call('HSET', message, 'receives', delivery, 'state', 'inflight', 'hb', hb)
  redis.call('ZADD', leases, deadline, job_id)
end
-- 2. the record: what the guard lets this holder do (read whole: the attempt works from it)
local flat = redis.call('HGETALL', record)
local rec = {}
for i = 1, #flat, 2 do rec[flat[i]] = flat[i + 1] end
local st = rec['state']
local finished = st == 'done' or st == 'dlq' or st == 'lost'
if guard ~= 'off' and finished then
  -- done -> running is not a transition: ack the message and drop it
  redis.call('HSET', message, 'state', 'deleted')
  redis.call('ZREM', leases, job_id)
  local ev = cjson.decode(refused_ev)
  ev['data']['state'] = st
  ev['data']['current_attempt'] = tonumber(rec['attempt'] or '0')
  emit(events, counts, cjson.encode(ev), 'claims_refused')
  return {'refused', flat}
end
if guard == 'claim' and st == 'running' then
  -- zero rows updated: back off, leave the message in flight (it comes back after its deadline)
  local ev = cjson.decode(blocked_ev)
  ev['data']['holder'] = tonumber(rec['holder'] or '0')
  emit(events, counts, cjson.encode(ev), 'duplicates_blocked')
  return {'blocked', flat}
end
local fields = {'attempt', tostring(tonumber(rec['attempt'] or '0') + 1), 'holder', delivery, 'worker', worker,
                'claimed_at', now}
local was = st  -- the record's state before this claim: running means another attempt still holds it
if st == 'queued' or st == 'retrying' then
  fields[#fields + 1], fields[#fields + 2] = 'state', 'running'
  move(states, st, 'running')
  st = 'running'
end
redis.call('HSET', record, unpack(fields))
if st == 'running' then redis.call('ZADD', alive, now, job_id) end
redis.call('HSET', attempts, delivery, attempt_rec)
local ev = cjson.decode(claimed_ev)
ev['data']['record_was'] = was
emit(events, counts, cjson.encode(ev), '')
for i = 1, #fields, 2 do rec[fields[i]] = fields[i + 1] end
local out = {}
for f, v in pairs(rec) do out[#out + 1] = f; out[#out + 1] = v end
return {'run', out}
"""


def receive(
    r: redis.Redis,
    lab: str,
    job_id: str,
    n: int,
    worker_id: str,
    now: float,
    settings: LabSettings,
    pid: int,
    note: str = "",
) -> tuple[str, dict]:
    """Receive delivery n of the job's message and try the guard's claim, in one round trip: the outcome, and
    the job's record as the receive left it (empty if stale). `note`: the delivery's hand-off note
    (handoff.note_of), which goes whatever the outcome.

    The first lease is the VT, or — with the heartbeat on — one heartbeat window (`heartbeat_extend`),
    so a crash before the first beat is found as quickly as one after it.
    """
    early = settings["ack_mode"] == "early"
    window = settings["heartbeat_extend"] if settings["heartbeat"] else settings["vt_seconds"]
    deadline = None if early else now + window
    guard = settings["guard"]
    common: stream.JobRef = {"job_id": job_id, "worker_id": worker_id, "attempt": n}
    claimed = stream.encode(
        "job.claimed", now, **common, ack_mode=settings["ack_mode"], guard=guard, lease_deadline=deadline, receives=n
    )
    blocked = stream.encode(
        "job.duplicate_blocked",
        now,
        **common,
        guard=guard,
        reason="the record is already running: zero rows updated, backed off without "
        "transcoding; the message stays in flight",
    )
    refused = stream.encode("job.claim_refused", now, **common, guard=guard)
    rec = json.dumps(
        {
            "attempt": n,
            "worker": worker_id,
            "pid": pid,
            "start": round(now, 3),
            "outcome": "running",
            "ack_mode": settings["ack_mode"],
        }
    )
    outcome, flat = script(r, _RECEIVE)(
        keys=keys_for(lab, job_id, key(lab, "handoffs")),
        args=[
            n,
            job_id,
            now,
            "" if deadline is None else repr(deadline),
            "1" if settings["heartbeat"] and not early else "0",
            guard,
            worker_id,
            claimed,
            blocked,
            refused,
            rec,
            note,
        ],
    )
    return outcome, dict(zip(flat[::2], flat[1::2], strict=True))


# Keys: keys_for's, then (a barrier to move in the same step) the barrier's keys and change as clock.barrier_call
# gives them.
# The record's holder shows a sign of life (the `alive` zset: the stale-job sweeper's clock); the message's
# visibility moves only for the current receive (a stale receipt cannot change it, as in SQS). The lease's
# deadline lives in the leases zset alone (read with ZSCORE), so a beat writes it once.
# (A busy lab beats several times a second, so every command counts: each hash is read once, with HMGET,
# and the attempt's barrier moves on to its next beat in the same round trip.)
_EXTEND = (
    clock.BARRIER_FN
    + """
local record, events, counts, message, leases, alive = KEYS[1], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8]
local clock_key, barriers, barrier_alive = KEYS[9], KEYS[10], KEYS[11]
local delivery, deadline, extended_ev, job_id, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local progress_ev, op, holder, at = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local real_now, alive_until, refresh, also = ARGV[10], ARGV[11], ARGV[12], ARGV[13]
local function extend()
  local rec = redis.call('HMGET', record, 'state', 'holder')
  if rec[1] == 'running' and tonumber(rec[2] or '0') == tonumber(delivery) then
    redis.call('ZADD', alive, 'XX', now, job_id)
  end
  local m = redis.call('HMGET', message, 'state', 'receives')
  if m[1] ~= 'inflight' or tonumber(m[2]) ~= tonumber(delivery) then return 0 end
  local was = tonumber(redis.call('ZSCORE', leases, job_id) or '')
  if was and tonumber(deadline) >= was then
    -- pushed later, as a heartbeat does: ZINCRBY's keyspace notification ('zincr') tells the supervisor that no
    -- deadline came earlier, so it need not read the leases' head again (workers/wait.py Waker)
    redis.call('ZINCRBY', leases, tonumber(deadline) - was, job_id)
  else
    redis.call('ZADD', leases, deadline, job_id)
  end
  emit(events, counts, extended_ev, 'leases_extended')
  return 1
end
emit(events, counts, progress_ev, '')
local ok = extend()
if clock_key then
  barrier(clock_key, barriers, barrier_alive, op, holder, at, real_now, alive_until, refresh, also)
end
return ok
"""
)


def extend_lease(
    r: redis.Redis,
    lab: str,
    job_id: str,
    attempt: int,
    worker_id: str,
    now: float,
    extend: float,
    then: tuple[list[str], list[str]] | None = None,
    progress: str = "",
) -> bool:
    """Heartbeat: push the message's deadline to now + extend (current receive only); in the same round trip,
    first the attempt's `progress` event if it has one to show (a job.progress `stream.encode`d: a new tenth
    rides with the beat, workers/tasks.py pace), then the barrier change `then` (clock.barrier_call: the
    attempt's barrier moved on to its next moment), both whether or not the lease was still its own."""
    ev = stream.encode(
        "lease.extended", now, job_id=job_id, worker_id=worker_id, attempt=attempt, deadline=round(now + extend, 1)
    )
    keys, args = then or ([], [])
    return bool(
        script(r, _EXTEND)(
            keys=keys_for(lab, job_id) + keys,
            args=[attempt, repr(now + extend), ev, job_id, repr(now), progress] + args,
        )
    )


_CUT = """
local events, counts, message, leases = KEYS[3], KEYS[4], KEYS[6], KEYS[7]
local job_id, now, cut_ev = ARGV[1], ARGV[2], ARGV[3]
if redis.call('HGET', message, 'state') ~= 'inflight' or not redis.call('ZSCORE', leases, job_id) then return 0 end
local ev = cjson.decode(cut_ev)
ev['attempt'] = tonumber(redis.call('HGET', message, 'receives'))
ev['data']['was'] = math.floor(tonumber(redis.call('ZSCORE', leases, job_id)) * 10 + 0.5) / 10
redis.call('ZADD', leases, now, job_id)
emit(events, counts, cjson.encode(ev), 'leases_cut')
return 1
"""


def cut(r: redis.Redis, lab: str, job_id: str, now: float) -> bool:
    """The learner expires a lease early: its deadline becomes now, and the reaper's next pass does
    the rest exactly as for a lease that ran out (the message comes back while its worker, which
    knows nothing of this, keeps going). False if the message is not in flight."""
    ev = stream.encode("lease.cut", now, job_id=job_id, deadline=round(now, 3))
    return bool(script(r, _CUT)(keys=keys_for(lab, job_id), args=[job_id, repr(now), ev]))


# Keys: keys_for's, then the DLQ zset.
# Returns 1 applied (done), 0 refused (the record belongs to someone else), 2 a counted duplicate (guard off).
_COMPLETE = """
local record, states, events, counts, attempts, message = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local leases, alive, dlq = KEYS[7], KEYS[8], KEYS[9]
local delivery, guard, succeeded_ev, blocked_ev, duplicate_ev = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local attempt_rec, now, job_id, outputs = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
redis.call('HSET', attempts, delivery, attempt_rec)
local rec = redis.call('HMGET', record, 'state', 'holder', 'dlq_reason')
local st = rec[1]
local holder = tonumber(rec[2] or '0')
local function ack()
  if redis.call('HGET', message, 'state') ~= 'dlq' then redis.call('HSET', message, 'state', 'deleted') end
  redis.call('ZREM', leases, job_id)
end
local function done()
  redis.call('HSET', record, 'state', 'done', 'finished_at', now, 'outputs', outputs, 'won_by', delivery)
  if rec[3] then redis.call('HDEL', record, 'dlq_reason') end
  move(states, st, 'done')
  redis.call('ZREM', alive, job_id)
  -- only a finished record (dlq, lost, or done at the redrive) is in the DLQ: a running one never is (a redrive
  -- moves a running record to dlq; a receive never runs a finished one)
  if st ~= 'running' then redis.call('ZREM', dlq, job_id) end
  ack()
  emit(events, counts, succeeded_ev, 'succeeded')
  return 1
end
if guard == 'off' then
  if st ~= 'done' then return done() end
  ack()
  emit(events, counts, duplicate_ev, 'duplicate_completions')
  return 2
end
if st == 'running' and holder == tonumber(delivery) then return done() end
if st == 'done' then ack() end
local ev = cjson.decode(blocked_ev)
ev['data']['state'] = st
ev['data']['holder'] = holder
emit(events, counts, cjson.encode(ev), 'duplicates_blocked')
return 0
"""

APPLIED, REFUSED_WRITE, DUPLICATE = 1, 0, 2


def complete(
    r: redis.Redis,
    lab: str,
    job_id: str,
    attempt: int,
    worker_id: str,
    now: float,
    guard: str,
    attempt_record: dict,
    outputs: dict,
) -> int:
    """Ack late: the record goes done (with its outputs, in the same step) and the message is deleted.

    Under `claim`/`fence` a holder that no longer holds the record is refused; under `off` a second
    completion lands as a counted duplicate.
    """
    common: stream.JobRef = {"job_id": job_id, "worker_id": worker_id, "attempt": attempt}
    ran = round(now - float(attempt_record.get("start", now)), 3)
    ok = stream.encode("job.succeeded", now, **common, guard=guard, ran_s=ran)
    reason = (
        "a newer attempt owns the job (fencing token)"
        if guard == "fence"
        else "this holder's record was freed and is no longer its own"
    )
    blocked = stream.encode("job.duplicate_blocked", now, **common, guard=guard, reason=reason, wasted=ran)
    dup = stream.encode("job.duplicate_completed", now, **common, guard=guard, wasted=ran)
    return int(
        script(r, _COMPLETE)(
            keys=keys_for(lab, job_id, key(lab, "dlq")),
            args=[attempt, guard, ok, blocked, dup, json.dumps(attempt_record), now, job_id, json.dumps(outputs)],
        )
    )


# The broker hands the message out once more, as an at-least-once broker may (chapter 3's late delivery).
_AGAIN = """
local message, leases = KEYS[6], KEYS[7]
local job_id = ARGV[1]
if not redis.call('EXISTS', message) then return 0 end
local n = tonumber(redis.call('HGET', message, 'receives') or '0') + 1
redis.call('HSET', message, 'state', 'pending')
redis.call('ZREM', leases, job_id)
return n
"""


def deliver_again(r: redis.Redis, lab: str, job_id: str) -> int:
    """Make the job's message visible again (even a deleted one); returns the delivery number to send."""
    return int(script(r, _AGAIN)(keys=keys_for(lab, job_id), args=[job_id, 0]))
