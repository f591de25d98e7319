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

RUN, BLOCKED, REFUSED, STALE = "run", "blocked", "refused", "stale"


def keys_for(lab: str, job_id: str, *extra: str) -> list[str]:
    """KEYS[1..5] of every transition (state.lab_keys), then [6] the message, [7] the leases zset,
    [8] the `alive` zset (running records by last sign of life, read by the stale-job sweeper)."""
    return lab_keys(lab, job_id, msg(lab, job_id), key(lab, "leases"), key(lab, "alive"), *extra)


# KEYS: [1] record [2] state gauges [3] events [4] counters [5] attempts [6] message [7] leases [8] alive
#       [9] hand-offs (handoff.record's notes)
# ARGV: [1] delivery n [2] job id [3] now [4] lease deadline ('' = ack early) [5] '1' if the lease is a
#       heartbeat lease [6] guard off|claim|fence [7] worker id [8] job.claimed event [9] job.duplicate_blocked
#       event [10] job.claim_refused event [11] this attempt's record (JSON) [12] this delivery's hand-off
#       note ('' if none)
# Returns {run | blocked | refused | stale, the record as this receive left it (HGETALL's flat list; empty if
# stale)}. (Each hash read once and written once: a busy lab receives a delivery every two seconds.) The
# delivery has arrived whatever comes of it, so its hand-off note goes (the supervisor sweeps only those
# that never arrive).
_RECEIVE = """
if ARGV[12] ~= '' then redis.call('ZREM', KEYS[9], ARGV[12]) end
-- 1. the broker: only the delivery it sent last may receive the message
local m = redis.call('HMGET', KEYS[6], 'state', 'receives')
if m[1] ~= 'pending' then return {'stale', {}} end
if tonumber(m[2] or '0') + 1 ~= tonumber(ARGV[1]) then return {'stale', {}} end
if ARGV[4] == '' then
  redis.call('HSET', KEYS[6], 'receives', ARGV[1], 'state', 'deleted')  -- ack early: deleted on receive, no lease
else
  redis.call('HSET', KEYS[6], 'receives', ARGV[1], 'state', 'inflight', 'hb', ARGV[5])
  redis.call('ZADD', KEYS[7], ARGV[4], ARGV[2])
end
-- 2. the record: what the guard lets this holder do (read whole: the attempt works from it)
local flat = redis.call('HGETALL', KEYS[1])
local rec = {}
for i = 1, #flat, 2 do rec[flat[i]] = flat[i + 1] end
local st = rec['state']
local guard = ARGV[6]
local finished = st == 'done' or st == 'dlq' or st == 'lost'
if guard ~= 'off' and finished then
  -- done -> running is not a transition: ack the message and drop it
  redis.call('HSET', KEYS[6], 'state', 'deleted')
  redis.call('ZREM', KEYS[7], ARGV[2])
  local ev = cjson.decode(ARGV[10])
  ev['data']['state'] = st
  ev['data']['current_attempt'] = tonumber(rec['attempt'] or '0')
  emit(KEYS[3], KEYS[4], cjson.encode(ev), 'claims_refused')
  return {'refused', flat}
end
if guard == 'claim' and st == 'running' then
  -- zero rows updated: back off, leave the message in flight (it comes back after its deadline)
  local ev = cjson.decode(ARGV[9])
  ev['data']['holder'] = tonumber(rec['holder'] or '0')
  emit(KEYS[3], KEYS[4], cjson.encode(ev), 'duplicates_blocked')
  return {'blocked', flat}
end
local fields = {'attempt', tostring(tonumber(rec['attempt'] or '0') + 1), 'holder', ARGV[1], 'worker', ARGV[7],
                'claimed_at', ARGV[3]}
if st == 'queued' or st == 'retrying' then
  fields[#fields + 1], fields[#fields + 2] = 'state', 'running'
  move(KEYS[2], st, 'running')
  st = 'running'
end
redis.call('HSET', KEYS[1], unpack(fields))
if st == 'running' then redis.call('ZADD', KEYS[8], ARGV[3], ARGV[2]) end
redis.call('HSET', KEYS[5], ARGV[1], ARGV[11])
local ev = cjson.decode(ARGV[8])
ev['data']['record_was'] = st
emit(KEYS[3], KEYS[4], cjson.encode(ev), '')
for i = 1, #fields, 2 do rec[fields[i]] = fields[i + 1] end
local out = {}
for f, v in pairs(rec) do out[#out + 1] = f; out[#out + 1] = v end
return {'run', out}
"""


def receive(r: redis.Redis, lab: str, job_id: str, n: int, worker_id: str, now: float, settings: dict,
            pid: int, note: str = "") -> tuple[str, dict]:
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
    common = {"job_id": job_id, "worker_id": worker_id, "attempt": n}
    claimed = stream.encode("job.claimed", now, **common, ack_mode=settings["ack_mode"], guard=guard,
                            lease_deadline=deadline, receives=n)
    blocked = stream.encode("job.duplicate_blocked", now, **common, guard=guard,
                            reason="the record is already running: zero rows updated, backed off without "
                                   "transcoding; the message stays in flight")
    refused = stream.encode("job.claim_refused", now, **common, guard=guard)
    rec = json.dumps({"attempt": n, "worker": worker_id, "pid": pid, "start": round(now, 3),
                      "outcome": "running", "ack_mode": settings["ack_mode"]})
    outcome, flat = script(r, _RECEIVE)(keys=keys_for(lab, job_id, key(lab, "handoffs")),
                                        args=[n, job_id, now, "" if deadline is None else repr(deadline),
                                              "1" if settings["heartbeat"] and not early else "0", guard,
                                              worker_id, claimed, blocked, refused, rec, note])
    return outcome, dict(zip(flat[::2], flat[1::2], strict=True))


# KEYS: as receive, then (a barrier to move in the same step) [9] clock [10] barriers [11] barrier alive.
# ARGV: [1] delivery n [2] new deadline [3] lease.extended event [4] job id [5] now, then (with KEYS[9..11])
#       [6..12] the barrier change as clock.barrier_call gives it (op, holder, at, real now, alive-until, refresh,
#       another holder to lift)
# The record's holder shows a sign of life (the `alive` zset: the stale-job sweeper's clock); the message's
# visibility moves only for the current receive (a stale receipt cannot change it, as in SQS). The lease's
# deadline lives in the leases zset alone (read with ZSCORE), so a beat writes it once.
# (A busy lab beats several times a second, so every command counts: each hash is read once, with HMGET,
# and the attempt's barrier moves on to its next beat in the same round trip.)
_EXTEND = clock.BARRIER_FN + """
local function extend()
  local rec = redis.call('HMGET', KEYS[1], 'state', 'holder')
  if rec[1] == 'running' and tonumber(rec[2] or '0') == tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[8], 'XX', ARGV[5], ARGV[4])
  end
  local m = redis.call('HMGET', KEYS[6], 'state', 'receives')
  if m[1] ~= 'inflight' or tonumber(m[2]) ~= tonumber(ARGV[1]) then return 0 end
  local was = tonumber(redis.call('ZSCORE', KEYS[7], ARGV[4]) or '')
  if was and tonumber(ARGV[2]) >= was then
    -- pushed later, as a heartbeat does: ZINCRBY's keyspace notification ('zincr') tells the supervisor that no
    -- deadline came earlier, so it need not read the leases' head again (workers/wait.py Waker)
    redis.call('ZINCRBY', KEYS[7], tonumber(ARGV[2]) - was, ARGV[4])
  else
    redis.call('ZADD', KEYS[7], ARGV[2], ARGV[4])
  end
  emit(KEYS[3], KEYS[4], ARGV[3], 'leases_extended')
  return 1
end
local ok = extend()
if KEYS[9] then
  barrier(KEYS[9], KEYS[10], KEYS[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12])
end
return ok
"""


def extend_lease(r: redis.Redis, lab: str, job_id: str, attempt: int, worker_id: str, now: float,
                 extend: float, then: tuple[list[str], list[str]] | None = None) -> bool:
    """Heartbeat: push the message's deadline to now + extend (current receive only); then, in the same
    round trip, the barrier change `then` (clock.barrier_call: the attempt's barrier moved on to its next
    moment), whether or not the lease was still its own."""
    ev = stream.encode("lease.extended", now, job_id=job_id, worker_id=worker_id, attempt=attempt,
                       deadline=round(now + extend, 1))
    keys, args = then or ([], [])
    return bool(script(r, _EXTEND)(keys=keys_for(lab, job_id) + keys,
                                   args=[attempt, repr(now + extend), ev, job_id, repr(now)] + args))


# KEYS: as receive. ARGV: [1] job id [2] now [3] lease.cut event
_CUT = """
if redis.call('HGET', KEYS[6], 'state') ~= 'inflight' or not redis.call('ZSCORE', KEYS[7], ARGV[1]) then return 0 end
local ev = cjson.decode(ARGV[3])
ev['attempt'] = tonumber(redis.call('HGET', KEYS[6], 'receives'))
ev['data']['was'] = math.floor(tonumber(redis.call('ZSCORE', KEYS[7], ARGV[1])) * 10 + 0.5) / 10
redis.call('ZADD', KEYS[7], ARGV[2], ARGV[1])
emit(KEYS[3], KEYS[4], cjson.encode(ev), 'leases_cut')
return 1
"""


def cut(r: redis.Redis, lab: str, job_id: str, now: float) -> bool:
    """The learner expires a lease early: its deadline becomes now, and the reaper's next pass does
    the rest exactly as for a lease that ran out (the message comes back while its worker, which
    knows nothing of this, keeps going). False if the message is not in flight."""
    ev = stream.encode("lease.cut", now, job_id=job_id, deadline=round(now, 3))
    return bool(script(r, _CUT)(keys=keys_for(lab, job_id), args=[job_id, repr(now), ev]))


# KEYS: as receive, then [9] the DLQ zset.
# ARGV: [1] delivery n [2] guard [3] job.succeeded [4] job.duplicate_blocked [5] job.duplicate_completed
#       [6] attempt record (JSON) [7] now [8] job id [9] outputs (JSON)
# Returns 1 applied (done), 0 refused (the record belongs to someone else), 2 a counted duplicate (guard off).
_COMPLETE = """
redis.call('HSET', KEYS[5], ARGV[1], ARGV[6])
local rec = redis.call('HMGET', KEYS[1], 'state', 'holder', 'dlq_reason')
local st = rec[1]
local holder = tonumber(rec[2] or '0')
local function ack()
  if redis.call('HGET', KEYS[6], 'state') ~= 'dlq' then redis.call('HSET', KEYS[6], 'state', 'deleted') end
  redis.call('ZREM', KEYS[7], ARGV[8])
end
local function done()
  redis.call('HSET', KEYS[1], 'state', 'done', 'finished_at', ARGV[7], 'outputs', ARGV[9], 'won_by', ARGV[1])
  if rec[3] then redis.call('HDEL', KEYS[1], 'dlq_reason') end
  move(KEYS[2], st, 'done')
  redis.call('ZREM', KEYS[8], ARGV[8])
  -- only a finished record (dlq, lost, or done at the redrive) is in the DLQ: a running one never is (a redrive
  -- moves a running record to dlq; a receive never runs a finished one)
  if st ~= 'running' then redis.call('ZREM', KEYS[9], ARGV[8]) end
  ack()
  emit(KEYS[3], KEYS[4], ARGV[3], 'succeeded')
  return 1
end
if ARGV[2] == 'off' then
  if st ~= 'done' then return done() end
  ack()
  emit(KEYS[3], KEYS[4], ARGV[5], 'duplicate_completions')
  return 2
end
if st == 'running' and holder == tonumber(ARGV[1]) then return done() end
if st == 'done' then ack() end
local ev = cjson.decode(ARGV[4])
ev['data']['state'] = st
ev['data']['holder'] = holder
emit(KEYS[3], KEYS[4], cjson.encode(ev), 'duplicates_blocked')
return 0
"""

APPLIED, REFUSED_WRITE, DUPLICATE = 1, 0, 2


def complete(r: redis.Redis, lab: str, job_id: str, attempt: int, worker_id: str, now: float,
             guard: str, attempt_record: dict, outputs: dict) -> int:
    """Ack late: the record goes done (with its outputs, in the same step) and the message is deleted.

    Under `claim`/`fence` a holder that no longer holds the record is refused; under `off` a second
    completion lands as a counted duplicate.
    """
    common = {"job_id": job_id, "worker_id": worker_id, "attempt": attempt}
    ran = round(now - float(attempt_record.get("start", now)), 3)
    ok = stream.encode("job.succeeded", now, **common, guard=guard, ran_s=ran)
    reason = ("a newer attempt owns the job (fencing token)" if guard == "fence"
              else "this holder's record was freed and is no longer its own")
    blocked = stream.encode("job.duplicate_blocked", now, **common, guard=guard, reason=reason, wasted=ran)
    dup = stream.encode("job.duplicate_completed", now, **common, guard=guard, wasted=ran)
    return int(script(r, _COMPLETE)(
        keys=keys_for(lab, job_id, key(lab, "dlq")),
        args=[attempt, guard, ok, blocked, dup, json.dumps(attempt_record), now, job_id, json.dumps(outputs)]))


# KEYS: as receive. ARGV: [1] job id [2] real time (dispatch score)
# The broker hands the message out once more, as an at-least-once broker may (chapter 3's late delivery).
_AGAIN = """
if not redis.call('EXISTS', KEYS[6]) then return 0 end
local n = tonumber(redis.call('HGET', KEYS[6], 'receives') or '0') + 1
redis.call('HSET', KEYS[6], 'state', 'pending')
redis.call('ZREM', KEYS[7], ARGV[1])
return n
"""


def deliver_again(r: redis.Redis, lab: str, job_id: str) -> int:
    """Make the job's message visible again (even a deleted one); returns the delivery number to send."""
    return int(script(r, _AGAIN)(keys=keys_for(lab, job_id), args=[job_id, 0]))
