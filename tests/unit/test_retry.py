"""Retry delays: full jitter spreads retries over [0, min(cap, base·2^n)]."""

import random

from core.backoff import exponential_delay, full_jitter_delay
from core.broker.retry import retry_delay


def test_exponential_doubles_from_the_base_and_stops_at_the_cap():
    assert [exponential_delay(n, 1, 10) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_full_jitter_is_uniform_over_zero_to_the_exponential_bound():
    rng = random.Random(42)
    for n in (1, 3, 5):
        bound = exponential_delay(n, 2, 60)
        draws = [full_jitter_delay(n, 2, 60, rng) for _ in range(20000)]
        assert 0 <= min(draws) and max(draws) <= bound
        # each decile of [0, bound] holds ~10% of the draws (chi-square, 9 dof, p≈0.001 → 27.9)
        counts = [0] * 10
        for d in draws:
            counts[min(9, int(d / bound * 10))] += 1
        expected = len(draws) / 10
        chi2 = sum((c - expected) ** 2 / expected for c in counts)
        assert chi2 < 27.9, counts


def test_jitter_flattens_the_herd_a_fixed_schedule_creates():
    """1,000 clients failing together: exponential retries all land in one bucket; jitter spreads them."""
    rng = random.Random(1)
    no_jitter = [retry_delay("exponential", 4, 1, 60, rng) for _ in range(1000)]
    jitter = [retry_delay("full_jitter", 4, 1, 60, rng) for _ in range(1000)]

    def peak(delays, width=0.1):
        buckets: dict[int, int] = {}
        for d in delays:
            buckets[int(d / width)] = buckets.get(int(d / width), 0) + 1
        return max(buckets.values())

    assert peak(no_jitter) == 1000
    assert peak(jitter) < 100


def test_policy_none_never_retries_and_linear_grows_by_the_base():
    rng = random.Random(0)
    assert retry_delay("none", 1, 5, 60, rng) is None
    assert [retry_delay("linear", n, 5, 12, rng) for n in (1, 2, 3)] == [5, 10, 12]
    assert retry_delay("fixed", 9, 5, 60, rng) == 5
