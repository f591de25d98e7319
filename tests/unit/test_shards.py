"""Chapter 7's shard hash: stable, and even across buckets (chi-square with a fixed seed)."""

import random

from core.engines import shards


def test_the_same_user_always_lands_in_the_same_bucket():
    """Pinned values: unlike Python's hash(), SHA-256 does not change between processes or releases."""
    assert [shards.bucket_for_user(u) for u in (1, 42, "alice")] == [75, 873, 1040]
    assert all(0 <= shards.bucket_for_user(u) < 1440 for u in range(1000))


def test_sha256_spreads_a_random_user_set_evenly_over_1440_buckets():
    ids = random.Random(7).sample(range(10**12), 14_400)  # ten users per bucket on average
    sizes = shards.bucket_sizes(ids, 1440)
    assert sum(sizes) == 14_400
    assert shards.chi_square(sizes) <= shards.chi_square_critical(1439)


def test_sequential_ids_spread_evenly_too():
    sizes = shards.bucket_sizes(shards.users(12_000), 12)
    assert shards.chi_square(sizes) <= shards.chi_square_critical(11)


def test_a_naive_modulo_clusters_ids_allocated_in_steps():
    """Ids handed out in steps of 10 (ten database shards interleaving) hit one bucket in ten."""
    ids = list(range(10, 144_010, 10))
    naive = [0] * 1440
    for u in ids:
        naive[u % 1440] += 1
    assert shards.chi_square(naive) > shards.chi_square_critical(1439)
    assert shards.chi_square(shards.bucket_sizes(ids, 1440)) <= shards.chi_square_critical(1439)


def test_the_chi_square_test_can_fail():
    lumpy = [20] * 720 + [0] * 720
    assert shards.chi_square(lumpy) > shards.chi_square_critical(1439)


def test_sharded_ticks_mail_each_user_once_a_day_and_unsharded_mails_everyone_at_once():
    everyone = shards.users(120)
    day = [shards.due_users(t, everyone, 12, True) for t in range(12)]
    assert sorted(u for tick in day for u in tick) == everyone
    assert max(map(len, day)) < 120
    burst = [shards.due_users(t, everyone, 12, False) for t in range(12)]
    assert [len(b) for b in burst] == [120] + [0] * 11


def test_the_critical_value_matches_the_table():
    # chi-square upper 0.1 % points: df 10 → 29.59, df 100 → 149.45
    assert abs(shards.chi_square_critical(10) - 29.59) < 0.3
    assert abs(shards.chi_square_critical(100) - 149.45) < 0.5
