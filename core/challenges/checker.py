"""The checker: each invariant of a challenge, held or broken, read from the lab's own event history.

Pure: it reads the events of one run (core/stream.py's JSON) and the jobs' records, never the handler. Each
invariant is one function from a job's history to a list of the events that break it (empty: it held for that
job); a broken invariant is reported with the shortest such history among its jobs, told in words
("job 7: two emails — attempt 1 sent at t = 312 s and was killed before its ack; attempt 2 sent at t = 612 s")
and with the ids of its events, which the page outlines on the timeline.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

Event = dict[str, Any]
Found = tuple[str, list[Event]] | None
POISON_SUFFIX = "-poison"  # a poison pill's video id ends so (core/challenges/run.py enqueues it)


def _poison(rec: dict) -> bool:
    return json.loads(rec.get("payload") or "{}").get("video_id", "").endswith(POISON_SUFFIX)


def _t(e: Event) -> str:
    return f"t = {e['t_sim']:g} s"


def _fate(attempt: int, history: list[Event], after: Event) -> str:
    """What became of an attempt after `after`: the words a counterexample ends its clause with."""
    for e in history[history.index(after) + 1 :]:
        if e.get("attempt") != attempt:
            continue
        if e["type"] == "job.crashed":
            return f" and was killed before its ack ({_t(e)})"
        if e["type"] == "job.succeeded":
            return f" and was acked ({_t(e)})"
        if e["type"] == "job.duplicate_completed":
            return f" and was acked again as a duplicate ({_t(e)})"
        if e["type"] == "handler.backed_off":
            return " and backed off"
        if e["type"] == "job.failed":
            return f" and failed ({_t(e)})"
    return ""


def one_email(job_id: str, rec: dict, history: list[Event]) -> tuple[str, list[Event]] | None:
    sent = [e for e in history if e["type"] == "email.sent"]
    if len(sent) == 1:
        return None
    if not sent:
        return f"job {job_id}: no email — {_ending(rec)}", []
    words = {2: "two", 3: "three", 4: "four"}.get(len(sent), str(len(sent)))
    parts = [f"attempt {e.get('attempt')} sent at {_t(e)}{_fate(e.get('attempt', 0), history, e)}" for e in sent]
    return f"job {job_id}: {words} emails — " + "; ".join(parts), sent


def one_output(job_id: str, rec: dict, history: list[Event]) -> tuple[str, list[Event]] | None:
    written = [e for e in history if e["type"] == "output.written"]
    paths: dict[str, Event] = {}
    for e in written:
        paths.setdefault(e["data"].get("path", ""), e)
    if len(paths) == 1:
        return None
    if not paths:
        return f"job {job_id}: no output — {_ending(rec)}", []
    parts = [f"attempt {e.get('attempt')} wrote {p} at {_t(e)}" for p, e in paths.items()]
    return f"job {job_id}: {len(paths)} different outputs — " + "; ".join(parts), list(paths.values())


def every_job_done(job_id: str, rec: dict, history: list[Event]) -> tuple[str, list[Event]] | None:
    if rec.get("state") == "done":
        return None
    told = [
        e
        for e in history
        if e["type"]
        in ("job.claimed", "job.crashed", "handler.backed_off", "job.failed", "job.dead_lettered", "job.lost")
    ][:8]
    parts = [
        f"{_WORDS.get(e['type'], e['type'])} (attempt {e.get('attempt')}, {_t(e)})"
        + (f": {e['data'].get('error')}" if e["type"] == "job.failed" else "")
        for e in told
    ]
    return f"job {job_id}: never finished ({_ending(rec)}) — " + "; ".join(parts), told


def one_at_a_time(job_id: str, rec: dict, history: list[Event]) -> tuple[str, list[Event]] | None:
    runs = sorted(
        ((float(e["data"]["began"]), e["t_sim"], e) for e in history if e["type"] == "handler.transcoded"),
        key=lambda x: (x[0], x[1]),
    )
    latest: tuple[float, float, Event] | None = None  # the earlier work that ends last
    for b2, e2, ev2 in runs:
        if latest is not None and b2 < latest[1] - 1e-6 and latest[2].get("attempt") != ev2.get("attempt"):
            b1, e1, ev1 = latest
            return (
                f"job {job_id}: two attempts transcoding at once — attempt {ev1.get('attempt')} from t = {b1:g} s "
                f"to {e1:g} s; attempt {ev2.get('attempt')} from t = {b2:g} s"
            ), [ev1, ev2]
        if latest is None or e2 > latest[1]:
            latest = (b2, e2, ev2)
    return None


def finished_within(limit: float) -> Callable[[str, dict, list[Event]], Found]:
    def rule(job_id: str, rec: dict, history: list[Event]) -> Found:
        if _poison(rec):
            return None
        created = float(rec.get("created_at") or 0)
        done = [e for e in history if e["type"] == "job.succeeded"]
        if rec.get("state") == "done" and done and done[0]["t_sim"] - created <= limit + 1e-6:
            return None
        if not done:
            return f"job {job_id}: not finished within {limit:g} s ({_ending(rec)})", []
        late = done[0]["t_sim"] - created
        return (
            f"job {job_id}: finished at {_t(done[0])}, {late:g} s after it was enqueued (its deadline is {limit:g} s)"
        ), done[:1]

    return rule


def dlq_only_poison(job_id: str, rec: dict, history: list[Event]) -> Found:
    dead = [e for e in history if e["type"] == "job.dead_lettered"]
    if _poison(rec) and rec.get("state") != "dlq":
        return f"job {job_id} (the poison pill): {_ending(rec)} — it never reached the DLQ", []
    if not _poison(rec) and dead:
        return (
            f"job {job_id}: dead-lettered at {_t(dead[0])} ({dead[0]['data'].get('reason', '')}), though only "
            "its storage was down"
        ), dead[:1]
    return None


def busiest_second(limit: int) -> Callable[[list[str], dict[str, dict], list[Event]], Found]:
    def rule(job_ids: list[str], records: dict[str, dict], events: list[Event]) -> Found:
        buckets: dict[int, list[Event]] = defaultdict(list)
        for e in events:
            if e["type"] == "storage.called" and e.get("job_id") in records and (e["data"].get("try") or 1) > 1:
                buckets[math.floor(e["t_sim"])].append(e)
        if not buckets:
            return None
        second, calls = max(buckets.items(), key=lambda b: (len(b[1]), -b[0]))
        if len(calls) <= limit:
            return None
        jobs = sorted({e["job_id"] for e in calls}, key=lambda j: int(j) if j.isdigit() else 0)
        tries = sorted({e["data"].get("try") for e in calls if e["data"].get("try")})
        return (
            f"storage took {len(calls)} retried calls in the second from t = {second:g} s (the limit is {limit}): "
            f"parts of job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)}, at try {', '.join(map(str, tries))}"
        ), calls

    return rule


def _by_tick(records: dict[str, dict], events: list[Event]) -> dict[int, list[Event]]:
    """The run's emails by the tick their subject names ("… tick 3 …"; 0: none)."""
    by_tick: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        if e["type"] == "email.sent" and e.get("job_id") in records:
            m = re.search(r"\btick (\d+)\b", str(e["data"].get("subject", "")))
            by_tick[int(m.group(1)) if m else 0].append(e)
    return by_tick


def _who(e: Event, records: dict[str, dict]) -> str:
    """Which job sent it, and (a job a scheduler replica fired) which replica fired it for which tick."""
    fired = json.loads(records.get(e["job_id"], {}).get("payload") or "{}").get("input") or {}
    by = f", fired by replica {fired['replica']} for tick {fired['tick']}" if "replica" in fired else ""
    return f"job {e['job_id']} (attempt {e.get('attempt')}{by}) at {_t(e)}"


def every_tick(ticks: float) -> Callable[[list[str], dict[str, dict], list[Event]], Found]:
    """Every tick 1 … `ticks` of the schedule sent its email (a tick nobody fired is caught up)."""

    def rule(job_ids: list[str], records: dict[str, dict], events: list[Event]) -> Found:
        by_tick = _by_tick(records, events)
        missing = [t for t in range(1, int(ticks) + 1) if not by_tick.get(t)]
        if not missing:
            return None
        return f"tick {missing[0]}: no email — no replica ran it" + (
            f" (nor ticks {', '.join(map(str, missing[1:]))})" if missing[1:] else ""
        ), []

    return rule


def no_double_tick(ticks: float) -> Callable[[list[str], dict[str, dict], list[Event]], Found]:
    """No tick sent two emails, and none was sent for a tick the schedule does not have."""

    def rule(job_ids: list[str], records: dict[str, dict], events: list[Event]) -> Found:
        by_tick = _by_tick(records, events)
        for tick in sorted(by_tick):
            sent = by_tick[tick]
            if not 1 <= tick <= ticks:
                return f"an email for tick {tick}, which the schedule does not have: {_who(sent[0], records)}", sent[:1]
            if len(sent) > 1:
                return f"tick {tick}: {len(sent)} emails — " + "; ".join(_who(e, records) for e in sent), sent
        return None

    return rule


_WORDS = {
    "job.claimed": "claimed",
    "job.crashed": "killed",
    "handler.backed_off": "backed off",
    "job.failed": "failed",
    "job.dead_lettered": "dead-lettered",
    "job.lost": "lost",
}


def _ending(rec: dict) -> str:
    state = rec.get("state", "?")
    if state not in ("done", "dlq", "lost"):
        return f"still {state} when the run's time was up"
    if state == "dlq":
        return f"dead-lettered: {rec.get('dlq_reason') or 'out of receives'}"
    return {"done": "it was acked", "lost": "it was lost"}.get(state, f"it is {state}")


JobRule = Callable[[str, dict, list[Event]], Found]
RunRule = Callable[[list[str], dict[str, dict], list[Event]], Found]
# name → (title, rule of one job's history) or, for a `run` rule, of the whole run's; a name may carry a number
# after a colon ("finished_within:900"), which the title and the rule take
INVARIANTS: dict[str, tuple[str, Callable[..., Any], str]] = {
    "every_job_done": ("Every job finishes", lambda: every_job_done, "job"),
    "one_output": ("One output per job", lambda: one_output, "job"),
    "one_email": ("One email per job", lambda: one_email, "job"),
    "one_at_a_time": ("No job runs twice at once", lambda: one_at_a_time, "job"),
    "finished_within": ("Every job finishes within {n:g} s of its upload", finished_within, "job"),
    "busiest_second": ("Storage takes at most {n:g} retried calls in any second", busiest_second, "run"),
    "dlq_only_poison": ("The DLQ takes only the poison pill", lambda: dlq_only_poison, "job"),
    "every_tick": ("Each of the {n:g} ticks sends its email", every_tick, "run"),
    "no_double_tick": ("No tick sends two emails", no_double_tick, "run"),
}


def title_of(name: str) -> str:
    base, _, n = name.partition(":")
    return INVARIANTS[base][0].format(n=float(n)) if n else INVARIANTS[base][0]


def _rule(name: str) -> tuple[Callable[..., Found], str]:
    base, _, n = name.partition(":")
    _title, make, scope = INVARIANTS[base]
    return (make(float(n)) if n else make()), scope


def check(names: list[str], job_ids: list[str], records: dict[str, dict], events: list[Event]) -> list[dict]:
    """Each named invariant over the run's jobs: {id, title, held, counterexample?: {job, text, events}}."""
    by_job: dict[str, list[Event]] = {j: [] for j in job_ids}
    for e in events:
        if e.get("job_id") in by_job:
            by_job[e["job_id"]].append(e)
    out = []
    for name in names:
        rule, scope = _rule(name)
        broken = []
        if scope == "run":
            found = rule(job_ids, records, events)
            if found is not None:
                broken.append((0, (found[1][0].get("job_id") if found[1] else "") or "", found))
        else:
            for j in job_ids:
                found = rule(j, records.get(j, {}), by_job[j])
                if found is not None:
                    broken.append((len(by_job[j]), j, found))
        result: dict[str, Any] = {"id": name.partition(":")[0], "title": title_of(name), "held": not broken}
        if broken:
            _n, j, (text, cited) = min(broken, key=lambda b: (b[0], int(b[1]) if b[1].isdigit() else 0))
            cited = [e for e in cited if e.get("job_id") == j] if scope == "run" else cited
            result["counterexample"] = {
                "job": j,
                "text": text,
                "events": [e["id"] for e in cited],
                "attempts": sorted({e["attempt"] for e in cited if e.get("attempt")}),
                "broken_in": len(broken),
            }
        out.append(result)
    return out
