"""Every chart draws the numbers model's values: the series agree with the figures the lesson states."""

import pytest

import chapters
from app import charts
from core import numbers


@pytest.fixture(scope="module")
def fig():
    return chapters.derive()


@pytest.fixture(scope="module")
def s(fig):
    return chapters.chart_series(numbers.Inputs(), fig)


def test_every_chart_the_chapters_draw_has_a_series_with_a_text_alternative_and_a_table(s):
    assert set(s) == {
        "redelivery_timeline",
        "heartbeat_vs_static_vt",
        "wait_vs_utilisation",
        "status_requests",
        "retry_herd",
        "jitter_first_wave",
        "tier_waits",
        "lock_timeline",
    }
    for chart in s.values():
        assert chart.summary and len(chart.table) >= 2
        assert chart.x_label


def test_the_wait_curve_is_the_models_wait_curve_150s_at_rho_0_8(s, fig):
    approx = {round(p.x, 2): p.y for p in next(x for x in s.wait_vs_utilisation.series if x.key == "approx").points}
    assert approx[0.8] == pytest.approx(150)  # the lesson: ρ = 0.8 → W/(1 − ρ) = 150 s
    exact = next(x for x in s.wait_vs_utilisation.series if x.key == "exact")
    rows = {r["rho"]: r["mmc_wait_s"] for r in fig["ch2"]["wait_curve"] if r["mmc_wait_s"] is not None}
    assert [p.y for p in exact.points] == [rows[p.x] for p in exact.points]
    assert max(p.y for p in exact.points) < 0.01  # the pool of thousands barely waits


def test_the_small_pool_curve_is_numbers_erlang_c_not_a_second_formula(s, fig):
    W = fig["ch2"]["blended_duration_s"]
    small = next(x for x in s.wait_vs_utilisation.series if x.key == "small")
    for p in small.points:
        c = chapters.ch2.SMALL_POOL_WORKERS
        assert p.y == pytest.approx(numbers.erlang_c_wait(p.x * c / W, W, c))


def test_the_pooling_table_matches_the_wait_curve_at_the_target(fig):
    rows = {r["workers"]: r for r in fig["ch2"]["pooling_table"]}
    one = rows[1]  # a single server: exact wait + job time is exactly W/(1 − ρ)
    assert one["mmc_time_in_system_s"] == pytest.approx(fig["ch2"]["queue_wait_s"])
    assert rows[fig["ch2"]["workers_at_target"]]["mmc_wait_s"] == fig["ch2"]["mmc_wait_at_target_s"]


def test_the_status_bars_are_1500_polls_against_100_webhooks(s):
    bars = {p.x: p.y for p in s.status_requests.series[0].points}
    assert bars["polling"] == 1500 and bars["webhook"] == 100


def test_the_herd_retries_at_1_3_and_7_seconds_and_recovers_at_15(s, fig):
    events = s.retry_herd.panels[0].lanes[0].events
    assert [(e.x, e.y) for e in events] == [(1, "fails"), (3, "fails"), (7, "fails"), (15, "succeeds")]
    assert fig["ch4"]["herd_waves_failing"] == 3 and fig["ch4"]["herd_recovery_wave"]["herd_retry_at_s"] == 15
    assert s.retry_herd.marks[0].end == fig["ch4"]["outage_s"] == 10


def test_full_jitter_is_10_per_bucket_against_1000_in_one(s, fig):
    jitter, spike = s.jitter_first_wave.series
    assert jitter.points[0].y == fig["ch4"]["full_jitter_peak_per_bucket"] == pytest.approx(10)
    assert spike.points[0].y == 1000 and spike.points[0].x == fig["ch4"]["jitter_window_s"]
    assert s.jitter_first_wave.y_cap is not None  # 1,000 is drawn cut off, or the band is a line


def test_the_tier_bars_are_the_models_waits(s, fig):
    pro, free = s.tier_waits.series
    assert pro.points[1].y == pytest.approx(fig["ch6"]["hard_split"][0]["approx_wait_s"])
    assert free.points[1].y == pytest.approx(1650)  # the free tier's 27.5 minutes under a hard split
    assert free.points[0].y == fig["ch6"]["fifo_wait_s"]


def test_the_redelivery_timeline_overlaps_for_the_300_second_window(s, fig):
    lanes = {ln.label: ln for ln in s.redelivery_timeline.panels[0].lanes}
    dup = lanes["Worker B"].spans[0]
    assert (dup.start, dup.end) == (300, 900)
    band = next(m for m in s.redelivery_timeline.marks if m.end is not None)
    assert band.end - band.x == fig["ch1"]["collision_overlap_s"] == 300


def test_the_heartbeat_finds_the_crash_at_180s_the_static_vt_at_1200s(s, fig):
    static, beat = s.heartbeat_vs_static_vt.panels[0].lanes
    assert static.spans[0].end == fig["ch1"]["fixed_vt_s"] == 1200
    assert beat.spans[0].end == fig["ch1"]["heartbeat_redelivered_at_s"] == 180


def test_the_short_lock_ttl_lets_two_copies_run_for_15s(s, fig):
    short, sized = s.lock_timeline.panels
    runs = [ln for ln in short.lanes if ln.label.startswith("replica")]
    assert len(runs) == 2 and runs[1].spans[0].start == fig["ch7"]["short_lock_ttl_s"] == 30
    overlap = next(m for m in short.marks if m.end is not None)
    assert overlap.end - overlap.x == 15
    assert all(m.end is None for m in sized.marks)  # the sized TTL: no overlap


@pytest.mark.parametrize(
    "inputs", [{}, {"visibility_timeout_s": 900}, {"arrival_rate": 1000}, {"max_attempts": 1}, {"outage_s": 0}]
)
def test_every_chart_lays_out_for_other_inputs(inputs):
    model = numbers.inputs_from_mapping(inputs)
    for chart in chapters.chart_series(model, chapters.derive(model)).values():
        d = charts.layout(chart)
        assert d["w"] == charts.WIDTH and d["h"] > 0


def test_nice_ticks():
    assert charts.nice_top(599.6, 6) == (600, 100)
    assert charts.nice_top(120, 8, "time") == (120, 15)
    assert charts.tick_label(0.4, 0.2) == "0.4"
