"""Queueing formulas: Little's law, Erlang B/C, the M/M/1 approximation and full jitter's peaks.

Pure functions of numbers; an unbounded result (utilisation at or past 1) is ``math.inf``.
"""

from __future__ import annotations

import math

from core.numbers.inputs import JobType


def littles_law_L(lam: float, W: float) -> float:
    """Jobs in flight L = λW. Why: it converts an arrival rate and a mean duration into the
    concurrency every later figure is sized from (workers, open sockets, polling clients)."""
    return lam * W


def workers_for_utilisation(lam: float, W: float, rho: float) -> int:
    """Workers c so that utilisation L / c is at most `rho`. Why ceil: a fractional worker cannot
    be rented, and rounding down would run the pool hotter than the target. The tiny epsilon keeps
    exact lesson cases (3,000 / 0.8 = 3,750) from being pushed up by float rounding."""
    if not 0 < rho <= 1:
        raise ValueError("rho must be in (0, 1]")
    return max(1, math.ceil(littles_law_L(lam, W) / rho - 1e-9))


def approx_wait(W: float, rho: float) -> float:
    """The lesson's wait approximation W / (1 − ρ), transplanted from the M/M/1 queue.

    Why keep it: it is the lesson's own arithmetic (150 s at ρ = 0.8) and it shows the curve's
    shape. Caveat: for one server it is the exact M/M/1 *time in system* (wait + service), and for
    c parallel servers it overstates the wait enormously — compare `erlang_c_wait`.
    Returns ``math.inf`` at ρ ≥ 1: the queue grows without bound."""
    if rho >= 1:
        return math.inf
    return W / (1 - rho)


def erlang_b(c: int, offered_load: float) -> float:
    """Erlang B blocking probability for c servers and offered load a = λ·S, by the recursion
    B(k) = a·B(k−1) / (k + a·B(k−1)).

    Why this form: the textbook formula needs a^c / c!, which overflows for c in the thousands;
    the recursion only ever holds a probability. Two shortcuts keep it fast for large pools: it
    starts ~10σ below the load (starting error shrinks by ~e^-50 before k reaches a) and stops
    once B underflows (the wait is then 0 to double precision)."""
    if c < 0 or offered_load < 0:
        raise ValueError("c and offered_load must be ≥ 0")
    if offered_load == 0:
        return 0.0 if c > 0 else 1.0
    start = max(0, int(offered_load - 10 * math.sqrt(offered_load) - 10))
    b = 1.0
    for k in range(start + 1, c + 1):
        b = offered_load * b / (k + offered_load * b)
        if b < 1e-300:
            return 0.0
    return b


def erlang_c(c: int, offered_load: float) -> float:
    """Probability an arriving job has to wait in an M/M/c queue (Erlang C), from Erlang B:
    C = c·B / (c − a·(1 − B)). Why: it is the exact counterpart of the lesson's approximation."""
    if offered_load >= c:
        return 1.0
    b = erlang_b(c, offered_load)
    return c * b / (c - offered_load * (1 - b))


def erlang_c_wait(lam: float, mean_service: float, c: int) -> float:
    """Exact mean queue wait Wq of an M/M/c queue: C(c, a) · S / (c − a), with a = λ·S.

    Why: the lesson calls Erlang C "outside this lesson's scope"; the course shows it beside the
    approximation so learners see how much pooling c servers really buys. ``math.inf`` when
    a ≥ c (unstable queue)."""
    if c <= 0:
        return math.inf
    a = lam * mean_service
    if a >= c:
        return math.inf
    return erlang_c(c, a) * mean_service / (c - a)


def even_jobs_wait(lam: float, service: float, c: int) -> float:
    """Mean queue wait of an M/D/c queue (every job exactly `service` long), by Cosmetatos' approximation:
    ½ · Erlang C's wait · (1 + (1 − ρ)(c − 1)(√(4 + 5c) − 2) / (16ρc)).

    Why: the lab's "even" job times are deterministic, and their wait is about half the exponential one's;
    chapter 2 says so with this figure rather than "a little less". ``math.inf`` when unstable."""
    mmc = erlang_c_wait(lam, service, c)
    if not math.isfinite(mmc):
        return math.inf
    rho = lam * service / c
    return 0.5 * mmc * (1 + (1 - rho) * (c - 1) * (math.sqrt(4 + 5 * c) - 2) / (16 * rho * c))


def blended_duration(job_mix: tuple[JobType, ...]) -> float:
    """Little's W for a mix: the traffic-weighted mean duration. Why traffic-weighted: W is the
    mean time a job *arriving* spends in service, so each type counts by how often it arrives."""
    total = sum(jt.share_pct for jt in job_mix)
    return sum(jt.share_pct * jt.mean_s for jt in job_mix) / total


def jitter_peak_per_bucket(clients: int, window_s: float, bucket_s: float) -> float:
    """Expected retries landing in one histogram bucket when `clients` each pick a delay uniformly
    in [0, window_s] (full jitter). Why: it is the peak load a recovering dependency sees; without
    jitter all `clients` land in the same bucket."""
    buckets = max(1.0, window_s / bucket_s)
    return clients / buckets


def jitter_expected_peak(clients: int, window_s: float, bucket_s: float) -> float:
    """Expected count in the FULLEST bucket when `clients` draw uniformly over `window_s` (full jitter).
    Why: with tens of callers, not thousands, the busiest bucket sits well above the mean
    (jitter_peak_per_bucket); this is the peak a measured histogram should be compared with.
    Each bucket is Binomial(clients, 1/buckets); buckets are treated as independent."""
    buckets = max(1, round(window_s / bucket_s))
    if clients <= 0:
        return 0.0
    p = 1.0 / buckets
    cdf, term = [], (1 - p) ** clients
    acc = 0.0
    for k in range(clients + 1):
        acc += term
        cdf.append(min(1.0, acc))
        term = term * (clients - k) / (k + 1) * p / (1 - p) if p < 1 else 0.0
    return sum(1 - c**buckets for c in cdf)


def jitter_peak_reduction(window_s: float, bucket_s: float) -> float:
    """How many times lower the peak bucket is with full jitter than without (the lesson's 100×):
    the window divided into buckets, never below 1."""
    return max(1.0, window_s / bucket_s)
