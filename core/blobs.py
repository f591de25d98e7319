"""Blobs: uploads and outputs kept in the Redis-protocol server itself, so no host needs another's disk.

A pool host on another machine (or a second web process) needs nothing but the server URL: a job's
`source` names a blob (`blob:uploads/<random>.bin`), its outputs are blobs under the deterministic
names docs/design.md fixes (`transcoded/{job_id}/{rendition}.mp4`). Local disk is only a cache: a worker
materialises a source once per host (`var/labs/<lab>/cache/…`), ffmpeg writes its temp file locally,
and the finished file is published with one SET (atomic: readers see all of it or nothing).

Caps, checked in the same Lua step that stores: each lab's blobs together (MAX_LAB_BYTES), each client's
across all its labs (CLIENT_BLOB_SHARE of MAX_BLOB_BYTES: the client recorded on the lab when it was
opened, so outputs its jobs write count against it too) and the whole server's (MAX_BLOB_BYTES), so
one client cannot take the store from the others and a classroom cannot fill the server's memory.

Nothing outlives its lab: the same step refuses a store into a lab no longer in `labs` (LabGone: an
upload that finishes after its lab was deleted is answered 410 and leaves no byte), and `forget_lab`
deletes the lab's blobs and gives their bytes back in one step. `recount` (the pool's periodic
reconcile, workers/reconcile.py) rebuilds every counter from the blob indexes after a crash or restart.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from fnmatch import fnmatch
from functools import lru_cache
from pathlib import Path

import redis
from redis.client import NEVER_DECODE
from redis.commands.core import Script

from core.keys import LABS, PARKED, key, lab_dir

PREFIX = "blob:"  # a job `source` starting with this names a blob; anything else is a path on every host
TOTAL = "blobs:bytes"  # bytes of every lab's blobs on this server
CLIENT_PREFIX = "blobs:client:"  # + client: bytes of that client's labs' blobs
CHUNK = 256 * 1024  # a non-atomic write goes out in pieces (a crash can leave a prefix, as a file would)

# client_bytes is server_bytes again when the lab has no client, and client_max -1; mode 'set' | 'append'. After the
# named keys and arguments come the blobs' keys and, per blob, its name and its bytes. Every blob or none, in one
# step: one check of the caps for them all.
# Returns each blob's new size, or -3 (lab gone), -1 (lab cap), -4 (client cap), -2 (server cap).
_PUT = """
local blob_index, lab_bytes, server_bytes, live_labs, client_bytes = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lab, lab_cap, server_cap, client_max, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('SISMEMBER', live_labs, lab) == 0 then return -3 end
local n = #KEYS - 5
local names, sizes, change = {}, {}, 0
for i = 1, n do names[i] = ARGV[4 + 2 * i] end
local olds = redis.call('HMGET', blob_index, unpack(names))
for i = 1, n do
  local old = tonumber(olds[i] or '0')
  sizes[i] = string.len(ARGV[5 + 2 * i])
  if mode == 'append' then sizes[i] = old + sizes[i] end
  change = change + sizes[i] - old
end
local client_cap = tonumber(client_max)
local used = redis.call('MGET', lab_bytes, server_bytes, client_bytes)  -- the lab's, the server's, the client's bytes
if tonumber(used[1] or '0') + change > tonumber(lab_cap) then return -1 end
if client_cap >= 0 and tonumber(used[3] or '0') + change > client_cap then return -4 end
if tonumber(used[2] or '0') + change > tonumber(server_cap) then return -2 end
local index = {}
for i = 1, n do
  if mode == 'append' then redis.call('APPEND', KEYS[5 + i], ARGV[5 + 2 * i])
  else redis.call('SET', KEYS[5 + i], ARGV[5 + 2 * i]) end
  index[2 * i - 1], index[2 * i] = names[i], sizes[i]
end
redis.call('HSET', blob_index, unpack(index))
redis.call('INCRBY', lab_bytes, change)
redis.call('INCRBY', server_bytes, change)
if client_cap >= 0 then redis.call('INCRBY', client_bytes, change) end
return sizes
"""
_PUT_SCRIPT = Script(None, _PUT.encode())  # EVALSHA on any client (its source is sent once per server)

# Freeing scripts run even when the server is at maxmemory (they give memory back).
_DELETE = """#!lua flags=allow-oom
local blob, blob_index, lab_bytes, server_bytes, client_bytes = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local name = ARGV[1]
local old = tonumber(redis.call('HGET', blob_index, name) or '0')
redis.call('DEL', blob)
redis.call('HDEL', blob_index, name)
redis.call('DECRBY', lab_bytes, old)
redis.call('DECRBY', server_bytes, old)
if client_bytes ~= '' then redis.call('DECRBY', client_bytes, old) end
return old
"""

_FORGET = """#!lua flags=allow-oom
local lab_bytes, blob_index, server_bytes, client_bytes = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local blob_prefix = ARGV[1]
local used = tonumber(redis.call('GET', lab_bytes) or '0')
for _, name in ipairs(redis.call('HKEYS', blob_index)) do redis.call('DEL', blob_prefix .. name) end
redis.call('DEL', lab_bytes, blob_index)
if used > 0 then redis.call('DECRBY', server_bytes, used) end
if client_bytes ~= '' then  -- never below 0: a branch's copied blobs land before its client is recorded
  local left = tonumber(redis.call('GET', client_bytes) or '0') - used
  if left > 0 then redis.call('SET', client_bytes, left) else redis.call('DEL', client_bytes) end
end
return used
"""

# Clears a parked lab's outputs (every blob but its uploads): nothing if the lab is no longer parked (its page opened
# it again meanwhile, and its jobs may be writing). Notes when on the lab's meta. Returns the bytes given back.
_CLEAR = """#!lua flags=allow-oom
local blob_index, lab_bytes, server_bytes, client_bytes, parked, meta = unpack(KEYS)
local lab, blob_prefix, kept, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('SISMEMBER', parked, lab) == 0 then return 0 end
local freed, rows = 0, redis.call('HGETALL', blob_index)
for i = 1, #rows, 2 do
  if string.sub(rows[i], 1, #kept) ~= kept then
    redis.call('DEL', blob_prefix .. rows[i])
    redis.call('HDEL', blob_index, rows[i])
    freed = freed + tonumber(rows[i + 1])
  end
end
if freed == 0 then return 0 end
redis.call('DECRBY', lab_bytes, freed)
redis.call('DECRBY', server_bytes, freed)
if client_bytes ~= '' then redis.call('DECRBY', client_bytes, freed) end
redis.call('HSET', meta, 'outputs_cleared', now)
return freed
"""


class BlobFull(Exception):
    """A store would pass a cap; `scope` is "lab", "client" or "server"."""

    def __init__(self, scope: str, cap: int):
        super().__init__(f"{scope} storage cap of {cap} bytes reached")
        self.scope, self.cap = scope, cap


class LabGone(Exception):
    """The lab was deleted (or expired): nothing is stored for it any more."""


@lru_cache(maxsize=1)
def caps() -> tuple[int, int, int]:
    """(per-lab cap, per-client cap, server-wide cap) from this process's configuration."""
    from core.config import Config

    cfg = Config.from_env()
    return cfg.max_lab_bytes, cfg.client_blob_bytes, cfg.max_blob_bytes


def blob_key(lab: str, name: str) -> str:
    return key(lab, "blob", name)


def _index(lab: str) -> str:
    return key(lab, "blobs")  # hash: name → size


def _used(lab: str) -> str:
    return key(lab, "blob_bytes")


def client_key(client: str) -> str:
    return CLIENT_PREFIX + client


def _client_of(r: redis.Redis, lab: str) -> str:
    """The key counting the bytes of the client that opened `lab` ("" if none was recorded)."""
    who = r.hget(key(lab, "meta"), "client")
    return client_key(who.decode() if isinstance(who, bytes) else who) if who else ""


def is_blob(source: str) -> bool:
    return source.startswith(PREFIX)


def ref(name: str) -> str:
    return PREFIX + name


def put(r: redis.Redis, lab: str, name: str, data: bytes, append: bool = False) -> int:
    """Store (or append to) one blob within the caps; returns its size. Raises BlobFull, or LabGone
    if the lab is no longer live (checked in the same atomic step: a delete racing it leaves no byte)."""
    return put_many(r, lab, {name: data}, append)[name]


def put_many(r: redis.Redis, lab: str, blobs: dict[str, bytes], append: bool = False) -> dict[str, int]:
    """`put` of several blobs in one step (an attempt's outputs): all stored, or none; name → size."""
    lab_cap, client_cap, server_cap = caps()
    who = _client_of(r, lab)
    args = [lab, lab_cap, server_cap, client_cap if who else -1, "append" if append else "set"]
    for name, data in blobs.items():
        args += [name, data]
    res = _PUT_SCRIPT(
        keys=[_index(lab), _used(lab), TOTAL, LABS, who or TOTAL, *(blob_key(lab, name) for name in blobs)],
        args=args,
        client=r,
    )
    if res == -3:
        raise LabGone(lab)
    if res == -1:
        raise BlobFull("lab", lab_cap)
    if res == -4:
        raise BlobFull("client", client_cap)
    if res == -2:
        raise BlobFull("server", server_cap)
    return dict(zip(blobs, (int(n) for n in res), strict=True))


def put_file(r: redis.Redis, lab: str, name: str, path: Path, atomic: bool = True) -> int:
    """Publish a local file as a blob: one SET when atomic; otherwise in pieces, like a plain write."""
    if atomic:
        return put(r, lab, name, Path(path).read_bytes())
    size = 0
    with open(path, "rb") as f:
        first = True
        while True:
            chunk = f.read(CHUNK)
            if not chunk and not first:
                break
            size = put(r, lab, name, chunk, append=not first)
            first = False
    return size


def get(r: redis.Redis, lab: str, name: str) -> bytes | None:
    """The blob's bytes (never decoded, whatever the client's decode_responses), or None."""
    return r.execute_command("GET", blob_key(lab, name), **{NEVER_DECODE: []})


def names(r: redis.Redis, lab: str, prefix: str = "") -> dict[str, int]:
    """Blob name → size for this lab's blobs starting with `prefix`."""
    return {k: int(v) for k, v in _str_map(r.hgetall(_index(lab))).items() if k.startswith(prefix)}


def _str_map(m: dict) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v) for k, v in m.items()
    }


def usage(r: redis.Redis, lab: str) -> int:
    """Bytes the lab's blobs take on the server (what MAX_LAB_BYTES caps)."""
    return int(r.get(_used(lab)) or 0)


def server_usage(r: redis.Redis) -> int:
    return int(r.get(TOTAL) or 0)


def client_usage(r: redis.Redis, client: str) -> int:
    """Bytes the blobs of every lab `client` opened take (what CLIENT_BLOB_SHARE caps)."""
    return int(r.get(client_key(client)) or 0)


POISON = "uploads/poison.bin"  # the lab's poison pill: a truncated MP4 (moov missing)


def poison(r: redis.Redis, lab: str, clip: bytes) -> str:
    """The poison pill's source ref: the first half of `clip`, which passes a byte sniff and fails to decode every
    time (written once per lab; BlobFull if the lab's share is spent)."""
    if POISON not in names(r, lab, POISON):
        put(r, lab, POISON, clip[: len(clip) // 2])
    return ref(POISON)


def delete(r: redis.Redis, lab: str, name: str) -> int:
    return int(r.eval(_DELETE, 5, blob_key(lab, name), _index(lab), _used(lab), TOTAL, _client_of(r, lab), name))


def copy(r: redis.Redis, src_lab: str, dst_lab: str, name: str) -> bool:
    """Copy one blob to another lab (a branch outlives its parent); False if the source is gone."""
    data = get(r, src_lab, name)
    if data is None:
        return False
    put(r, dst_lab, name, data)
    return True


ROOM_AT, ROOM_TO = 0.9, 0.75
"""Past ROOM_AT of MAX_BLOB_BYTES the supervisor clears the outputs of the least recently seen parked labs until the
blobs hold at most ROOM_TO of it (`make_room`): a term's old labs never leave the labs in use without room."""
KEPT = "uploads/"  # the blobs a clearing keeps: the learner's own clips, so the lab's jobs can run again


def make_room(r: redis.Redis, cap: int, oldest_first: Callable[[list[str]], list[str]]) -> list[str]:
    """The supervisor's hook: while every lab's blobs together hold more than ROOM_AT of `cap` (MAX_BLOB_BYTES),
    clear the outputs of parked labs, least recently seen first (`oldest_first`, asked only when over), until they
    hold ROOM_TO of it. Their jobs, history and uploads stay; the lab's snapshot says when (`outputs_cleared`) and
    an output asked for answers 410 `output_cleared`. The labs cleared."""
    held = int(r.get(TOTAL) or 0)
    if cap <= 0 or held <= ROOM_AT * cap:
        return []
    cleared = []
    for lab in oldest_first(sorted(r.smembers(PARKED))):
        if held <= ROOM_TO * cap:
            break
        keys = [_index(lab), _used(lab), TOTAL, _client_of(r, lab), PARKED, key(lab, "meta")]
        freed = int(r.eval(_CLEAR, len(keys), *keys, lab, blob_key(lab, ""), KEPT, time.time()))
        if freed:
            held -= freed
            cleared.append(lab)
    return cleared


def cleared_at(r: redis.Redis, lab: str) -> float | None:
    """When `make_room` cleared this lab's outputs (None: never)."""
    at = r.hget(key(lab, "meta"), "outputs_cleared")
    return float(at) if at else None


def cleared_sentence(at: float) -> str:
    """What a learner reads about outputs `make_room` cleared at `at` (real time)."""
    day = time.strftime("%d %B %Y", time.gmtime(at)).lstrip("0")
    return (
        f"The videos this lab's earlier jobs wrote were cleared on {day} to make room for labs in use; the jobs and "
        "their history are kept. Send a job again to make a new one."
    )


def forget_lab(r: redis.Redis, lab: str) -> None:
    """Once the lab is out of `labs` (no store can land any more): delete its blobs and give their bytes
    back to the server's and its client's counts, in one step."""
    r.eval(_FORGET, 4, _used(lab), _index(lab), TOTAL, _client_of(r, lab), blob_key(lab, ""))


_RECOUNT = """#!lua flags=allow-oom
local server_bytes, live_labs = KEYS[1], KEYS[2]
local client_prefix = ARGV[1]
local total, clients = 0, {}
for _, lab in ipairs(redis.call('SMEMBERS', live_labs)) do
  local used = 0
  for _, size in ipairs(redis.call('HVALS', 'lab:' .. lab .. ':blobs')) do used = used + tonumber(size) end
  local counter = 'lab:' .. lab .. ':blob_bytes'
  if used > 0 or redis.call('EXISTS', counter) == 1 then redis.call('SET', counter, used) end
  total = total + used
  local who = redis.call('HGET', 'lab:' .. lab .. ':meta', 'client')
  if who then clients[who] = (clients[who] or 0) + used end
end
redis.call('SET', server_bytes, total)
for i = 3, #KEYS do
  if not clients[string.sub(KEYS[i], string.len(client_prefix) + 1)] then redis.call('DEL', KEYS[i]) end
end
for who, used in pairs(clients) do redis.call('SET', client_prefix .. who, used) end
return total
"""


def recount(r: redis.Redis) -> int:
    """Rebuild every byte counter (each live lab's, each client's, the server's) from the blob indexes of
    the labs in `labs`, in one atomic step; returns the server's total. A crash between a store and its
    count, or a restart from an AOF of another moment, can leave them wrong; this puts them right."""
    clients = list(r.scan_iter(match=CLIENT_PREFIX + "*", count=500))
    return int(r.eval(_RECOUNT, 2 + len(clients), TOTAL, LABS, *clients, CLIENT_PREFIX))


def cache_path(var_dir: Path, lab: str, name: str) -> Path:
    return lab_dir(var_dir, lab) / "cache" / name


def remove_partials(folders: list[Path], pattern: str, older_than: float | None = None) -> int:
    """Remove the files named like `pattern` in `folders` (a killed or failed attempt's `.tmp-*` outputs); with
    `older_than`, only files untouched that long. A folder removed while it is read (its lab reset, deleted or
    moved to another host) is simply gone: nothing of it is left to remove."""
    removed = 0
    for folder in folders:
        for entry in _entries(folder):
            if not fnmatch(entry.name, pattern):
                continue
            try:
                if older_than is None or time.time() - entry.stat().st_mtime > older_than:
                    os.unlink(entry.path)
                    removed += 1
            except OSError:  # gone meanwhile, or not a file: nothing to remove
                pass
    return removed


def subfolders(folder: Path) -> list[Path]:
    """The folders in `folder`, none if it is gone (or goes while it is read)."""
    return [Path(e.path) for e in _entries(folder) if e.is_dir(follow_symlinks=False)]


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as found:
            return list(found)
    except (FileNotFoundError, NotADirectoryError):
        return []


def local_path(r: redis.Redis, lab: str, source: str, var_dir: Path) -> Path:
    """A file this host can hand to ffmpeg: a plain path as is, a blob through the local cache.

    Blob names are never reused for different bytes (uploads get random names), so a cached copy
    stays valid until the lab leaves this host. Raises FileNotFoundError if the blob is gone.
    """
    if not is_blob(source):
        return Path(source)
    name = source[len(PREFIX) :]
    path = cache_path(var_dir, lab, name)
    if path.is_file():
        return path
    data = get(r, lab, name)
    if data is None:
        raise FileNotFoundError(f"blob {name!r} of lab {lab} is gone")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def save(r: redis.Redis, lab: str, name: str, dest: Path) -> Path:
    """Write one blob to a local file (tests and drills probe outputs with ffmpeg); FileNotFoundError if gone."""
    data = get(r, lab, name)
    if data is None:
        raise FileNotFoundError(f"no blob {name!r} in lab {lab}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return dest
