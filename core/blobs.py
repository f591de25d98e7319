"""Blobs: uploads and outputs kept in the Redis-protocol server itself, so no host needs another's disk.

A pool host on another machine (or a second web process) needs nothing but the server URL: a job's
`source` names a blob (`blob:uploads/<random>.bin`), its outputs are blobs under the deterministic
names DESIGN.md fixes (`transcoded/{job_id}/{rendition}.mp4`). Local disk is only a cache: a worker
materialises a source once per host (`var/labs/<lab>/cache/…`), ffmpeg writes its temp file locally,
and the finished file is published with one SET (atomic: readers see all of it or nothing).

Caps, checked in the same Lua step that stores: each lab's blobs together (MAX_LAB_BYTES) and the
whole server's (MAX_BLOB_BYTES), so a classroom cannot fill the server's memory. Every blob key starts
with `lab:{id}:`, so the lab's teardown sweeps them with the rest; `forget_lab` gives the bytes back.
"""

from __future__ import annotations

import os
import uuid
from functools import lru_cache
from pathlib import Path

import redis
from redis.client import NEVER_DECODE

from core.keys import key

PREFIX = "blob:"  # a job `source` starting with this names a blob; anything else is a path on every host
TOTAL = "blobs:bytes"  # bytes of every lab's blobs on this server
CHUNK = 256 * 1024  # a non-atomic write goes out in pieces (a crash can leave a prefix, as a file would)

_PUT = """
local old = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local size = string.len(ARGV[2])
local new = size
if ARGV[5] == 'append' then new = old + size end
local lab_used = tonumber(redis.call('GET', KEYS[3]) or '0')
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
if lab_used - old + new > tonumber(ARGV[3]) then return -1 end
if total - old + new > tonumber(ARGV[4]) then return -2 end
if ARGV[5] == 'append' then redis.call('APPEND', KEYS[1], ARGV[2]) else redis.call('SET', KEYS[1], ARGV[2]) end
redis.call('HSET', KEYS[2], ARGV[1], new)
redis.call('INCRBY', KEYS[3], new - old)
redis.call('INCRBY', KEYS[4], new - old)
return new
"""

_DELETE = """
local old = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DECRBY', KEYS[3], old)
redis.call('DECRBY', KEYS[4], old)
return old
"""

_FORGET = """
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('DEL', KEYS[1], KEYS[2])
if used > 0 then redis.call('DECRBY', KEYS[3], used) end
return used
"""


class BlobFull(Exception):
    """A store would pass a cap; `scope` is "lab" or "server"."""

    def __init__(self, scope: str, cap: int):
        super().__init__(f"{scope} storage cap of {cap} bytes reached")
        self.scope, self.cap = scope, cap


@lru_cache(maxsize=1)
def caps() -> tuple[int, int]:
    """(per-lab cap, server-wide cap) from this process's configuration."""
    from core.config import Config

    cfg = Config.from_env()
    return cfg.max_lab_bytes, cfg.max_blob_bytes


def blob_key(lab: str, name: str) -> str:
    return key(lab, "blob", name)


def _index(lab: str) -> str:
    return key(lab, "blobs")  # hash: name → size


def _used(lab: str) -> str:
    return key(lab, "blob_bytes")


def is_blob(source: str) -> bool:
    return source.startswith(PREFIX)


def ref(name: str) -> str:
    return PREFIX + name


def put(r: redis.Redis, lab: str, name: str, data: bytes, append: bool = False) -> int:
    """Store (or append to) one blob within the caps; returns its size. Raises BlobFull."""
    lab_cap, server_cap = caps()
    res = int(r.eval(_PUT, 4, blob_key(lab, name), _index(lab), _used(lab), TOTAL,
                     name, data, lab_cap, server_cap, "append" if append else "set"))
    if res == -1:
        raise BlobFull("lab", lab_cap)
    if res == -2:
        raise BlobFull("server", server_cap)
    return res


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
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in m.items()}


def usage(r: redis.Redis, lab: str) -> int:
    """Bytes the lab's blobs take on the server (what MAX_LAB_BYTES caps)."""
    return int(r.get(_used(lab)) or 0)


def server_usage(r: redis.Redis) -> int:
    return int(r.get(TOTAL) or 0)


def delete(r: redis.Redis, lab: str, name: str) -> int:
    return int(r.eval(_DELETE, 4, blob_key(lab, name), _index(lab), _used(lab), TOTAL, name))


def copy(r: redis.Redis, src_lab: str, dst_lab: str, name: str) -> bool:
    """Copy one blob to another lab (a branch outlives its parent); False if the source is gone."""
    data = get(r, src_lab, name)
    if data is None:
        return False
    put(r, dst_lab, name, data)
    return True


def forget_lab(r: redis.Redis, lab: str) -> None:
    """Before a lab's keys are swept: give its bytes back to the server-wide count."""
    r.eval(_FORGET, 3, _used(lab), _index(lab), TOTAL)


def cache_path(var_dir: Path, lab: str, name: str) -> Path:
    from core.registry import lab_dir

    return lab_dir(var_dir, lab) / "cache" / name


def local_path(r: redis.Redis, lab: str, source: str, var_dir: Path) -> Path:
    """A file this host can hand to ffmpeg: a plain path as is, a blob through the local cache.

    Blob names are never reused for different bytes (uploads get random names), so a cached copy
    stays valid until the lab leaves this host. Raises FileNotFoundError if the blob is gone.
    """
    if not is_blob(source):
        return Path(source)
    name = source[len(PREFIX):]
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
