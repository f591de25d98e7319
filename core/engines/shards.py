"""Chapter 7's minute buckets: a stable hash spreads a daily job over the day's ticks.

Stable means the same user always lands in the same bucket, so nobody's digest wanders from day to
day; SHA-256 is more than uniform enough, and unlike `user_id % buckets` it does not cluster when
ids are allocated in steps (the burst the sharding was meant to remove, back in miniature).
"""

from __future__ import annotations

import hashlib


def bucket_for_user(user_id: int | str, num_buckets: int = 1440) -> int:
    """The lesson's hash, verbatim: SHA-256 of the id, modulo the bucket count."""
    return int(hashlib.sha256(str(user_id).encode()).hexdigest(), 16) % num_buckets


def users(n: int) -> list[int]:
    """The lab's users: ids 1..n, sequential as a database hands them out."""
    return list(range(1, n + 1))


def due_users(tick: int, all_users: list[int], buckets: int, shard: bool) -> list[int]:
    """Who a tick mails: its own bucket when sharded; everyone on the day's first tick when not."""
    bucket = tick % buckets
    if shard:
        return [u for u in all_users if bucket_for_user(u, buckets) == bucket]
    return list(all_users) if bucket == 0 else []


def bucket_sizes(ids: list[int | str], buckets: int) -> list[int]:
    sizes = [0] * buckets
    for u in ids:
        sizes[bucket_for_user(u, buckets)] += 1
    return sizes


def chi_square(sizes: list[int]) -> float:
    """Pearson's statistic against an even spread (df = buckets − 1)."""
    total = sum(sizes)
    if not sizes or total == 0:
        return 0.0
    expected = total / len(sizes)
    return sum((s - expected) ** 2 / expected for s in sizes)


def chi_square_critical(df: int, z: float = 3.09) -> float:
    """Upper critical value of χ²(df) by the Wilson–Hilferty approximation; z = 3.09 is the 0.1 % tail."""
    k = 2 / (9 * df)
    return df * (1 - k + z * k**0.5) ** 3
