"""Backoff: the one copy of the retry delay (exponential, and AWS's full jitter over it).

The broker's retry policy, the webhook deliverer, the numbers model's schedule tables and the chapter
labs' models all read these, so a lab, its page and its test cannot disagree about a wait.
"""

from __future__ import annotations

import random


def exponential_delay(n: int, base: float, cap: float) -> float:
    """base·2^(n−1), capped: attempt 1 failed → base, 2 → 2·base, …"""
    return min(cap, base * 2 ** (n - 1))


def full_jitter_delay(n: int, base: float, cap: float, rng: random.Random) -> float:
    """Uniform in [0, exponential_delay(n)] (AWS's 'full jitter')."""
    return rng.uniform(0, exponential_delay(n, base, cap))


RETRY_BARS_PER_WINDOW = 10  # bars a retry histogram splits full jitter's first-retry window into


def retry_bucket_s(base: float, cap: float) -> float:
    """A retry-arrivals histogram's bar, in simulated seconds, for a lab retrying on `base` and `cap`: a tenth
    of full jitter's first-retry window. Why: a fixed or unjittered wave (every caller at one instant) then
    fills one bar while full jitter spreads the same callers over ten; a bar as wide as the fixed policy's
    interval would hold one whole wave of either policy and hide the herd. The retries endpoint's default,
    the lab snapshot's `retry_bucket_s` (the widget's histogram) and chapter 4's page all read this."""
    return exponential_delay(1, base, cap) / RETRY_BARS_PER_WINDOW
