"""The numbers model against the lesson's own published figures.

Every pinned number below is quoted from the prose of `seed/async-work-lesson.txt` (the comment
says where); the model computes it from inputs, so each test fails if a formula, a default or a
unit convention drifts. Further tests check that changing one input moves its dependants
consistently, that the exact Erlang C implementation matches brute force, and that
`inputs_from_mapping` refuses bad learner input.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from fractions import Fraction

import pytest

from chapters import derive, to_json
from core.numbers import (
    INPUT_SPECS,
    SPECS_BY_NAME,
    InputError,
    Inputs,
    approx_wait,
    erlang_b,
    erlang_c,
    erlang_c_wait,
    even_jobs_wait,
    inputs_from_mapping,
    jitter_peak_per_bucket,
    jitter_peak_reduction,
    littles_law_L,
    lookup,
    spec_values,
    workers_for_utilisation,
)


@pytest.fixture(scope="module")
def fig() -> dict:
    return derive(Inputs())


def _with(**changes) -> dict:
    return derive(inputs_from_mapping(changes))


def _row(rows: list[dict], **match) -> dict:
    return next(r for r in rows if all(r[k] == v for k, v in match.items()))


HTML_FLOAT = re.compile(r"^-?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")
"""A valid floating-point number as HTML parses an <input type=number> attribute."""


@pytest.mark.parametrize("spec", spec_values(), ids=lambda s: s["name"])
def test_every_input_default_is_valid_for_its_own_min_max_and_step(spec):
    """The What-if form renders value/min/max/step as written here (templates/_model_inputs.html); a browser
    counts steps from min, and one input off its grid holds the whole form invalid, so htmx sends nothing."""
    for attr in ("value", "min", "max", "step"):
        assert HTML_FLOAT.match(str(spec[attr])), f"{spec['name']}.{attr} renders as {spec[attr]!r}"
    value, lo, hi, step = (Fraction(str(spec[a])) for a in ("value", "min", "max", "step"))
    assert spec["value"] == spec["default"]
    assert step > 0 and lo + step <= hi, spec
    assert lo <= value <= hi, f"{spec['name']}: default {spec['value']} outside {spec['min']}…{spec['max']}"
    assert (value - lo) % step == 0, (
        f"{spec['name']}: default {spec['value']} is not min {spec['min']} plus a "
        f"whole number of steps of {spec['step']}"
    )
    if spec["kind"] == "int":
        assert lo.denominator == step.denominator == 1, f"{spec['name']}: a whole-number input with a fractional grid"


# --------------------------------------------------------------------------------------------
# The defaults are the lesson's stated inputs
# --------------------------------------------------------------------------------------------


def test_defaults_are_the_inputs_the_lesson_states():
    i = Inputs()
    t = i.job("transcode")
    assert i.arrival_rate == 100  # Ch2 "100 jobs/second"
    assert i.target_utilisation == 0.8  # Ch2 "ρ = 0.8"
    assert i.worker_price_per_hour == 0.02  # Ch2 "$0.02/worker-hour"
    assert i.transcode_price_per_hour == 0.04  # Ch1 "$0.04/worker-hour"
    assert i.pro_share == 0.10  # Ch6 "90 ... free tier and 10 from paying pro"
    assert (t.mean_s, t.p99_s) == (600, 900)  # Ch1 "600 seconds ... p99 up to 900 seconds"
    assert [j.mean_s for j in i.job_mix if j.name != "transcode"] == [5, 10, 15]  # Ch2 5 s/10 s/15 s
    assert i.visibility_timeout_s == 300 and i.fixed_visibility_timeout_s == 1200  # Ch1
    assert (i.heartbeat_interval_s, i.heartbeat_extend_s) == (60, 180)  # Ch1
    assert i.peak_multiplier == 1.8 and i.worker_boot_s == 90  # Ch2
    assert i.max_attempts == 5 and i.poison_rate == 0.001  # Ch4
    assert (i.task_p99_s, i.short_lock_ttl_s, i.lock_ttl_s, i.clock_skew_s) == (45, 30, 120, 2)  # Ch7
    assert i.users == 10_000_000 and i.shard_buckets == 1440  # Ch7
    assert i.demo_speed == 20  # Ch8 "roughly 20× real speed"


# --------------------------------------------------------------------------------------------
# Chapter 0 / 1
# --------------------------------------------------------------------------------------------


def test_a_ten_minute_transcode_does_not_fit_a_200_ms_api(fig):
    # closing line: "Ten minutes of transcoding behind a 200-millisecond API"
    assert fig["ch0"]["inline_transcode_s"] == 600
    assert fig["ch0"]["inline_over_budget_x"] == pytest.approx(600 / 0.2)


def test_one_percent_of_500k_transcodes_collide_5000_times_a_day(fig):
    assert fig["ch1"]["collisions_per_day"] == pytest.approx(5_000)


def test_each_collision_wastes_the_300_second_overlap_window(fig):
    # Ch1 "roughly the overlap window — 300 seconds of genuinely duplicated compute"
    assert fig["ch1"]["collision_overlap_s"] == pytest.approx(300)
    timeline = fig["ch1"]["redelivery_timeline"]
    assert [r["t_s"] for r in timeline] == [0, 300, 300, 600, 900]


def test_redelivery_waste_is_about_500_dollars_a_month(fig):
    # Ch1 "Five hundred dollars a month"; the lesson's 30-day month gives exactly 500, the model's
    # 730-hour month (the one behind $54,750) gives ~$507 — "roughly" either way.
    assert fig["ch1"]["redelivery_waste_usd_per_day"] * 30 == pytest.approx(500)
    assert fig["ch1"]["redelivery_waste_usd_per_month"] == pytest.approx(500, rel=0.02)


def test_a_vt_above_the_p99_stops_the_collision():
    f = _with(visibility_timeout_s=1200)
    assert f["ch1"]["vt_covers_p99"] is True
    assert f["ch1"]["collisions_per_day"] == 0
    assert f["ch1"]["redelivery_waste_usd_per_month"] == 0


def test_static_vt_of_1200s_leaves_a_crash_undetected_for_twenty_minutes(fig):
    assert fig["ch1"]["fixed_vt_crash_detection_min"] == pytest.approx(20)
    # Ch1 calls 1,200 s "roughly 2× the 900s p99"; arithmetically it is 2× the 600 s mean
    assert fig["ch1"]["fixed_vt_over_mean_x"] == pytest.approx(2)
    assert fig["ch1"]["fixed_vt_over_p99_x"] == pytest.approx(4 / 3)


def test_heartbeat_finds_a_crash_within_180s_three_missed_beats(fig):
    assert fig["ch1"]["heartbeat_crash_detection_s"] == 180
    assert fig["ch1"]["heartbeat_missed_beats"] == pytest.approx(3)
    assert fig["ch1"]["heartbeat_safe"] is True
    crash = _row(fig["ch1"]["heartbeat_timeline"], event="heartbeat lease expires → redelivered")
    assert crash["t_s"] == 180  # a crash at t = 10 s, before the first beat


def test_a_heartbeat_slower_than_its_extension_is_flagged_unsafe():
    assert _with(heartbeat_interval_s=200)["ch1"]["heartbeat_safe"] is False


def test_ack_early_loses_fifty_uploads_a_day(fig):
    # Ch1 "Fifty customers a day whose upload simply vanishes"
    assert fig["ch1"]["ack_early_lost_per_day"] == pytest.approx(50)
    assert _row(fig["ch1"]["delivery_guarantees"], guarantee="at-least-once")["lost_per_day"] == 0


def test_the_short_vt_covers_the_small_jobs_but_not_the_transcode(fig):
    rows = {r["job_type"]: r["vt_covers_p99"] for r in fig["ch1"]["vt_by_job_type"]}
    assert rows == {"thumbnail": True, "waveform": True, "preview": True, "transcode": False}


# --------------------------------------------------------------------------------------------
# Chapter 2
# --------------------------------------------------------------------------------------------


def test_the_mix_blends_to_a_30_second_w(fig):
    # Ch2 "holding the blended W = 30s fixed"
    assert fig["ch2"]["blended_duration_s"] == pytest.approx(30)
    assert sum(r["share"] for r in fig["ch2"]["job_mix"]) == pytest.approx(1)


def test_littles_law_puts_3000_jobs_in_flight(fig):
    assert fig["ch2"]["in_flight_jobs"] == pytest.approx(3_000)
    assert fig["ch2"]["workers_at_utilisation_1"] == 3_000


def test_3750_workers_hold_utilisation_at_0_8(fig):
    assert fig["ch2"]["workers_at_target"] == 3_750
    assert fig["ch2"]["utilisation_at_target"] == pytest.approx(0.8)


def test_the_pool_costs_54750_a_month(fig):
    assert fig["ch2"]["monthly_cost_usd"] == pytest.approx(54_750)


def test_cost_per_job_is_a_fraction_of_a_cent(fig):
    assert 0 < fig["ch2"]["cost_per_job_usd"] < 0.01
    assert fig["ch2"]["cost_per_job_usd"] == pytest.approx(54_750 / (100 * 3600 * 730))


def test_rho_0_8_gives_a_150_second_wait(fig):
    assert fig["ch2"]["queue_wait_s"] == pytest.approx(150)


def test_wait_drops_from_150s_to_60s_going_to_6000_workers(fig):
    curve = fig["ch2"]["wait_curve"]
    at_3750, at_6000 = _row(curve, workers=3750), _row(curve, workers=6000)
    assert at_3750["approx_wait_s"] == pytest.approx(150)
    assert at_6000["approx_wait_s"] == pytest.approx(60)
    # "a 90-second improvement"
    assert at_3750["approx_wait_s"] - at_6000["approx_wait_s"] == pytest.approx(90)


def test_the_next_jump_to_10000_workers_has_diminishing_returns(fig):
    curve = fig["ch2"]["wait_curve"]
    w = {r["workers"]: r["approx_wait_s"] for r in curve}
    assert w[6000] - w[10000] < w[3750] - w[6000]
    assert _row(curve, workers=3000)["approx_wait_s"] is None  # ρ = 1: "latency stops being a number"


def test_the_wait_curve_bends_upward_as_rho_nears_one(fig):
    finite = [r for r in fig["ch2"]["wait_curve"] if r["approx_wait_s"] is not None]
    finite.sort(key=lambda r: r["rho"])
    waits = [r["approx_wait_s"] for r in finite]
    assert waits == sorted(waits)


def test_exact_mmc_wait_is_far_below_the_lessons_approximation_at_3750_workers(fig):
    # the lesson's W/(1−ρ) is the single-server curve; 3,750 pooled servers barely queue at all
    assert fig["ch2"]["mmc_wait_at_target_s"] < 1e-6
    assert fig["ch2"]["mmc_p_wait_at_target"] < 1e-6
    for row in fig["ch2"]["wait_curve"]:
        if row["approx_wait_s"] is not None:
            assert row["mmc_wait_s"] <= row["approx_wait_s"]


def test_peak_of_1_8x_needs_5400_in_flight_and_6750_workers(fig):
    assert fig["ch2"]["peak_arrival_rate"] == pytest.approx(180)  # "peak arrival rate of 180/s"
    assert fig["ch2"]["peak_in_flight_jobs"] == pytest.approx(5_400)
    assert fig["ch2"]["peak_workers"] == 6_750


def test_the_average_pool_at_peak_runs_at_rho_1_44(fig):
    assert fig["ch2"]["peak_utilisation_on_average_pool"] == pytest.approx(1.44)
    assert fig["ch2"]["peak_wait_on_average_pool_s"] is None


def test_a_90s_boot_lets_the_queue_grow_at_the_full_peak_rate(fig):
    assert fig["ch2"]["autoscale_backlog_jobs"] == pytest.approx(180 * 90)


def test_autoscaling_only_the_peak_costs_less_than_peak_capacity_all_day(fig):
    c = fig["ch2"]
    assert c["monthly_cost_usd"] < c["autoscaled_monthly_cost_usd"] < c["peak_monthly_cost_usd"]
    assert c["peak_monthly_cost_usd"] == pytest.approx(6_750 * 0.02 * 730)


# --------------------------------------------------------------------------------------------
# Chapter 3
# --------------------------------------------------------------------------------------------


def test_two_second_polling_is_1500_requests_a_second(fig):
    assert fig["ch3"]["polls_per_s"] == pytest.approx(1_500)


def test_polling_is_15x_the_completion_rate(fig):
    assert fig["ch3"]["completions_per_s"] == pytest.approx(100)
    assert fig["ch3"]["polls_per_completion"] == pytest.approx(15)


def test_webhooks_cut_the_status_path_to_100_a_second_a_flat_15x(fig):
    assert fig["ch3"]["webhook_requests_per_s"] == pytest.approx(100)
    assert fig["ch3"]["webhook_reduction_x"] == pytest.approx(15)


def test_widening_the_poll_interval_improves_the_ratio_but_costs_latency(fig):
    rows = sorted(fig["ch3"]["poll_interval_table"], key=lambda r: r["interval_s"])
    ratios = [r["polls_per_completion"] for r in rows]
    delays = [r["mean_delay_to_learn_s"] for r in rows]
    assert ratios == sorted(ratios, reverse=True) and delays == sorted(delays)


def test_websockets_for_3000_watched_jobs_at_10kb_each_take_30mb(fig):
    assert fig["ch3"]["websocket_connections"] == pytest.approx(3_000)
    assert fig["ch3"]["websocket_memory_mb"] == pytest.approx(3_000 * 10_000 / 1e6)


def test_long_polling_learns_within_500ms(fig):
    assert fig["ch3"]["long_poll_delay_to_learn_s"] == pytest.approx(0.5)
    assert fig["ch3"]["long_poll_requests_per_s"] < fig["ch3"]["polls_per_s"]


def test_most_polls_return_304_not_modified(fig):
    # "the overwhelming majority returning 'nothing changed'"
    assert fig["ch3"]["etag_unchanged_fraction"] == pytest.approx(1 - 100 / 1500)


def test_the_last_state_transition_done_to_running_is_invalid(fig):
    rows = fig["ch3"]["state_transitions"]
    assert (rows[-1]["from"], rows[-1]["to"], rows[-1]["valid"]) == ("done", "running", False)
    assert all(r["valid"] for r in rows[:-1])


# --------------------------------------------------------------------------------------------
# Chapter 4
# --------------------------------------------------------------------------------------------


def test_without_jitter_all_1000_workers_retry_at_1_3_and_7_seconds(fig):
    schedule = fig["ch4"]["retry_schedule"]
    assert [r["herd_retry_at_s"] for r in schedule[:3]] == [1, 3, 7]
    assert fig["ch4"]["no_jitter_peak_per_bucket"] == 1_000
    assert fig["ch4"]["herd_spikes_during_outage"] == 3  # the 10 s outage is still on at t = 7 s


def test_full_jitter_spreads_1000_retries_to_10_per_10ms_bucket(fig):
    assert fig["ch4"]["jitter_buckets"] == pytest.approx(100)
    assert fig["ch4"]["full_jitter_peak_per_bucket"] == pytest.approx(10)


def test_full_jitter_cuts_the_peak_by_roughly_100x(fig):
    assert fig["ch4"]["jitter_peak_reduction_x"] == pytest.approx(100)


def test_jitter_arithmetic_helpers():
    assert jitter_peak_per_bucket(1000, 1.0, 0.01) == pytest.approx(10)
    assert jitter_peak_reduction(4.0, 0.01) == pytest.approx(400)
    assert jitter_peak_reduction(0.001, 0.01) == 1  # a window narrower than a bucket cannot help


def test_poison_pills_at_0_1_percent_are_8640_a_day(fig):
    assert fig["ch4"]["poison_pills_per_day"] == pytest.approx(8_640)


def test_uncapped_poison_pills_outgrow_the_pool_in_a_day(fig):
    assert fig["ch4"]["poison_uncapped_slots_after_day"] > fig["ch2"]["workers_at_target"]


def test_the_backoff_schedule_sums_to_31_seconds(fig):
    # Ch4 "roughly 31 seconds of backoff schedule" = 1 + 2 + 4 + 8 + 16
    assert fig["ch4"]["backoff_schedule_total_s"] == pytest.approx(31)


def test_exponential_reaches_16s_where_linear_reaches_10s_by_attempt_5(fig):
    assert fig["ch4"]["exponential_last_delay_s"] == pytest.approx(16)
    assert fig["ch4"]["linear_last_delay_s"] == pytest.approx(10)
    # "land at nearly the same total wait by attempt 5"
    assert abs(fig["ch4"]["linear_schedule_total_s"] - fig["ch4"]["backoff_schedule_total_s"]) <= 2


def test_hanging_attempts_take_over_five_minutes_to_fail_on_a_count_cap(fig):
    assert fig["ch4"]["hang_time_to_dlq_count_only_min"] > 5


def test_a_two_minute_budget_fails_the_hanging_job_sooner(fig):
    c = fig["ch4"]
    assert c["hang_time_to_dlq_with_budget_s"] < c["hang_time_to_dlq_count_only_s"]
    assert c["hang_time_to_dlq_with_budget_s"] <= c["retry_budget_s"] + c["hang_attempt_s"]
    assert c["hang_attempts_with_budget"] < Inputs().max_attempts


def test_a_malformed_input_costs_one_attempt_instead_of_five(fig):
    assert fig["ch4"]["poison_attempts_per_pill"] == 5
    assert fig["ch4"]["non_retryable_attempts_saved"] == 4


# --------------------------------------------------------------------------------------------
# Chapter 5
# --------------------------------------------------------------------------------------------


def test_the_worst_duplicate_gap_is_vt_plus_p99_rounded_to_one_hour(fig):
    assert fig["ch5"]["worst_case_duplicate_gap_s"] == pytest.approx(1_200 + 900)
    assert fig["ch5"]["dedup_window_s"] == pytest.approx(3_600)


def test_an_hour_of_idempotency_keys_is_about_36mb(fig):
    assert fig["ch5"]["keys_in_window"] == pytest.approx(360_000)
    assert fig["ch5"]["key_store_mb"] == pytest.approx(36)


def test_a_mobile_client_retrying_after_forty_minutes_is_still_caught(fig):
    assert fig["ch5"]["offline_retry_caught"] is True
    assert _with(offline_client_retry_s=4000)["ch5"]["offline_retry_caught"] is False


def test_a_different_vt_or_p99_changes_the_dedup_window():
    assert _with(transcode_p99_s=3000)["ch5"]["dedup_window_s"] == pytest.approx(2 * 3600)


# --------------------------------------------------------------------------------------------
# Chapter 6
# --------------------------------------------------------------------------------------------


def test_the_100_per_second_splits_90_free_10_pro(fig):
    assert fig["ch6"]["free_arrival_rate"] == pytest.approx(90)
    assert fig["ch6"]["pro_arrival_rate"] == pytest.approx(10)


def test_shared_fifo_makes_pro_wait_the_same_150s(fig):
    fifo = _row(fig["ch6"]["fairness_strategies"], strategy="shared FIFO")
    assert fifo["pro_wait_s"] == pytest.approx(150) and fifo["free_wait_s"] == pytest.approx(150)


def test_reserving_1000_workers_drops_pro_wait_to_42_9s(fig):
    assert fig["ch6"]["pro_split_wait_s"] == pytest.approx(42.9, abs=0.05)


def test_the_hard_split_balloons_free_wait_to_27_5_minutes(fig):
    assert fig["ch6"]["free_workers"] == 2_750
    assert fig["ch6"]["free_split_wait_min"] == pytest.approx(27.5)


def test_weighted_polling_guarantees_free_30_percent_of_slots(fig):
    assert fig["ch6"]["weighted_free_floor"] == pytest.approx(0.3)


def test_strict_priority_starves_free_only_once_pro_saturates_the_pool(fig):
    # the pool serves 3,750 / 30 s = 125 jobs/s; pro's 10/s must grow 12.5× before free starves
    assert fig["ch6"]["strict_pro_saturation_rate"] == pytest.approx(3750 / 30)
    assert fig["ch6"]["strict_pro_growth_to_starve_x"] == pytest.approx(12.5)
    assert fig["ch6"]["strict_free_starves_in_spike"] is False
    assert _with(pro_share=0.5, spike_multiplier=3)["ch6"]["strict_free_starves_in_spike"] is True


def test_aging_caps_free_wait_at_300s(fig):
    assert fig["ch6"]["aging_max_free_wait_s"] == 300


def test_round_robin_puts_at_most_9_jobs_ahead_instead_of_500(fig):
    assert fig["ch6"]["round_robin_max_jobs_ahead"] == 9
    assert fig["ch6"]["fifo_worst_jobs_ahead"] == 500


def test_a_2x_spike_leaves_pro_under_its_reservation_and_free_past_saturation(fig):
    pro, free = fig["ch6"]["spike_split"]
    assert pro["tier"] == "pro" and pro["rho"] < 1 and pro["approx_wait_s"] is not None
    assert free["tier"] == "free" and free["rho"] > 1 and free["approx_wait_s"] is None


def test_the_pro_reservation_costs_a_small_fraction_of_pro_revenue(fig):
    assert fig["ch6"]["pro_reservation_cost_to_revenue"] < 0.1


def test_a_42_9s_mean_carries_a_p99_several_multiples_higher(fig):
    assert fig["ch6"]["pro_split_p99_wait_approx_s"] / fig["ch6"]["pro_split_wait_s"] > 3


# --------------------------------------------------------------------------------------------
# Chapter 7
# --------------------------------------------------------------------------------------------


def test_ten_replicas_without_a_lock_run_ten_times_and_send_ten_emails(fig):
    assert fig["ch7"]["no_lock_runs_per_tick"] == 10
    assert fig["ch7"]["no_lock_emails_per_user"] == 10
    assert fig["ch7"]["replicas_skipping_with_lock"] == 9  # "the other nine see the lock"


def test_a_30s_ttl_expires_before_the_45s_task_finishes(fig):
    assert fig["ch7"]["short_ttl_overlap_s"] == pytest.approx(45 - 30)
    assert fig["ch7"]["short_ttl_max_concurrent_runs"] == 2


def test_a_120s_ttl_is_nearly_3x_the_45s_p99(fig):
    assert 2.5 < fig["ch7"]["lock_ttl_over_p99_x"] < 3


def test_73_seconds_of_margin_remain_after_a_2s_skew(fig):
    assert fig["ch7"]["lock_margin_after_skew_s"] == pytest.approx(73)


def test_1440_minute_buckets_spread_10m_users_to_115_7_jobs_a_second(fig):
    assert fig["ch7"]["bucket_s"] == pytest.approx(60)
    assert fig["ch7"]["bucket_jobs_per_s"] == pytest.approx(115.7, abs=0.05)


def test_the_sustained_rate_is_identical_at_every_bucket_granularity(fig):
    rates = [r["rate_per_s"] for r in fig["ch7"]["bucket_count_table"]]
    assert rates == pytest.approx([10_000_000 / 86_400] * len(rates))


def test_timeout_reference_rows_all_sit_above_their_worst_case(fig):
    rows = {r["timeout"]: r for r in fig["ch7"]["timeout_reference"]}
    assert rows["visibility timeout"]["value_s"] == 1200 and rows["dedup window"]["value_s"] == 3600
    assert all(r["margin_s"] > 0 for r in rows.values())


# --------------------------------------------------------------------------------------------
# Chapter 8
# --------------------------------------------------------------------------------------------


def test_the_vt_bug_costs_about_one_percent_of_the_pool_bill(fig):
    assert fig["ch8"]["redelivery_share_of_pool"] == pytest.approx(0.01, abs=0.002)


def test_the_demo_replays_a_twenty_minute_cycle_at_20x(fig):
    assert fig["ch8"]["demo_fixed_vt_real_s"] == pytest.approx(20 * 60 / 20)


def test_the_cost_rollup_totals_its_rows(fig):
    rows = fig["ch8"]["cost_rollup"]
    assert _row(rows, item="worker pool at target ρ")["monthly_usd"] == pytest.approx(54_750)
    total = sum(r["monthly_usd"] for r in rows if r["monthly_usd"] is not None)
    assert fig["ch8"]["cost_rollup_total_usd_per_month"] == pytest.approx(total)


def test_the_dashboard_has_one_row_per_chapter(fig):
    assert [r["chapter"] for r in fig["ch8"]["dashboard"]] == list(range(9))


def test_the_checklist_asks_one_question_per_chapter(fig):
    rows = fig["ch8"]["checklist"]
    assert [r["chapter"] for r in rows] == list(range(9))
    assert _row(rows, chapter=1)["ok"] is False  # the misconfigured 300 s VT
    assert _row(rows, chapter=7)["ok"] is True


def test_every_input_in_the_five_inputs_table_feeds_real_figures(fig):
    rows = fig["ch8"]["inputs_table"]
    assert len(rows) == 5
    for row in rows:
        for key in row["feeds"]:
            lookup(fig, key)  # raises KeyError on a stale key


# --------------------------------------------------------------------------------------------
# Changing one input recomputes its dependants
# --------------------------------------------------------------------------------------------


def test_doubling_lambda_doubles_in_flight_workers_cost_polls_poison_and_keys(fig):
    f2 = _with(arrival_rate=200)
    for key in [
        "ch2.in_flight_jobs",
        "ch2.workers_at_target",
        "ch2.monthly_cost_usd",
        "ch3.polls_per_s",
        "ch3.websocket_memory_mb",
        "ch4.poison_pills_per_day",
        "ch5.key_store_mb",
        "ch6.pro_revenue_usd_per_month",
    ]:
        assert lookup(f2, key) == pytest.approx(2 * lookup(fig, key)), key
    assert f2["ch2"]["queue_wait_s"] == pytest.approx(fig["ch2"]["queue_wait_s"])
    assert f2["ch3"]["polls_per_completion"] == pytest.approx(fig["ch3"]["polls_per_completion"])


def test_a_lower_target_rho_buys_more_workers_and_less_wait(fig):
    f = _with(target_utilisation=0.5)
    assert f["ch2"]["workers_at_target"] == 6_000
    assert f["ch2"]["queue_wait_s"] == pytest.approx(60)
    assert f["ch6"]["free_workers"] == 6_000 - 1_000


def test_worker_price_scales_the_monthly_bill_linearly(fig):
    f = _with(worker_price_per_hour=0.04)
    assert f["ch2"]["monthly_cost_usd"] == pytest.approx(2 * fig["ch2"]["monthly_cost_usd"])
    assert f["ch2"]["workers_at_target"] == fig["ch2"]["workers_at_target"]


def test_a_longer_transcode_raises_w_and_every_pool_figure(fig):
    f = _with(transcode_mean_s=900)
    assert f["ch2"]["blended_duration_s"] == pytest.approx(30 + 0.04 * 300)
    assert f["ch2"]["workers_at_target"] > fig["ch2"]["workers_at_target"]
    assert f["ch1"]["collision_overlap_s"] == pytest.approx(600)


def test_changing_one_share_renormalises_the_mix():
    f = _with(transcode_share_pct=0)
    assert sum(r["share"] for r in f["ch2"]["job_mix"]) == pytest.approx(1)
    assert f["ch2"]["blended_duration_s"] == pytest.approx((80 * 5 + 8 * 10 + 8 * 15) / 96)


def test_a_bigger_pro_share_slows_the_reserved_pro_pool(fig):
    f = _with(pro_share=0.2)
    assert f["ch6"]["pro_arrival_rate"] == pytest.approx(20)
    assert f["ch6"]["pro_split_wait_s"] > fig["ch6"]["pro_split_wait_s"]


def test_more_shard_buckets_shrink_each_tick_but_not_the_rate(fig):
    f = _with(shard_buckets=86_400)
    assert f["ch7"]["users_per_bucket"] < fig["ch7"]["users_per_bucket"]
    assert f["ch7"]["bucket_jobs_per_s"] == pytest.approx(fig["ch7"]["bucket_jobs_per_s"])


# --------------------------------------------------------------------------------------------
# Helper formulas and Erlang C
# --------------------------------------------------------------------------------------------


def _erlang_c_brute_force(c: int, a: float) -> float:
    """Textbook Erlang C with factorials — fine for small c."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def _erlang_c_log_space(c: int, a: float) -> float:
    """Erlang C in log space (lgamma + log-sum-exp): an independent check for c in the thousands."""
    logs = [k * math.log(a) - math.lgamma(k + 1) for k in range(c)]
    log_top = c * math.log(a) - math.lgamma(c + 1) + math.log(c / (c - a))
    m = max(max(logs), log_top)
    denom = sum(math.exp(x - m) for x in logs) + math.exp(log_top - m)
    return math.exp(log_top - m) / denom


def test_littles_law_and_pool_sizing_helpers():
    assert littles_law_L(100, 30) == 3000
    assert workers_for_utilisation(100, 30, 0.8) == 3750
    assert workers_for_utilisation(10, 30, 0.9) == 334  # 333.3… rounds up, never down
    with pytest.raises(ValueError):
        workers_for_utilisation(100, 30, 0)


def test_approx_wait_is_w_over_one_minus_rho_and_unbounded_at_one():
    assert approx_wait(30, 0.5) == pytest.approx(60)
    assert approx_wait(30, 1.0) == math.inf


@pytest.mark.parametrize("c,a", [(1, 0.5), (2, 1.5), (3, 0.3), (5, 4.2), (10, 7.0), (20, 19.5), (30, 12.0)])
def test_erlang_c_agrees_with_brute_force_for_small_c(c, a):
    assert erlang_c(c, a) == pytest.approx(_erlang_c_brute_force(c, a), rel=1e-9)


@pytest.mark.parametrize("c,a", [(3750, 3700.0), (3158, 3000.0), (2750, 2700.0), (5000, 4990.0)])
def test_erlang_c_stays_accurate_for_thousands_of_servers(c, a):
    assert erlang_c(c, a) == pytest.approx(_erlang_c_log_space(c, a), rel=1e-7)


def test_erlang_b_matches_its_definition_for_small_c():
    a, c = 3.0, 4
    expected = (a**c / math.factorial(c)) / sum(a**k / math.factorial(k) for k in range(c + 1))
    assert erlang_b(c, a) == pytest.approx(expected)


def test_one_server_erlang_c_is_the_mm1_queue():
    lam, s = 0.8, 1.0  # ρ = 0.8
    assert erlang_c_wait(lam, s, 1) == pytest.approx(0.8 * s / (1 - 0.8))
    # the lesson's W/(1−ρ) is exactly the M/M/1 time in system: queue wait + service
    assert approx_wait(s, 0.8) == pytest.approx(erlang_c_wait(lam, s, 1) + s)


def test_even_jobs_wait_half_as_long_one_server_exactly_pollaczek_khinchine():
    """M/D/1 is exact (Pollaczek–Khinchine: half the M/M/1 wait); for the lab's four workers, about half Erlang C."""
    assert even_jobs_wait(0.8, 1.0, 1) == pytest.approx(erlang_c_wait(0.8, 1.0, 1) / 2)
    ratio = even_jobs_wait(0.8 * 4 / 30, 30, 4) / erlang_c_wait(0.8 * 4 / 30, 30, 4)
    assert 0.5 < ratio < 0.55
    assert math.isinf(even_jobs_wait(1.0, 1.0, 1))


def test_erlang_c_wait_falls_as_servers_are_added_and_is_unbounded_when_saturated():
    waits = [erlang_c_wait(100, 30, c) for c in (3010, 3050, 3100, 3200)]
    assert waits == sorted(waits, reverse=True)
    assert erlang_c_wait(100, 30, 3000) == math.inf


# --------------------------------------------------------------------------------------------
# Specs, validation and JSON
# --------------------------------------------------------------------------------------------


def test_every_spec_is_well_formed_and_its_default_is_in_range():
    defaults = Inputs().flat()
    assert set(defaults) == set(SPECS_BY_NAME)
    for spec in INPUT_SPECS:
        assert spec.min < spec.max and spec.step > 0 and spec.kind in ("int", "float"), spec.name
        assert spec.min <= defaults[spec.name] <= spec.max, spec.name


def test_inputs_from_mapping_applies_scalars_and_job_mix_values():
    i = inputs_from_mapping({"arrival_rate": "150", "transcode_p99_s": 1200, "max_attempts": 3.0})
    assert i.arrival_rate == 150.0 and i.max_attempts == 3 and isinstance(i.max_attempts, int)
    assert i.job("transcode").p99_s == 1200 and i.job("transcode").mean_s == 600


def test_inputs_from_mapping_rejects_unknown_names():
    with pytest.raises(InputError) as err:
        inputs_from_mapping({"lambda": 100})
    assert err.value.errors == {"lambda": "unknown input"}


@pytest.mark.parametrize("bad", ["abc", None, [1], {"v": 1}, True, float("nan"), float("inf")])
def test_inputs_from_mapping_rejects_values_of_the_wrong_type(bad):
    with pytest.raises(ValueError) as err:
        inputs_from_mapping({"arrival_rate": bad})
    assert "arrival_rate" in err.value.args[0]


def test_inputs_from_mapping_rejects_out_of_range_and_fractional_ints_all_at_once():
    with pytest.raises(InputError) as err:
        inputs_from_mapping({"target_utilisation": 1.2, "arrival_rate": -5, "max_attempts": 2.5})
    assert set(err.value.errors) == {"target_utilisation", "arrival_rate", "max_attempts"}
    assert "between" in err.value.errors["target_utilisation"]
    assert "whole number" in err.value.errors["max_attempts"]


def test_inputs_from_mapping_rejects_a_p99_below_the_mean():
    with pytest.raises(InputError) as err:
        inputs_from_mapping({"transcode_p99_s": 100})
    assert set(err.value.errors) == {"transcode_p99_s"}


def test_inputs_from_mapping_rejects_a_mix_with_no_traffic():
    zero = {f"{n}_share_pct": 0 for n in ("thumbnail", "waveform", "preview", "transcode")}
    with pytest.raises(InputError) as err:
        inputs_from_mapping(zero)
    assert "job_mix" in err.value.errors


def test_inputs_are_frozen_and_validated_on_construction():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Inputs().arrival_rate = 5  # type: ignore[misc]
    with pytest.raises(InputError):
        Inputs(target_utilisation=0)


def test_to_json_round_trips_through_inputs_from_mapping():
    original = inputs_from_mapping({"arrival_rate": 250, "pro_share": 0.25})
    body = to_json(original)
    payload = {k: v for k, v in body["inputs"].items() if k != "job_mix"}
    assert inputs_from_mapping(payload) == original
    assert {s["name"] for s in body["specs"]} == set(SPECS_BY_NAME)
    assert _row(body["specs"], name="arrival_rate")["default"] == 100


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"arrival_rate": 1000, "target_utilisation": 0.99, "pro_reserved_workers": 1_000_000},
        {"peak_multiplier": 5, "spike_multiplier": 10, "pro_share": 1, "visibility_timeout_s": 43_200},
    ],
)
def test_figures_stay_strict_json_even_when_queues_are_unbounded(changes):
    json.dumps(to_json(inputs_from_mapping(changes)), allow_nan=False)
