"""Chapter 5, Idempotency: its home — everything that is this chapter's.

Its prose is chapter.md beside this file; here is the rest of it, whichever it has: its preset(s)
(settings, controls, what the widget shows), the widget's scenario buttons, its guided steps, shared
set-ups, races, lesson claims, lab model, numbers-model figures, charts and the key of its add-on.
chapters/__init__.py gathers every chapter's tables into the ones the code reads.
"""

from __future__ import annotations

import math
from typing import Any

from chapters.common import LONG_JOB, LONG_TRANSCODE, SHOWS_RETRIES
from core.lesson import Claim
from core.numbers import BYTES_PER_MB, Inputs

SLUG = "idempotency"  # the page is /chapters/5-idempotency
ADDON = "idempotency"  # its lab panel: templates/_lab_idempotency.html, static/js/lab-idempotency.js

PRESETS: dict[str, dict[str, Any]] = {
    "ch5": {
        "shows": SHOWS_RETRIES,
        "title": "Effectively once",
        "settings": {"workers": 2, "vt_seconds": 300, "heartbeat": False, "guard": "claim"},
        "controls": [
            "upload",
            "kill",
            "vt_seconds",
            "guard",
            "idempotent_outputs",
            "notify_guard",
            "dedup_fail_mode",
            "clock",
        ],
    },
}

BUTTONS: dict[str, list[dict[str, Any]]] = {
    "ch5": [
        {
            "id": "vt-too-short",
            "label": "VT too short",
            "settings": {"vt_seconds": 300, "job_duration": 600},
            "enqueue": LONG_JOB,
            "hint": "Redelivered while still running. Predict the outputs written and emails sent with the claim "
            "guard on, then with the guard off.",
            "predict": {
                "id": "ch5-emails",
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "emails",
                "measure": "counter:emails_sent",
                "question": "The job is redelivered while it still runs. How many completion emails go out?",
                # the guard named is the one the lab's own counters show acting (predict-model.js)
                "why": "The job was redelivered while it still ran, and {measured} completion email(s) went "
                "out. The guard that acted: {guard_that_acted}.",
            },
        },
    ],
}

_EMAILS = {"kind": "number", "min": 0, "max": 10, "unit": "emails", "measure": "counter:emails_sent"}

STEPS: dict[str, list[dict[str, Any]]] = {
    "ch5": [
        {
            "claim": "ch5.claim_guard",
            "title": "VT too short, claim guard",
            "do": [
                {"settings": {"guard": "claim", "idempotent_outputs": True, "notify_guard": True}},
                {"scenario": "vt-too-short"},
            ],
            "predict": {
                **_EMAILS,
                "id": "ch5-step-claim",
                "question": "Claim guard on, and the job is redelivered while it still runs. How many "
                "completion emails go out?",
            },
            "moment": "job.duplicate_blocked",
            "look": "workers",
            "says": "{measured} completion email: the redelivered copy found the record running and backed off, "
            "so one run wrote one file per rendition and sent one email.",
        },
        {
            "claim": "ch5.guards_off",
            "title": "Every guard off",
            "do": [
                {"settings": {"guard": "off", "idempotent_outputs": False, "notify_guard": False}},
                {"scenario": "vt-too-short"},
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "runs",
                "id": "ch5-step-off",
                "measure": "counter:duplicate_completions",
                "question": "Every guard off, the same redelivery. How many times does a second copy of the "
                "job run to the end?",
            },
            "moment": "job.redelivered",
            "look": "readout-dupdone",
            "says": "{measured} copy ran to the end beside the first: with every guard off both runs wrote their own "
            "files and each sent its email.",
        },
        {
            "claim": "ch5.guards",
            "title": "Output-path and notified guards on",
            "do": [
                {"settings": {"guard": "off", "idempotent_outputs": True, "notify_guard": True}},
                {"scenario": "vt-too-short"},
            ],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "emails",
                "id": "ch5-step-notified",
                "measure": "counter:emails_suppressed",
                "question": "Record guard off, so the job runs twice, but the notified flag is on. How many "
                "emails does the flag hold back?",
            },
            "moment": "email.suppressed",
            "look": "event-log",
            "says": "{measured} email held back: the job still ran twice and overwrote its files, but the notified "
            "flag's compare-and-swap let only the first finisher send.",
        },
        {
            "claim": "ch5.idempotency_key",
            "title": "Resend with the same key",
            "do": [{"click": "ch5-send-key", "fill": {"ch5-drops": 2}}],
            "predict": {
                "kind": "number",
                "min": 0,
                "max": 10,
                "unit": "jobs",
                "id": "ch5-step-key",
                "measure": "events:job.enqueued",
                "question": "The client sends with one Idempotency-Key and loses the first two answers, so it "
                "sends three times. How many jobs does the queue get?",
            },
            "moment": "idempotency.replayed",
            "moment_n": 2,
            "look": "ch5-client",
            "says": "{measured} job: the second and third sends found the key and got the first job's answer "
            "replayed; the queue did not grow. A new key would make a new job.",
        },
    ],
}

RACES: dict[str, dict[str, Any]] = {
    "guard": {
        "title": "Claim guard off vs on",
        "preset": "ch5",
        "vary": ["guard"],
        "summary": "A 300 s lease on a 600 s job: at 300 s the copy goes to the idle second worker while the "
        "first still runs. Without the compare-and-swap claim both copies run and two emails go "
        "out; with it the copy backs off: one run, one email.",
        # the email's own once-only flag is off in both lanes, so the emails show what the claim alone does
        "base": {"workers": 2, "job_duration": 600, "vt_seconds": 300, "heartbeat": False, "notify_guard": False},
        "variants": [
            {"label": "Guard off", "settings": {"guard": "off"}},
            {"label": "Claim guard on", "settings": {"guard": "claim"}},
        ],
        "enqueue": LONG_TRANSCODE,
        "count": 1,
        "watch": [
            ["duplicate_completions", "duplicate runs finished"],
            ["duplicates_blocked", "copies backed off"],
            ["emails_sent", "emails sent"],
            ["done", "done"],
        ],
    },
}

# ---- the challenge: the learner writes the handler (core/challenges/, workers/challenge.py) ----

_REFERENCE = """\
def handle(ctx):
    key = ctx.job.idempotency_key
    # one attempt works at a time; the claim lapses (a killed holder frees it) after 150 s
    token = ctx.kv.claim("working:" + key, ttl=150)
    if token is None:
        return ctx.BACKOFF  # another attempt holds the job: its lease brings the message back
    if ctx.kv.get("done:" + key) is None:
        video = ctx.media.transcode("360p")
        ctx.storage.put(f"transcoded/{ctx.job.id}/360p.mp4", video)  # deterministic: a repeat overwrites
        ctx.kv.put("done:" + key, "1")
    if ctx.kv.cas("emailed:" + key, None, str(ctx.job.attempt)):  # the notified flag, set once
        ctx.email.send(f"Your video (job {ctx.job.id}) is ready")
    ctx.kv.release("working:" + key, token)
"""

CHALLENGES: dict[str, dict[str, Any]] = {
    "effectively-once": {
        "chapter": 5,
        "title": "Effectively once",
        "task": "Write the job's handler so that each upload gets one transcoded file and one email, although "
        "its message is redelivered after a kill and a copy arrives while the first still runs.",
        "section": "which-side-effects-repeat-safely",
        "hint": "A side effect that must happen once needs a record that it happened, taken atomically before "
        "it (Which side effects repeat safely).",
        # the lab's own guards off: the handler is the only one
        "settings": {
            "workers": 4,
            "guard": "off",
            "notify_guard": False,
            "idempotent_outputs": True,
            "vt_seconds": 120,
            "heartbeat": False,
            "ack_mode": "late",
            "max_receives": 6,
            "max_attempts": 3,
            "retry_policy": "fixed",
            "retry_base": 10,
        },
        "workload": [60, 60, 300, 60, 60, 60, 60, 60],  # each job's simulated transcode time
        "faults": [  # job 2 is killed just after its email, before its ack; job 3's lease runs out as it starts;
            # job 5 is killed between its upload and its email
            {"job": 2, "attempt": 1, "op": "email.send", "when": "after", "do": "crash"},
            {"job": 3, "attempt": 1, "op": "media.transcode", "when": "before", "do": "expire"},
            {"job": 5, "attempt": 1, "op": "storage.put", "when": "after", "do": "crash"},
        ],
        "invariants": ["every_job_done", "one_output", "one_email"],
        "starter_breaks": "one_email",  # the invariant the starter must break
        "starter": """\
def handle(ctx):
    video = ctx.media.transcode("360p")
    ctx.storage.put(f"transcoded/{ctx.job.id}/360p.mp4", video)
    ctx.email.send(f"Your video (job {ctx.job.id}) is ready")
""",
        "reference": _REFERENCE,
        # each a mistake of the reference's, and the invariant that names it
        "mutants": {
            "email before the flag": (
                _REFERENCE.replace('if ctx.kv.cas("emailed:" + key, None, str(ctx.job.attempt)):', "if True:"),
                "one_email",
            ),
            "flag keyed by the attempt": (
                _REFERENCE.replace('"emailed:" + key,', '"emailed:" + key + str(ctx.job.attempt),'),
                "one_email",
            ),
            "an output per attempt": (_REFERENCE.replace("/360p.mp4", "/360p-{ctx.job.attempt}.mp4"), "one_output"),
            "a claim that never lapses": (_REFERENCE.replace("ttl=150", "ttl=None"), "every_job_done"),
        },
    },
}


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "ch5.idempotency_key",
        5,
        "Try this 4 / Check yourself 1",
        "A resend with the same Idempotency-Key "
        "returns the same job and the queue does not grow; a new key makes a new job",
        "test_try4_check1_same_idempotency_key_same_job_new_key_new_job",
    ),
    Claim(
        "ch5.claim_guard",
        5,
        "Try this 1",
        "VT too short under the claim guard: one run, one file per rendition, one email",
        "test_try1_claim_guard_one_run_one_file_per_rendition_one_email",
    ),
    Claim(
        "ch5.guards_off",
        5,
        "Try this 2",
        "Every guard off: two runs, a second set of per-attempt files, two emails",
        "test_try2_every_guard_off_files_and_emails_follow_the_runs",
    ),
    Claim(
        "ch5.guards",
        5,
        "Try this 3 / Check yourself 2",
        "Record guard off, output-path and notified guards "
        "on: runs twice, files overwritten, the second email suppressed",
        "test_try3_check2_output_path_and_notified_guards_hold_when_the_record_guard_is_off",
    ),
    Claim(
        "ch5.window",
        5,
        "Check yourself 3",
        "Doubling the VT recomputes the dedup window and key memory",
        "test_check3_doubling_the_vt_recomputes_the_dedup_window",
        status="model",
    ),
    Claim(
        "ch5.judgement",
        5,
        "Check yourself 4, 5",
        "Fail open or closed; why a separate notified flag",
        status="thought",
        why="design judgement about costs the lab does not price (a card charge, racing reads)",
    ),
    Claim(
        "ch5.race_guard",
        5,
        "Race: claim guard off vs on",
        "A 300 s lease on a 600 s job: at 300 s the copy "
        "goes to the idle second worker. Guard off: both copies run and two emails go out; claim guard: the "
        "copy backs off, one run, one email",
        "test_race_guard_off_runs_both_copies_and_mails_twice_claim_runs_once_and_mails_once",
    ),
    Claim(
        "ch5.why_emails",
        5,
        "Predict first: VT too short, emails (why)",
        "With the notified guard on, the "
        "completion email is a compare-and-swap on a 'notified' flag: only the first finisher sends it",
        "test_try3_check2_output_path_and_notified_guards_hold_when_the_record_guard_is_off",
    ),
)


# ---- numbers-model figures (chapters.derive gathers them, in chapter order) ----


def figures(inputs: Inputs, core: dict[str, float], fig: dict[str, dict[str, Any]]) -> dict[str, Any]:
    t = inputs.job("transcode")
    worst = inputs.fixed_visibility_timeout_s + t.p99_s
    window = math.ceil(worst / inputs.dedup_round_to_s - 1e-9) * inputs.dedup_round_to_s
    keys = core["lam"] * window
    key_bytes = keys * inputs.idempotency_key_bytes
    return {
        "fixed_vt_s": inputs.fixed_visibility_timeout_s,
        "transcode_p99_s": t.p99_s,
        "worst_case_duplicate_gap_s": worst,
        "dedup_window_s": window,
        "dedup_window_h": window / 3600,
        "dedup_margin_s": window - worst,
        "keys_in_window": keys,
        "idempotency_key_bytes": inputs.idempotency_key_bytes,
        "key_store_bytes": key_bytes,
        "key_store_mb": key_bytes / BYTES_PER_MB,
        "offline_client_retry_s": inputs.offline_client_retry_s,
        "offline_retry_caught": inputs.offline_client_retry_s <= window,
        "side_effects": [
            {
                "operation": "write transcoded/{job_id}/… (deterministic path)",
                "naturally_idempotent": True,
                "guard": "none needed: a repeat overwrites the same file",
            },
            {
                "operation": "set status = done",
                "naturally_idempotent": True,
                "guard": "CAS on the expected previous state",
            },
            {
                "operation": "send completion email",
                "naturally_idempotent": False,
                "guard": "CAS flag: UPDATE … SET notified = true WHERE notified = false",
            },
            {
                "operation": "charge a card",
                "naturally_idempotent": False,
                "guard": "idempotency key checked before the charge; fail closed",
            },
            {
                "operation": "increment a counter",
                "naturally_idempotent": False,
                "guard": "record the job id with the increment; skip if seen",
            },
        ],
        "dedup_store_down": [
            {
                "choice": "fail open (proceed without the check)",
                "risk": "an uncaught duplicate",
                "right_for": "transcodes: downstream path + CAS make a duplicate merely wasteful",
            },
            {
                "choice": "fail closed (reject, client retries)",
                "risk": "unavailability while the store is down",
                "right_for": "payments: nothing downstream un-charges a card",
            },
        ],
        "key_vs_request_id": [
            {
                "identifier": "request ID / trace ID",
                "identifies": "one HTTP call",
                "on_retry": "fresh every attempt",
                "dedups": False,
            },
            {
                "identifier": "idempotency key",
                "identifies": "one logical operation",
                "on_retry": "the SAME key reused",
                "dedups": True,
            },
        ],
        "defence_layers": [
            {"layer": 1, "mechanism": "heartbeat / VT above p99", "stops": "most redeliveries happening at all"},
            {"layer": 2, "mechanism": "CAS queued → running", "stops": "a second worker doing the work"},
            {"layer": 3, "mechanism": "deterministic output path", "stops": "two divergent output files"},
            {"layer": 4, "mechanism": "notified CAS flag", "stops": "a second completion email"},
        ],
    }


def prose(inputs: Inputs, fig: dict[str, dict[str, Any]]) -> None:
    """Figures the prose states one step from another (the doubled VT's window): so the page does no arithmetic."""
    c5 = fig["ch5"]
    c5["offline_client_retry_min"] = c5["offline_client_retry_s"] / 60
    c5["dedup_window_min"] = c5["dedup_window_s"] / 60
    vt2 = c5["fixed_vt_s"] * 2
    gap2 = vt2 + c5["transcode_p99_s"]
    win2 = math.ceil(gap2 / inputs.dedup_round_to_s) * inputs.dedup_round_to_s
    c5["doubled_vt"] = {
        "vt_s": vt2,
        "gap_s": gap2,
        "window_s": win2,
        "key_count": inputs.arrival_rate * win2,
        "key_mb": inputs.arrival_rate * win2 * c5["idempotency_key_bytes"] / 1e6,
        "window_unchanged": win2 == c5["dedup_window_s"],
        "spare_s": win2 - gap2,
        "extra_min": (win2 - c5["dedup_window_s"]) / 60,
    }
