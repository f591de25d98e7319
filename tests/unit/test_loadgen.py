"""The load generator's arrival process, the autoscaler's rule and the timeout ordering check."""

from __future__ import annotations

import math
import statistics

import chapters
from core.engines import loadgen
from core.settings import DEFAULTS
from workers.engines import autoscale


def test_arrivals_are_poisson_at_lambda_with_the_lessons_mix():
    lam, n = 0.25, 20_000
    draws = [loadgen.draw(7, k, lam) for k in range(n)]
    gaps = [g for g, _ in draws]
    # exponential gaps: mean 1/λ and standard deviation 1/λ (coefficient of variation 1)
    assert abs(statistics.fmean(gaps) * lam - 1) < 4 / math.sqrt(n)
    assert abs(statistics.pstdev(gaps) / statistics.fmean(gaps) - 1) < 0.05
    # counts in fixed windows: Poisson, so variance ≈ mean (index of dispersion 1)
    t, window, counts, c = 0.0, 40.0, [], 0
    for g in gaps:
        t += g
        while t > window * (len(counts) + 1):
            counts.append(c)
            c = 0
        c += 1
    assert abs(statistics.fmean(counts) - lam * window) < 0.5
    assert 0.85 < statistics.pvariance(counts) / statistics.fmean(counts) < 1.15
    shares = {jt.name: sum(1 for _, j in draws if j.name == jt.name) / n for jt in loadgen.MIX}
    for jt in loadgen.MIX:
        p = jt.share_pct / 100
        assert abs(shares[jt.name] - p) < 4 * math.sqrt(p * (1 - p) / n), (jt.name, shares)


def test_draws_are_reproducible_from_the_seed():
    assert [loadgen.draw(3, k, 1.0) for k in range(5)] == [loadgen.draw(3, k, 1.0) for k in range(5)]
    assert loadgen.draw(3, 0, 1.0) != loadgen.draw(4, 0, 1.0)


def test_model_matches_the_lessons_figures():
    m = loadgen.model(100.0, 3750)
    assert m["W"] == 30.0 and m["L"] == 3000.0 and m["workers_for_target"] == 3750
    assert math.isclose(m["rho"], 0.8) and math.isclose(m["approx_wait"], 150.0)
    assert loadgen.model(180.0, 3750)["rho"] == 1.44  # the peak on the average pool
    assert loadgen.model(1.0, 10)["mmc_wait"] is None  # ρ = 3: unbounded


def test_autoscaler_uses_the_drain_time_rule():
    # backlog 20 × 30 s / 2 workers = 300 s > 150 s target → ceil(20 × 30 / 150) = 4
    assert autoscale.decide(20, 2, 0.1, 30.0, 150.0, 1)[0] == 4
    assert autoscale.decide(4, 2, 0.1, 30.0, 150.0, 1)[0] == 2  # 60 s drain: hold
    assert autoscale.decide(500, 2, 0.1, 30.0, 150.0, 1)[0] == autoscale.MAX_WORKERS
    # empty queue: shrink to what λ needs at ρ ≤ 0.8, never below the floor
    assert autoscale.decide(0, 6, 0.1, 30.0, 150.0, 1)[0] == 4
    assert autoscale.decide(0, 6, 0.0, 30.0, 150.0, 2)[0] == 2
    assert autoscale.decide(0, 3, 0.1, 30.0, 150.0, 1)[0] == 3  # already below what λ needs: hold


def test_timeout_ordering_flags_each_violation():
    ok = loadgen.timeout_ordering(chapters.settings_for("ch2"))
    assert ok["ok"], ok
    bad = loadgen.timeout_ordering({**DEFAULTS, "exec_timeout": 1300, "vt_seconds": 1200, "lock_ttl": 600})
    failed = {c["rule"] for c in bad["checks"] if not c["ok"]}
    assert failed == {"exec_timeout < vt_seconds", "vt_seconds < lock_ttl"}
    short = loadgen.timeout_ordering({**DEFAULTS, "exec_timeout": 300})
    assert [c["rule"] for c in short["checks"] if not c["ok"]] == ["exec_timeout ≥ slowest job's p99"]
    assert not loadgen.timeout_ordering({**DEFAULTS, "exec_timeout": 0})["ok"]


def test_the_even_mix_has_the_lessons_w_and_no_spread():
    even = loadgen.MIXES["even"]
    assert [jt.mean_s for jt in even] == [loadgen.MIX_W]
    draws = [loadgen.draw(3, k, 0.1, even) for k in range(200)]
    assert {jt.mean_s for _, jt in draws} == {loadgen.MIX_W}
    # the same arrival times as the lesson's mix from the same seed: only the job times differ
    assert [g for g, _ in draws] == [loadgen.draw(3, k, 0.1)[0] for k in range(200)]
    assert loadgen.model(0.1, 4, "even")["mmc_wait"] == loadgen.model(0.1, 4)["mmc_wait"]
