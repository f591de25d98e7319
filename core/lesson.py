"""The lesson's claims, each tied to the chapter section that makes it and the test that proves it.

Defined once, here: the conformance suite (tests/lesson/) names its tests after these rows and
records what the lab measured under each row's id; the `/lesson` page and docs/lesson-conformance.md
are rendered from this list plus the suite's last run (test-artifacts/lesson.json).

Status of a row:
  * `tested`     — a test in tests/lesson sets the lab up as the page says, does it, and asserts the
                   outcome the page states, with numbers read from the numbers model or the preset;
  * `model`      — a reasoning question whose answer is arithmetic the lab does not act out; the test
                   checks the page states the numbers model's figure (so the answer cannot drift);
  * `todo`       — the lab can show it, but only once the delivery-semantics rebuild (issue 18) lands;
                   listed in the chapter's test file docstring, not skipped;
  * `thought`    — the page says plainly it is a thought experiment.

Run `python -m core.lesson` to print the Markdown table kept in docs/lesson-conformance.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "lesson.json"
STATUSES = ("tested", "model", "todo", "thought")


@dataclass(frozen=True)
class Claim:
    id: str
    chapter: int
    section: str  # where the page makes the claim: "Try this 2", "Check yourself 1", or a heading
    claim: str
    test: str = ""  # test function name in tests/lesson/test_ch{chapter}.py
    status: str = "tested"
    why: str = ""  # for todo / thought: why it is not proven here yet

    @property
    def nodeid(self) -> str:
        return f"tests/lesson/test_ch{self.chapter}.py::{self.test}" if self.test else ""



CLAIMS: tuple[Claim, ...] = (
    # --- chapter 0 --------------------------------------------------------------------------------
    Claim("ch0.inline_504", 0, "Try this 2", "An inline transcode holds the request on the lab clock until the "
          "gateway gives up at its timeout: a real 504, far past the API budget",
          "test_try2_inline_request_ends_in_a_504_at_the_gateway_timeout"),
    Claim("ch0.for_nobody", 0, "Check yourself 1 and 4", "After the 504 the server keeps transcoding for nobody, "
          "to the end of the job's duration", "test_check1_4_the_server_transcodes_on_for_nobody_after_the_504"),
    Claim("ch0.enqueue_202", 0, "Try this 3 / Check yourself 3", "The enqueue handler answers 202 with a job id "
          "and status URL before any work happens; the job is durably recorded and carries on in a worker",
          "test_try3_check3_enqueue_answers_202_and_the_job_carries_on_in_a_worker"),
    Claim("ch0.pause", 0, "Try this 4", "Paused right after the 202, the job sits in the queue: the request is "
          "over, the work has not started", "test_try4_paused_after_the_202_the_job_waits_in_the_queue"),
    Claim("ch0.gateway_raised", 0, "Try this 5", "With the gateway timeout above the transcode, the inline "
          "request gets a 200 — after the transcode's whole simulated duration",
          "test_try5_a_gateway_timeout_above_the_transcode_gets_a_200_after_the_whole_transcode"),
    Claim("ch0.slots", 0, "Check yourself 2", "Little's law: inline transcodes occupy rate × duration request "
          "slots", "test_check2_request_slots_are_littles_law", status="model"),
    Claim("ch0.predict", 0, "Try this 1", "Predict both response times", status="thought",
          why="a prediction step; steps 2 and 3 show the answers"),
    Claim("ch0.inline_honest_clock", 0, "Try this 5, at the top speed", "The inline handler keeps the honest "
          "clock: at 1000× a transcode holds the request exactly its simulated duration (600 s), never that plus "
          "ffmpeg's overrun; when ffmpeg is slower than duration ÷ speed the clock waits for it and the answer "
          "says the clock slowed",
          "test_try5_at_1000x_an_inline_transcode_takes_its_duration_and_the_readout_says_the_clock_slowed"),
    # --- chapter 1 --------------------------------------------------------------------------------
    Claim("ch1.fixed_vt_note", 1, "Two fixes", "Where we differ: 1,200 s is 1.33× the 900 s p99, not “roughly "
          "2×”", "test_lesson_note_fixed_vt_ratio_is_on_the_page", status="model"),
    Claim("ch1.kill_redelivery_after_vt", 1, "Try this 2", "With the VT above the job, a killed worker's job "
          "is picked up again one VT after its claim", "test_try2_a_killed_workers_job_returns_one_vt_after_the_claim"),
    Claim("ch1.vt_short", 1, "Try this 1 / Check yourself 1, 5", "VT 300 s below a 600 s job, guard off: A runs "
          "0–600, B starts at 300 and runs to 900; done once at 600, B's completion a counted duplicate, 300 s "
          "of overlap. Guard claim: B backs off at 300 s, nothing transcoded twice",
          "test_try1_check1_check5_vt_too_short_runs_twice_done_once_and_claim_backs_off"),
    Claim("ch1.ack_early", 1, "Try this 3 / Check yourself 4", "Ack early + kill: the job is lost (nothing comes "
          "back); ack late + kill: redelivered, nothing lost",
          "test_try3_check4_ack_early_loses_a_killed_workers_job_ack_late_does_not"),
    Claim("ch1.heartbeat", 1, "Try this 4 / Check yourself 3", "Heartbeat: no redelivery while alive; a kill "
          "before the first beat is back one extension (180 s) after the claim, not the VT or the job's length",
          "test_try4_check3_heartbeat_no_redelivery_while_alive_and_a_crash_returns_within_one_extension"),
    Claim("ch1.expire_now", 1, "Try this 5", "Expire now on a busy worker's lease: guard off, two workers and the "
          "first to finish counts; guard claim, one (chapter 3's first claimer wins)",
          "test_try5_expire_now_off_two_workers_first_finisher_counts_claim_one_worker"),
    Claim("ch1.interval_gt_extension", 1, "Check yourself 6", "A heartbeat interval longer than the extension "
          "lets the lease lapse between beats: a healthy worker's job is redelivered",
          "test_check6_a_heartbeat_interval_longer_than_the_extension_redelivers_a_healthy_worker"),
    Claim("ch1.silence", 1, "Check yourself 2", "A dead worker and a busy one both send nothing", status="thought",
          why="a reasoning question about what a broker can observe; try this 2 and 4 show its consequence"),
    Claim("ch1.race_lease", 1, "Race: VT 300 vs VT 1200 vs heartbeat", "One 600 s transcode on two workers: "
          "with a 300 s lease the idle second worker takes the copy at 300 s and the job runs twice at once; a "
          "1,200 s lease or a heartbeat keeps it to one run. The lanes' clocks read the same instant (within 1 %) "
          "and every job is claimed within 1 simulated s, also beside two CPU hogs",
          "test_race_lease_vt300_runs_the_job_twice_at_once_vt1200_and_heartbeat_never"),
    Claim("ch1.scenario_vt_too_short", 1, "Scenario /s/vt-too-short", "A 300 s lease on a 600 s transcode, no "
          "guard: a second worker starts the job at 300 s, the first finishes at 600 s (done once), the second "
          "at 900 s (a counted duplicate): 300 s of overlap",
          "test_scenario_vt_too_short_runs_the_job_twice_done_at_600_duplicate_at_900"),
    Claim("ch1.why_vt_too_short", 1, "Predict first: VT too short (why)", "The lease ran out before the job was "
          "done, so another worker took it while the first was still busy: one more attempt per expiry",
          "test_try1_check1_check5_vt_too_short_runs_twice_done_once_and_claim_backs_off"),
    Claim("ch1.why_fix_vt", 1, "Predict first: Fix it: VT 1200 s (why)", "A lease that outlives the job keeps "
          "the message invisible until the ack: no other worker ever sees it, one attempt",
          "test_race_lease_vt300_runs_the_job_twice_at_once_vt1200_and_heartbeat_never"),
    Claim("ch1.why_fix_heartbeat", 1, "Predict first: Fix it: heartbeat (why)", "The heartbeat pushes the "
          "deadline while the worker lives, so a 300 s lease never runs out under it: the job runs once",
          "test_race_lease_vt300_runs_the_job_twice_at_once_vt1200_and_heartbeat_never"),
    Claim("ch1.caption_redelivery_timeline", 1, "Chart: timeline of one transcode (caption)", "The duplicate "
          "starts when the visibility timeout runs out, while the original still runs: both workers spend the "
          "overlap on the same job", "test_try1_check1_check5_vt_too_short_runs_twice_done_once_and_claim_backs_off"),
    Claim("ch1.caption_heartbeat", 1, "Chart: when a crash is noticed (caption)", "The heartbeat lease of a dead "
          "worker lapses one extension after the last beat it sent, long before a static VT would",
          "test_try4_check3_heartbeat_no_redelivery_while_alive_and_a_crash_returns_within_one_extension"),
    # --- chapter 2 --------------------------------------------------------------------------------
    Claim("ch2.mmc_note", 2, "The utilisation curve", "Where we differ: the exact M/M/c wait beside the lesson's "
          "W/(1−ρ)", "test_lesson_note_mmc_wait_is_on_the_page", status="model"),
    Claim("ch2.overload_grows", 2, "Try this 2", "Past ρ = 1 the queue grows and does not come back down; "
          "arrivals past the lab's bound are shed, counted and still part of the backlog",
          "test_try2_overload_backlog_keeps_growing_and_shed_arrivals_are_counted"),
    Claim("ch2.autoscale_boot", 2, "Try this 3", "The autoscaler's new workers boot for the boot lag before "
          "they take a job", "test_try3_the_autoscalers_new_workers_boot_for_the_boot_lag_before_they_take_a_job"),
    Claim("ch2.drain", 2, "Try this 4 / Check yourself 5", "Scale-in drains: busy workers finish first and "
          "nothing is redelivered; killing mid-job redelivers",
          "test_try4_check5_scale_in_drains_without_redelivery_and_kill_redelivers"),
    Claim("ch2.wait_closer_to_mmc", 2, "Try this 1", "At ρ ≈ 0.8 on the lab's four workers, with every job "
          "W long (the even mix), the measured mean wait is nearer Erlang C than W/(1−ρ)",
          "test_try1_at_rho_08_the_measured_wait_is_nearer_erlang_c_than_the_approximation"),
    Claim("ch2.doubling", 2, "Check yourself 1", "Doubling λ doubles L and the workers needed",
          "test_check1_doubling_traffic_doubles_in_flight_and_workers", status="model"),
    Claim("ch2.peak_rho", 2, "Check yourself 3", "The 1.8× peak on the average pool is past ρ = 1",
          "test_check3_the_peak_on_the_average_pool_is_past_rho_1", status="model"),
    Claim("ch2.caption_wait_curve", 2, "Chart: mean queue wait against ρ (caption)", "The exact Erlang C wait "
          "stays far below the W/(1−ρ) approximation all the way to ρ = 1",
          "test_caption_the_exact_wait_stays_below_the_approximation_up_to_rho_1", status="model"),
    # --- chapter 3 --------------------------------------------------------------------------------
    Claim("ch3.etag", 3, "Try this 2 / Check yourself 2", "Polling with an ETag: unchanged status answers 304 "
          "with no body", "test_try2_check2_an_unchanged_job_answers_304_to_its_etag"),
    Claim("ch3.long_poll", 3, "Try this 1", "A long-poll returns as soon as the job changes, not at its "
          "timeout", "test_try1_a_long_poll_returns_when_the_job_changes"),
    Claim("ch3.cas", 3, "Try this 4 / Check yourself 4", "CAS: a late delivery of a finished job finds it done and "
          "is refused (done → running)", "test_try4_check4_a_late_delivery_of_a_finished_job_is_refused"),
    Claim("ch3.stale", 3, "Try this 5 / Check yourself 5", "VT below the job under claim: the copy backs off, done "
          "once; a crashed holder's record is freed by the stale-job sweeper after stale_after, or by the "
          "heartbeat within one reset window",
          "test_try5_check5_a_short_vt_copy_backs_off_and_a_crashed_holder_is_freed"),
    Claim("ch3.halve_poll", 3, "Check yourself 1", "Halving the poll interval doubles the requests and halves "
          "the mean delay", "test_check1_halving_the_poll_interval_doubles_requests_and_halves_the_delay",
          status="model"),
    Claim("ch3.watch_panel", 3, "Try this 1–3", "Five watchers side by side; polling's requests per job near W/P; "
          "with the receiver failing the next N deliveries, one job's webhook-id arrives N + 1 times (N = 2: "
          "three), full-jitter delays apart, and is delivered once",
          "test_try1_3_five_watchers_polling_near_w_over_p_and_a_failing_receiver_gets_one_id_n_plus_1_times"),
    Claim("ch3.design", 3, "Check yourself 3, 6", "Webhook outbox; which mechanism to build first",
          status="thought", why="design judgement, not an outcome the lab produces"),
    # --- chapter 4 --------------------------------------------------------------------------------
    Claim("ch4.poison_note", 4, "Exponential backoff", "Where we differ: five attempts wait four delays (15 s), "
          "not the schedule's 31 s", "test_lesson_note_poison_backoff_is_on_the_page", status="model"),
    Claim("ch4.herd", 4, "Try this 1 / Check yourself 1", "Exponential backoff, storage outage: all 36 storage "
          "callers come back together at 10, 30, 70 s (the lesson's 1, 3, 7 s ×10)",
          "test_try1_check1_without_jitter_the_whole_herd_comes_back_together"),
    Claim("ch4.jitter", 4, "Try this 2 / Check yourself 2", "Full jitter: the tallest 1 s bucket well below "
          "the 36 of the unjittered herd (the model's 6.6 assumes 36 callers; at the preset jobs that exhaust "
          "their storage tries retry and add callers, so the lab measures higher)",
          "test_try2_check2_full_jitter_flattens_the_peak"),
    Claim("ch4.jitter_either_order", 4, "Try this 1–2", "Either order works (the outage first, or the jobs first): "
          "the retried storage calls per 1 s bar peak at the whole herd of 36 without jitter, at no more than half "
          "of it with full jitter", "test_try2_in_either_order_full_jitters_tallest_bar_is_at_most_half_no_jitters"),
    Claim("ch4.poison", 4, "Try this 3", "A failing poison pill: max_attempts attempts with the policy's waits "
          "(10, 20, 40, 80 s), the DLQ about 150 s after the first failure; fixed ≈40 s; none: one attempt",
          "test_try3_a_poison_pill_fails_max_attempts_times_with_the_policys_waits"),
    Claim("ch4.crash", 4, "Try this 4 / Check yourself 5", "A crashing pill: the retry policy is never asked; "
          "the lease brings it back a heartbeat window apart until Max receives",
          "test_try4_check5_a_crashing_pill_comes_back_by_its_lease_until_max_receives"),
    Claim("ch4.uncapped", 4, "Check yourself 3", "Uncapped poison pills fill the pool's slots",
          "test_check3_uncapped_poison_pills_fill_the_pool", status="model"),
    Claim("ch4.budget", 4, "Check yourself 4", "A retry budget bounds the time to `failed`",
          "test_check4_a_retry_budget_bounds_the_time_to_failed", status="model"),
    Claim("ch4.replay", 4, "Try this 5", "DLQ replay with a reason filter: with non-retryable errors "
          "classified, outage jobs and a poison pill reach the DLQ with different reasons; replaying "
          "max_attempts brings back exactly the outage jobs, which finish; the replayed pill fails once and "
          "goes straight back", "test_try5_replay_by_reason_brings_back_only_the_outage_jobs_and_they_finish"),
    Claim("ch4.breaker", 4, "Check yourself 6", "What a circuit breaker saves that jitter does not",
          status="thought", why="a design comparison; the breaker is a lab control but the page asks for reasoning"),
    Claim("ch4.race_jitter", 4, "Race: no jitter vs full jitter", "Storage down for 200 s under six thumbnail "
          "jobs: fixed 20 s retries land together, full jitter spreads them (the fixed lane's peak per bucket is "
          "at least twice full jitter's)", "test_race_jitter_fixed_retries_land_together_full_jitter_spreads_them"),
    Claim("ch4.race_retry_policies", 4, "Race: four retry policies", "The same outage four ways: without retries "
          "every job is dead-lettered after one call per caller; fixed, exponential and full-jitter backoff wait it "
          "out and finish every job",
          "test_race_retry_policies_without_retries_the_outage_dead_letters_every_job_with_backoff_all_finish"),
    Claim("ch4.scenario_retry_storm", 4, "Scenario /s/retry-storm", "Storage down for 100 s under three jobs of "
          "12 upload parts: all 36 calls fail at once and, with exponential backoff and no jitter, all 36 come "
          "back together at 10, 30, 70 and 150 s",
          "test_scenario_retry_storm_every_call_fails_together_and_comes_back_together"),
    Claim("ch4.scenario_poison_pill", 4, "Scenario /s/poison-pill", "An undecodable upload fails every attempt; "
          "exponential backoff waits 10, 20, 40, 80 s and the fifth failure sends it to the dead-letter queue",
          "test_scenario_poison_pill_waits_10_20_40_80_and_the_fifth_failure_dead_letters"),
    Claim("ch4.why_poison", 4, "Predict first: Poison pill (why)", "Every attempt fails with an error the "
          "handler sees, so the retry policy decides: at max attempts the job goes to the dead-letter queue",
          "test_scenario_poison_pill_waits_10_20_40_80_and_the_fifth_failure_dead_letters"),
    Claim("ch4.why_outage", 4, "Predict first: 3 jobs + storage outage (why)", "A job dead-letters only if all "
          "its attempts land inside the outage: under the preset's exponential backoff none of the three does, "
          "with no retries all three do",
          "test_why_outage_a_job_dead_letters_only_if_all_its_attempts_land_inside_the_outage"),
    Claim("ch4.caption_herd", 4, "Chart: retry arrivals without jitter (caption)", "Each bar is one "
          "synchronised wave of all the retries: every storage caller comes back in the same wave",
          "test_try1_check1_without_jitter_the_whole_herd_comes_back_together"),
    Claim("ch4.caption_panel_peaks", 4, "Lab panel: storage calls per bucket (caption)", "Measured peaks beside "
          "the model's: with no jitter all the storage callers land in one bucket",
          "test_try1_check1_without_jitter_the_whole_herd_comes_back_together"),
    Claim("ch4.caption_jitter_wave", 4, "Chart: the first retry wave with and without full jitter (caption)",
          "Without jitter all the retries land in one bucket; full jitter spreads the same retries evenly over the "
          "window, about the model's band per bucket",
          "test_caption_the_first_retry_wave_without_jitter_is_one_bucket_of_every_retry", status="model"),
    # --- chapter 5 --------------------------------------------------------------------------------
    Claim("ch5.idempotency_key", 5, "Try this 4 / Check yourself 1", "A resend with the same Idempotency-Key "
          "returns the same job and the queue does not grow; a new key makes a new job",
          "test_try4_check1_same_idempotency_key_same_job_new_key_new_job"),
    Claim("ch5.claim_guard", 5, "Try this 1", "VT too short under the claim guard: one run, one file per "
          "rendition, one email", "test_try1_claim_guard_one_run_one_file_per_rendition_one_email"),
    Claim("ch5.guards_off", 5, "Try this 2", "Every guard off: two runs, a second set of per-attempt files, two "
          "emails", "test_try2_every_guard_off_files_and_emails_follow_the_runs"),
    Claim("ch5.guards", 5, "Try this 3 / Check yourself 2", "Record guard off, output-path and notified guards "
          "on: runs twice, files overwritten, the second email suppressed",
          "test_try3_check2_output_path_and_notified_guards_hold_when_the_record_guard_is_off"),
    Claim("ch5.window", 5, "Check yourself 3", "Doubling the VT recomputes the dedup window and key memory",
          "test_check3_doubling_the_vt_recomputes_the_dedup_window", status="model"),
    Claim("ch5.judgement", 5, "Check yourself 4, 5", "Fail open or closed; why a separate notified flag",
          status="thought", why="design judgement about costs the lab does not price (a card charge, racing reads)"),
    Claim("ch5.race_guard", 5, "Race: claim guard off vs on", "A 300 s lease on a 600 s job: at 300 s the copy "
          "goes to the idle second worker. Guard off: both copies run and two emails go out; claim guard: the "
          "copy backs off, one run, one email",
          "test_race_guard_off_runs_both_copies_and_mails_twice_claim_runs_once_and_mails_once"),
    Claim("ch5.why_emails", 5, "Predict first: VT too short, emails (why)", "With the notified guard on, the "
          "completion email is a compare-and-swap on a 'notified' flag: only the first finisher sends it",
          "test_try3_check2_output_path_and_notified_guards_hold_when_the_record_guard_is_off"),
    # --- chapter 6 --------------------------------------------------------------------------------
    Claim("ch6.shared_fifo", 6, "Try this 1", "Shared FIFO: workers take jobs in arrival order whatever the "
          "tier", "test_try1_shared_fifo_serves_in_arrival_order_whatever_the_tier"),
    Claim("ch6.noisy_neighbour", 6, "Try this 2 / Check yourself 3", "FIFO puts a quiet customer behind the "
          "whole burst; per-customer round robin serves it within one round",
          "test_try2_check3_round_robin_lets_a_quiet_customer_past_the_burst"),
    Claim("ch6.aging", 6, "Try this 3 / Check yourself 2", "Strict priority starves free under a pro backlog; "
          "aging caps free's wait near the aging threshold",
          "test_try3_check2_strict_priority_starves_free_and_aging_caps_its_wait"),
    Claim("ch6.hard_split_idle", 6, "Try this 4 / Check yourself 1", "Hard split: with no pro traffic the "
          "reserved workers sit idle while free jobs wait, and are paid for all the same",
          "test_try4_check1_hard_split_leaves_pro_workers_idle_while_free_waits"),
    Claim("ch6.poison_storm", 6, "Try this 5", "Separate fleets keep a free poison storm off pro's workers",
          "test_try5_separate_fleets_keep_a_free_poison_storm_off_pro_workers"),
    # --- chapter 7 --------------------------------------------------------------------------------
    Claim("ch7.no_lock", 7, "Try this 1", "No lock: every replica runs every tick",
          "test_try1_without_a_lock_every_replica_runs_every_tick"),
    Claim("ch7.short_ttl", 7, "Try this 2 / Check yourself 1", "Lock TTL 30 s, 45 s (p99) run, a late replica: "
          "the task runs twice per tick, overlapping, and the first run's release is refused",
          "test_try2_check1_a_30s_lock_under_a_45s_run_lets_the_late_replica_run_it_again"),
    Claim("ch7.fixes", 7, "Try this 3", "One click fixes it: TTL 120 s, or a heartbeat-extended 30 s lock, runs "
          "once per tick", "test_try3_ttl_120_or_a_heartbeat_lock_runs_once_per_tick"),
    Claim("ch7.plain_del", 7, "Check yourself 2", "A plain DEL after expiry frees another replica's lock",
          "test_check2_a_plain_delete_frees_the_next_holders_lock"),
    Claim("ch7.skew_margin", 7, "Check yourself 3", "The lock's margin after skew is TTL − p99 − skew",
          "test_check3_the_lock_margin_after_skew_is_ttl_minus_p99_minus_skew", status="model"),
    Claim("ch7.leader", 7, "Try this 4 / Check yourself 4", "A killed leader is replaced within one lease",
          "test_try4_check4_a_killed_leader_is_replaced_within_its_lease"),
    Claim("ch7.catch_up", 7, "Try this 5", "After every replica was down, one catch-up run mails the missed "
          "buckets; it mails a cut run's bucket again (a user mailed twice) unless the task is idempotent",
          "test_try5_after_downtime_one_catch_up_run_mails_the_cut_runs_bucket_again_unless_idempotent"),
    Claim("ch7.buckets", 7, "Check yourself 5", "Sustained load does not depend on the bucket count",
          "test_check5_sustained_load_does_not_depend_on_bucket_count", status="model"),
    # --- chapter 8 --------------------------------------------------------------------------------
    Claim("ch8.dashboard", 8, "The dashboard", "Nine rows, one metric per chapter, from the numbers model",
          "test_the_dashboard_has_one_row_per_chapter", status="model"),
    Claim("ch8.demo_time", 8, "Try this 1", "A transcode takes its simulated duration (the honest clock), so at "
          "the demo speed it takes duration ÷ speed real seconds",
          "test_try1_a_transcode_takes_its_simulated_duration_so_real_time_is_duration_over_speed"),
    Claim("ch8.kill", 8, "Try this 2 / Check yourself 4", "Kill the busy worker: the record is freed one reset "
          "window after its last beat; one file per rendition, one email",
          "test_try2_a_killed_busy_workers_job_is_freed_one_reset_window_after_its_last_beat"),
    Claim("ch8.kills", 8, "Try this 3 / Check yourself 1, 5", "Three rapid kills: the three jobs come back "
          "together, a spike in the redelivery rate; every redelivery matches a kill",
          "test_try3_check1_check5_rapid_kills_are_a_spike_in_the_redelivery_rate"),
    Claim("ch8.doubled", 8, "Check yourself 3", "Doubled traffic: twice the jobs in flight, the pool doubles",
          "test_check3_doubled_traffic_doubles_the_pool", status="model"),
    Claim("ch8.judgement", 8, "Try this 4 / Check yourself 2", "Which dashboard rows move; why a small "
          "dollar figure is worth fixing", status="thought",
          why="reading the dashboard and weighing a cost's shape; try 2–3 produce the movements it asks about"),
    Claim("ch8.why_kills_lost", 8, "Predict first: Three rapid kills (why)", "Acks are late: the message is "
          "deleted only after success, so each killed worker's job comes back when its lease runs out and "
          "finishes; none is lost", "test_try3_check1_check5_rapid_kills_are_a_spike_in_the_redelivery_rate"),
)

BY_ID = {c.id: c for c in CLAIMS}


def by_test() -> dict[str, list[Claim]]:
    """Claims proven by each test node id (one test may prove a try-this step and a question)."""
    out: dict[str, list[Claim]] = {}
    for c in CLAIMS:
        if c.test:
            out.setdefault(c.nodeid, []).append(c)
    return out


def load_results(path: Path = RESULTS) -> dict[str, Any]:
    """The suite's last run: {claim id: {outcome, measured (or model, for a model claim), test, when}}; empty
    if it never ran here."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def table(results: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows for the conformance table: each claim with its last measured result, if any."""
    results = load_results() if results is None else results
    return [dict(asdict(c), nodeid=c.nodeid, result=results.get("claims", {}).get(c.id)) for c in CLAIMS]


def summary() -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for c in CLAIMS:
        row = out.setdefault(c.chapter, dict.fromkeys(STATUSES, 0))
        row[c.status] += 1
    return out


def markdown() -> str:
    lines = ["# Lesson conformance", "",
             "Every claim a chapter makes that the lab can act out, the section that makes it, and the test",
             "in `tests/lesson/` that proves it. Generated from `core/lesson.py` (`python -m core.lesson`);",
             "what the lab measured at the last run is on the `/lesson` page (read from",
             "`test-artifacts/lesson.json`, written by the suite).", "",
             "| claim | chapter · section | status | test |", "|---|---|---|---|"]
    for c in CLAIMS:
        test = f"`{c.nodeid}`" if c.nodeid else (c.why or "—")
        lines.append(f"| {c.claim} | {c.chapter} · {c.section} | {c.status} | {test} |")
    lines += ["", "## Per chapter", "", "| chapter | tested | model | todo | thought |", "|---|---|---|---|---|"]
    for ch, row in sorted(summary().items()):
        lines.append(f"| {ch} | {row['tested']} | {row['model']} | {row['todo']} | {row['thought']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
