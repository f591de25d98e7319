"""The races on offer (app/races.py runs them): one input through two to four labs that differ in one setting.

Each race names its chapter preset, the settings set on every lab (`base`), the variants (each changes
only the settings named in `vary`), the jobs and fault every lab gets, and the counts its table compares.
Kept apart from the races blueprint so any page (a room's, a chapter's) can list them.
"""

from __future__ import annotations

from typing import Any

from app import scenarios

_THUMBS = {"sample": "bigbuckbunny", "job_type": "thumbnail", "duration_s": 30}
_LONG = {"sample": "bigbuckbunny", "job_type": "transcode", "duration_s": 600}
_OUTAGE_BASE = {"workers": 3, "job_duration": 30, "retry_base": 20, "retry_cap": 300, "max_attempts": 8,
                "breaker": False, "vt_seconds": 300}

# what a race's comparison table shows: [snapshot count, label] (core.events.COUNTERS or a state count)
_RETRY_WATCH = [["retries_scheduled", "retries scheduled"], ["failed", "attempts failed"], ["done", "done"],
                ["dlq", "dead-lettered"]]

# id → race. `base` is set on every lab (on top of the preset); each variant changes only `vary`.
RACES: dict[str, dict[str, Any]] = {
    "jitter": {
        "title": "No jitter vs full jitter", "preset": "ch4", "vary": ["retry_policy"],
        "summary": "Storage is down for 200 s under six thumbnail jobs. Fixed 20 s retries all land at the "
                   "same instants; full jitter spreads them out.",
        "base": _OUTAGE_BASE,
        "variants": [{"label": "Fixed 20 s, no jitter", "settings": {"retry_policy": "fixed"}},
                     {"label": "Full jitter", "settings": {"retry_policy": "full_jitter"}}],
        "fault": {"type": "storage_outage", "duration_s": 200}, "enqueue": _THUMBS, "count": 6,
        "watch": _RETRY_WATCH,
    },
    "retry-policies": {
        "title": "Four retry policies", "preset": "ch4", "vary": ["retry_policy"],
        "summary": "The same 200 s storage outage under six jobs, four ways: no retries, fixed, exponential "
                   "and full-jitter backoff.",
        "base": _OUTAGE_BASE,
        "variants": [{"label": "No retries", "settings": {"retry_policy": "none"}},
                     {"label": "Fixed", "settings": {"retry_policy": "fixed"}},
                     {"label": "Exponential", "settings": {"retry_policy": "exponential"}},
                     {"label": "Full jitter", "settings": {"retry_policy": "full_jitter"}}],
        "fault": {"type": "storage_outage", "duration_s": 200}, "enqueue": _THUMBS, "count": 6,
        "watch": _RETRY_WATCH,
    },
    "lease": {
        "title": "VT 300 vs VT 1200 vs heartbeat", "preset": "ch1", "vary": ["vt_seconds", "heartbeat"],
        "summary": "One 600 s transcode on two workers. A 300 s lease runs out mid-job: the idle second worker "
                   "takes the copy and the job runs twice at once, from 300 s to 600 s. A 1,200 s lease or a "
                   "heartbeat keeps it to one run.",
        "base": {"workers": 2, "job_duration": 600, "retry_policy": "none", "ack_mode": "late", "guard": "off"},
        "variants": [{"label": "VT 300 s", "settings": {"vt_seconds": 300, "heartbeat": False}},
                     {"label": "VT 1,200 s", "settings": {"vt_seconds": 1200, "heartbeat": False}},
                     {"label": "VT 300 s + heartbeat", "settings": {"vt_seconds": 300, "heartbeat": True}}],
        "enqueue": _LONG, "count": 1,
        "watch": [["redelivered", "redelivered"], ["duplicate_completions", "duplicate runs finished"],
                  ["leases_extended", "lease extensions"], ["done", "done"]],
    },
    "guard": {
        "title": "Claim guard off vs on", "preset": "ch5", "vary": ["guard"],
        "summary": "A 300 s lease on a 600 s job: at 300 s the copy goes to the idle second worker while the "
                   "first still runs. Without the compare-and-swap claim both copies run and two emails go "
                   "out; with it the copy backs off: one run, one email.",
        # the email's own once-only flag is off in both lanes, so the emails show what the claim alone does
        "base": {"workers": 2, "job_duration": 600, "vt_seconds": 300, "heartbeat": False, "notify_guard": False},
        "variants": [{"label": "Guard off", "settings": {"guard": "off"}},
                     {"label": "Claim guard on", "settings": {"guard": "claim"}}],
        "enqueue": _LONG, "count": 1,
        "watch": [["duplicate_completions", "duplicate runs finished"], ["duplicates_blocked", "copies backed off"],
                  ["emails_sent", "emails sent"], ["done", "done"]],
    },
}


def public(race_id: str) -> dict[str, Any]:
    rc = RACES[race_id]
    return {"id": race_id, "title": rc["title"], "preset": rc["preset"], "summary": rc["summary"],
            "vary": rc["vary"], "variants": [v["label"] for v in rc["variants"]],
            "chapter_url": scenarios.chapter_path(rc["preset"])}


def for_preset(preset: str) -> list[dict[str, Any]]:
    return [public(i) for i, rc in RACES.items() if rc["preset"] == preset]
