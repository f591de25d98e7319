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
