"""Archive: parked labs that nobody has opened for a while, folded into one compressed value in the server.

A parked lab runs no process but keeps its records, events and RQ keys in the Redis-protocol server. A term
of classes parks hundreds of labs, so parked labs are bounded by the bytes they hold, not by their count:
the supervisor measures each parked lab once (`measure`: MEMORY USAGE of each of its keys, kept in
`labs:parked:bytes`) and, while the parked labs that are not archived hold more than PARKED_MEMORY, folds
the least recently used of them into `lab:{id}:archive` (every key's type, value and TTL as JSON, zlib
compressed: events repeat their field names, so a lab shrinks about tenfold). The archive lives in the
server itself, so any web process or pool host restores it: no host relies on another's disk.

What stays unfolded is what is read without resuming the lab: its meta (tokens, last use), settings, clock,
counts and job states (a room's dashboard), watchers, ownership lease and blobs (uploads and outputs, already
budgeted by MAX_BLOB_BYTES and not compressible). Opening the lab's page resumes it (core/parking.py), and the resume
unfolds the archive first, every key and its TTL as it was, the event stream with its ids and its count of
trimmed events, in one transaction. Folding is one transaction too, watched on the lab's keys and the parked
set, so a resume that starts while a lab is being folded wins and nothing is folded.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis

from core.keys import LABS, PARKED, key, owner, queue_name

ARCHIVED = "labs:archived"  # parked labs whose keys are folded into lab:{id}:archive
PARKED_BYTES = "labs:parked:bytes"  # parked lab -> bytes its foldable keys held when it was measured
STAYS = ("meta", "settings", "clock", "counts", "states", "watchers", "owner", "blob", "blobs", "blob_bytes", "archive")
"""The parts of `lab:{id}:…` never folded (read without a resume, or budgeted elsewhere)."""


def archive_key(lab: str) -> str:
    return key(lab, "archive")


@contextmanager
def _bytes_client(r: redis.Redis) -> Iterator[redis.Redis]:
    """A client of `r`'s server that never decodes (RQ's job hashes hold pickles), closed after use."""
    pool = redis.ConnectionPool(
        connection_class=r.connection_pool.connection_class,
        **{**r.connection_pool.connection_kwargs, "decode_responses": False},
    )
    try:
        yield redis.Redis(connection_pool=pool)
    finally:
        pool.disconnect()


def foldable(r: redis.Redis, lab: str) -> list[str]:
    """The lab's keys an archive holds: its own (but STAYS) and its RQ queue's, registries' and jobs'."""
    found: set[str] = set()
    for pattern in (f"lab:{lab}:*", f"rq:*{queue_name(lab)}*", f"rq:job:{lab}-*"):
        found.update(k if isinstance(k, str) else k.decode() for k in r.scan_iter(match=pattern, count=1000))
    prefix = f"lab:{lab}:"
    return sorted(k for k in found if not (k.startswith(prefix) and k[len(prefix) :].split(":", 1)[0] in STAYS))


def measure(r: redis.Redis, lab: str) -> int:
    """Bytes the lab's foldable keys hold in the server now (MEMORY USAGE, every element counted)."""
    keys = foldable(r, lab)
    with r.pipeline(transaction=False) as pipe:
        for k in keys:
            pipe.memory_usage(k, samples=0)
        return sum(int(n or 0) for n in pipe.execute())


def _text(b: bytes | str) -> str:
    """Every byte one character: lossless, and JSON-safe (stream ids come back decoded already)."""
    return b if isinstance(b, str) else b.decode("latin-1")


def _bytes(s: str) -> bytes:
    return s.encode("latin-1")


def _dump(raw: redis.Redis, keys: list[str]) -> dict[str, Any]:
    """Every key's type, value and TTL, read in one transaction (a consistent picture); `raw` never decodes."""
    with raw.pipeline(transaction=True) as pipe:
        for k in keys:
            pipe.type(k)
            pipe.pttl(k)
        heads = pipe.execute()
    kinds = {k: _text(t) for k, t in zip(keys, heads[0::2], strict=True)}
    with raw.pipeline(transaction=True) as pipe:
        for k in keys:
            kind = kinds[k]
            if kind == "string":
                pipe.get(k)
            elif kind == "hash":
                pipe.hgetall(k)
            elif kind == "list":
                pipe.lrange(k, 0, -1)
            elif kind == "set":
                pipe.smembers(k)
            elif kind == "zset":
                pipe.zrange(k, 0, -1, withscores=True)
            elif kind == "stream":
                pipe.xrange(k)
                pipe.xinfo_stream(k)
        values = iter(pipe.execute())
    out: dict[str, Any] = {}
    for k, ttl in zip(keys, heads[1::2], strict=True):
        kind = kinds[k]
        if kind not in ("string", "hash", "list", "set", "zset", "stream"):
            continue  # gone since it was listed
        v = next(values)
        if kind == "string":
            item: Any = _text(v)
        elif kind == "hash":
            item = {_text(f): _text(x) for f, x in v.items()}
        elif kind in ("list", "set"):
            item = [_text(x) for x in v]
        elif kind == "zset":
            item = [[_text(m), float(sc)] for m, sc in v]
        else:  # stream: its entries with their ids, and what XSETID needs to keep its history's shape
            info = next(values)
            item = {
                "entries": [[_text(i), {_text(f): _text(x) for f, x in fields.items()}] for i, fields in v],
                "last": _text(info["last-generated-id"]),
                "added": int(info.get("entries-added", len(v))),
                "deleted": _text(info.get("max-deleted-entry-id", b"0-0")),
            }
        out[k] = {"type": kind, "ttl": int(ttl), "value": item}
    return out


def _load(pipe: redis.client.Pipeline, keys: dict[str, Any]) -> None:
    """Write every key back as `_dump` read it (queued on `pipe`, inside its MULTI)."""
    for k, rec in keys.items():
        kind, v = rec["type"], rec["value"]
        pipe.delete(k)
        if kind == "string":
            pipe.set(k, _bytes(v))
        elif kind == "hash":
            pipe.hset(k, mapping={_bytes(f): _bytes(x) for f, x in v.items()})
        elif kind == "list":
            pipe.rpush(k, *[_bytes(x) for x in v])
        elif kind == "set":
            pipe.sadd(k, *[_bytes(x) for x in v])
        elif kind == "zset":
            pipe.zadd(k, {_bytes(m): s for m, s in v})
        else:
            for entry_id, fields in v["entries"]:
                pipe.xadd(k, {_bytes(f): _bytes(x) for f, x in fields.items()}, id=entry_id)
            if v["entries"]:
                pipe.execute_command("XSETID", k, v["last"], "ENTRIESADDED", v["added"], "MAXDELETEDID", v["deleted"])
        if rec["ttl"] > 0:
            pipe.pexpire(k, rec["ttl"])


def fold(r: redis.Redis, lab: str) -> int | None:
    """Fold a parked lab's keys into its archive; the archive's bytes, or None if the lab is not parked, is
    archived already, has an owner, or changed while it was read (a resume won)."""
    keys = foldable(r, lab)
    with r.pipeline(transaction=True) as pipe:
        try:
            pipe.watch(PARKED, ARCHIVED, owner(lab), *keys)
            if not pipe.sismember(PARKED, lab) or pipe.sismember(ARCHIVED, lab) or pipe.exists(owner(lab)):
                return None
            with _bytes_client(r) as raw:
                blob = zlib.compress(json.dumps(_dump(raw, keys), separators=(",", ":")).encode(), 6)
            pipe.multi()
            pipe.set(archive_key(lab), blob)
            if keys:
                pipe.delete(*keys)
            pipe.sadd(ARCHIVED, lab)
            pipe.hdel(PARKED_BYTES, lab)
            pipe.execute()
        except redis.WatchError:
            return None
    return len(blob)


def restore(r: redis.Redis, lab: str) -> bool:
    """Unfold an archived lab, every key as it was, in one transaction (False if it was not archived, or
    another request unfolded it meanwhile)."""
    if not r.sismember(ARCHIVED, lab):
        return False
    with _bytes_client(r) as raw, raw.pipeline(transaction=True) as pipe:
        try:
            pipe.watch(archive_key(lab))
            blob = pipe.get(archive_key(lab))
            if blob is None:
                pipe.unwatch()
                r.srem(ARCHIVED, lab)
                return False
            keys = json.loads(zlib.decompress(blob))
            pipe.multi()
            _load(pipe, keys)
            pipe.delete(archive_key(lab))
            pipe.srem(ARCHIVED, lab)
            pipe.execute()
        except redis.WatchError:
            return False
    return True


def forget(r: redis.Redis, lab: str) -> None:
    """A lab that is gone (its archive key goes with its other keys)."""
    with r.pipeline(transaction=False) as pipe:
        pipe.srem(ARCHIVED, lab)
        pipe.hdel(PARKED_BYTES, lab)
        pipe.execute()


def keep_within(r: redis.Redis, budget: int, oldest_first: Callable[[list[str]], list[str]]) -> list[str]:
    """The supervisor's hook: measure the parked labs not measured yet, then fold the least recently seen
    (`oldest_first`: labs → the same labs, least recently seen first; asked only when over budget) until the
    unfolded ones hold at most `budget` bytes (0: never fold). The labs folded."""
    if budget <= 0:
        return []
    parked = set(r.smembers(PARKED)) - set(r.smembers(ARCHIVED))
    sizes = {k: int(v) for k, v in r.hgetall(PARKED_BYTES).items()}
    for gone in set(sizes) - parked:
        r.hdel(PARKED_BYTES, gone)  # resumed (or deleted) since it was measured
        sizes.pop(gone)
    for lab in parked - set(sizes):
        if r.sismember(LABS, lab) and not r.exists(owner(lab)):
            sizes[lab] = measure(r, lab)
            r.hset(PARKED_BYTES, lab, sizes[lab])
    held = sum(sizes.values())
    if held <= budget:
        return []
    folded = []
    for lab in oldest_first(sorted(sizes)):
        if held <= budget:
            break
        try:
            if fold(r, lab) is None:
                continue
        except redis.ResponseError:
            continue  # the server refused a write (its disk or memory is full): tried again next round
        held -= sizes[lab]
        folded.append(lab)
    return folded


def stats(r: redis.Redis) -> dict[str, int]:
    """Parked labs, how many are folded, the bytes the folded ones' archives take and the bytes the parked
    labs measured but not folded hold (for /metrics)."""
    archived = list(r.smembers(ARCHIVED))
    with r.pipeline(transaction=False) as pipe:
        for lab in archived:
            pipe.strlen(archive_key(lab))
        folded = sum(int(n or 0) for n in pipe.execute())
    return {
        "parked": int(r.scard(PARKED)),
        "archived": len(archived),
        "archived_bytes": folded,
        "parked_bytes": sum(int(v) for v in r.hvals(PARKED_BYTES)),
    }
