"""The lab's event stream: one capped Redis Stream per lab, the single source of every count.

An event's counter is bumped in the same atomic step that appends it (`emit_all`'s script, a transition's, or
the MULTI a caller queues `append` in), so the snapshot's counts can never disagree with the log the learner reads.

Capped by count (MAXLEN, trimmed on append) and so by bytes: no encoded event is longer than
EVENT_MAX_BYTES (long text in its data, such as a 2 kB webhook URL, is cut to STRING_MAX characters
and the event marked `truncated`), so a lab's stream holds at most about MAXLEN × EVENT_MAX_BYTES
(20 MB) whatever a client sends.
"""

from __future__ import annotations

import json
import time
from typing import Any, TypedDict

import redis
from redis.commands.core import Script

from core.events import EVENT_TYPES
from core.keys import key

MAXLEN = 20000
EVENT_MAX_BYTES = 1024
STRING_MAX = 200  # characters kept of a long string in an oversized event's data

# Lua prelude shared by every transition script: append an event and bump its counter.
LUA_EMIT = f"""
local function emit(stream, counts, ev, counter)
  if ev == nil or ev == '' then return end
  redis.call('XADD', stream, 'MAXLEN', '~', {MAXLEN}, '*', 'e', ev)
  if counter ~= nil and counter ~= '' then redis.call('HINCRBY', counts, counter, 1) end
end
local function move(states, from, to)
  if from then redis.call('HINCRBY', states, from, -1) end
  if to then redis.call('HINCRBY', states, to, 1) end
end
"""


class JobRef(TypedDict):
    """Whose event it is: `encode`'s job, worker and attempt, passed along together (`**ref`)."""

    job_id: str
    worker_id: str
    attempt: int


def encode(
    type_: str,
    t_sim: float,
    job_id: str | None = None,
    worker_id: str | None = None,
    attempt: int | None = None,
    **data: Any,
) -> str:
    """An event as the JSON docs/design.md fixes; its id is the stream id assigned on append."""
    if type_ not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type_}")
    ev = {"t_sim": round(t_sim, 3), "t_real": round(time.time(), 4), "type": type_}
    if job_id is not None:
        ev["job_id"] = job_id
    if worker_id is not None:
        ev["worker_id"] = worker_id
    if attempt is not None:
        ev["attempt"] = attempt
    ev["data"] = data
    out = json.dumps(ev, separators=(",", ":"))
    if len(out.encode()) > EVENT_MAX_BYTES:
        ev["data"], ev["truncated"] = _shorten(data), True
        out = json.dumps(ev, separators=(",", ":"))
        if len(out.encode()) > EVENT_MAX_BYTES:  # many fields: only the event's type, job and worker stay
            ev["data"] = {}
            out = json.dumps(ev, separators=(",", ":"))
    return out


def _shorten(value: Any) -> Any:
    """`value` with every string longer than STRING_MAX cut to it (and an ellipsis), at any depth."""
    if isinstance(value, str):
        return value if len(value) <= STRING_MAX else value[:STRING_MAX] + "…"
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shorten(v) for v in value]
    return value


def counter(type_: str) -> str:
    return EVENT_TYPES[type_][0] or ""


def append(pipe: redis.client.Pipeline | redis.Redis, lab: str, type_: str, t_sim: float, **fields: Any) -> None:
    """Queue one unconditional event (and its counter) on a pipeline or client."""
    stream = key(lab, "events")
    pipe.xadd(stream, {"e": encode(type_, t_sim, **fields)}, maxlen=MAXLEN, approximate=True)
    if counter(type_):
        pipe.hincrby(key(lab, "counts"), counter(type_), 1)


# Storage calls a part retried inside its job's attempt (a `storage.called` of try 2 or later): counted apart
# from the job retries (`retries_scheduled`), so a readout can name both.
STORAGE_RETRIES = "storage_retries"


# ARGV: per event, the encoded event and its counter ('' for none).
# Each counter is bumped once, by how many of the events it counts.
_EMIT = Script(
    None,
    (
        LUA_EMIT
        + """
local events, counts = KEYS[1], KEYS[2]
local bumps = {}
for i = 1, #ARGV, 2 do
  emit(events, counts, ARGV[i], '')
  if ARGV[i + 1] ~= '' then bumps[ARGV[i + 1]] = (bumps[ARGV[i + 1]] or 0) + 1 end
end
for c, n in pairs(bumps) do redis.call('HINCRBY', counts, c, n) end
"""
    ).encode(),
)  # EVALSHA on any client


def emit(r: redis.Redis, lab: str, type_: str, t_sim: float, **fields: Any) -> None:
    """Append one event (`emit_all`)."""
    emit_all(r, lab, [(type_, t_sim, fields)])


def emit_all(
    r: redis.Redis, lab: str, events: list[tuple[str, float, dict[str, Any]]], bumps: dict[str, int] | None = None
) -> None:
    """Append events (type, simulated time, fields) in one step, and bump the counters in `bumps` (ones no event
    type owns, e.g. STORAGE_RETRIES) by as much. One uncounted event is one XADD (readers block on the stream
    itself: app/routes/ws.py's hub, app/longpoll.py); anything else is one script: the appends and one HINCRBY
    per counter (in a MULTI, the MULTI and the EXEC would be two more commands, and each event its own
    HINCRBY)."""
    if len(events) == 1 and not counter(events[0][0]) and not bumps:
        type_, t_sim, fields = events[0]
        append(r, lab, type_, t_sim, **fields)
        return
    args = []
    for type_, t_sim, fields in events:
        args += [encode(type_, t_sim, **fields), counter(type_)]
    for name, n in (bumps or {}).items():
        args += ["", name] * n
    _EMIT(keys=[key(lab, "events"), key(lab, "counts")], args=args, client=r)


def order(entry_id: str) -> tuple[int, int]:
    """An event id's place in its stream ("<ms>-<seq>"): ids compare as these tuples, never as strings."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def decode(entry_id: str, fields: dict) -> dict:
    ev = json.loads(fields["e"])
    ev["id"] = entry_id
    return ev


def read_after(r: redis.Redis, lab: str, after: str = "0", count: int = 1000) -> list[dict]:
    """Events strictly after stream id `after` ("0" = from the start), oldest first."""
    start = "(" + after if after not in ("0", "0-0", "") else "-"
    return [decode(i, f) for i, f in r.xrange(key(lab, "events"), min=start, count=count)]
