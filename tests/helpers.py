"""Small helpers the integration and lesson tests share: events by type, a job enqueued, chapter 7's
schedule read, changed and waited on (all through the public HTTP contract); and what a connection costs the
server (its own per-client count, and the requests a client sends), and what it answers a command."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence

import redis
from redis.connection import Connection


def commands_run(r, **match: str | set[str]) -> int:
    """Commands the server has run so far for the connections whose `CLIENT LIST` fields match (`id="7"`,
    `name="x"`, or a set: `addr={...}`): its own per-client count, `tot-cmds`, where MULTI and EXEC count, and
    each command of a pipeline."""

    def picked(c: dict) -> bool:
        return all(c.get(f) in v if isinstance(v, set) else c.get(f) == v for f, v in match.items())

    return sum(int(c["tot-cmds"]) for c in r.client_list() if picked(c))


def round_trips(monkeypatch, *clients) -> Callable[[], int]:
    """From now on, the requests `clients` send the server, counted (a pipeline is one, as a script's call is):
    read the count by calling what this returns."""
    sent = [0]
    send = Connection.send_packed_command
    pools = [c.connection_pool for c in clients]

    def counted(conn, command, check_health=True):
        if any(conn in p._available_connections or conn in p._in_use_connections for p in pools):
            sent[0] += 1
        return send(conn, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counted)
    return lambda: sent[0]


def requests_sent(client, monkeypatch) -> list[str]:
    """From now on, the name of each request `client` sends the server (a script's call is one)."""
    sent: list[str] = []
    send = client.execute_command
    monkeypatch.setattr(client, "execute_command", lambda *a, **kw: sent.append(a[0]) or send(*a, **kw))
    return sent


def types(events: list[dict], t: str) -> list[dict]:
    return [e for e in events if e["type"] == t]


def enqueue(api, lab: dict, **body) -> str:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", body, lab["token"])
    assert res.status == 202, res.body
    return res.json()["job_id"]


def sched(api, lab: dict) -> dict:
    res = api.call("GET", f"/api/labs/{lab['lab_id']}/schedule", token=lab["token"])
    assert res.status == 200, res.body
    return res.json()


def control(api, lab: dict, **body) -> dict:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/schedule", body, lab["token"])
    assert res.status == 200, res.body
    return res.json()


def wait_sched(api, lab: dict, predicate: Callable[[dict], bool], timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    rep = sched(api, lab)
    while not predicate(rep):
        if time.monotonic() > deadline:
            last = [(e["t_sim"], e["type"], e["data"]) for e in api.events(lab)[-12:]]
            raise AssertionError(
                f"condition not met: totals={rep['totals']} ticks={rep['ticks'][-5:]} "
                f"replicas={rep['replicas']} last events={last}"
            )
        time.sleep(0.1)
        rep = sched(api, lab)
    return rep


def sim_time_passes(api, speed: float, sim_s: float, timeout: float = 60) -> None:
    """Wait until `sim_s` simulated seconds have passed on a running witness lab at `speed` (no workers).

    A check that nothing happens while a lab is paused needs a positive witness that enough time went by
    for it to have happened, not a guessed sleep: on a loaded box a real second is not a clock's second."""
    witness = api.lab("ch0", speed=speed, workers=0)
    try:
        start = api.snapshot(witness)["clock"]["t"]
        api.wait_for(
            witness,
            lambda s: s["clock"]["t"] >= start + sim_s,
            timeout=timeout,
            what=f"a witness lab's clock to run {sim_s:g} simulated s at {speed:g}×",
        )
    finally:
        api.delete(witness)


def long_polls_held(api, lab: dict, n: int, timeout: float = 20, polls: Sequence[threading.Thread] = ()) -> None:
    """Wait until the server holds exactly n of this lab's long-polls (so "still waiting" is a state the
    server reports, not a guess after a sleep). `polls`: the threads making them; one that has ended was
    answered without being held, which fails at once."""
    url = f"/api/labs/{lab['lab_id']}/status-load"
    deadline = time.monotonic() + timeout
    while (now := api.call("GET", url, token=lab["token"]).json()["long_polls_held"]) != n:
        ended = sum(not t.is_alive() for t in polls)
        assert not ended, f"{ended} of {len(polls)} long-polls answered at once, before anything changed"
        assert time.monotonic() < deadline, f"the server held {now} long-polls, never {n}, within {timeout:g} s"
        time.sleep(0.05)


def ws_until(
    ws, done: Callable[[list[dict]], bool], timeout: float = 60, what: str = "the awaited event"
) -> list[dict]:
    """The events a WebSocket pushes, read until done(events) holds, within one deadline for the whole read
    (each recv also gives up when the socket's own timeout passes)."""
    import json

    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while not done(events):
        assert time.monotonic() < deadline, f"{what} was not pushed within {timeout:g} s ({len(events)} events came)"
        events.append(json.loads(ws.recv()))
    return events


def readline_within(proc, timeout: float, what: str) -> str:
    """One line of a child's text stdout, or an assertion naming `what` if none came in time (a child that
    hangs before printing must not hang the test)."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout), f"{what}: no line within {timeout:g} s"
    return proc.stdout.readline()


def unfold(page, name: str, root: str = "#lab-widget") -> None:
    """Open one of the widget's folded panels (history, jobs, dlq, log, export) by its heading, as a
    learner would; one already open stays open."""
    from playwright.sync_api import expect

    fold = page.locator(f"{root} details[data-fold='{name}']")
    if fold.get_attribute("open") is None:
        fold.locator("summary").click()
    expect(fold).to_have_attribute("open", "")


def page_lab(page, preset: str) -> dict | None:
    """The lab a chapter page opened for its preset (kept in its localStorage), as {lab_id, token}."""
    saved = page.evaluate(f"localStorage.getItem('awl:lab:{preset}')")
    return {"lab_id": json.loads(saved)["id"], "token": json.loads(saved)["token"]} if saved else None


def delete_page_labs(page, api, presets: list[str], failed: bool = False) -> None:
    """Delete the labs a browser test's pages opened (workers, keys and files); when the test `failed`, each lab's
    event stream is printed first (pytest shows it under the failure: what the lab did, not only what the page
    showed)."""
    for preset in presets:
        lab = page_lab(page, preset)
        if lab:
            if failed:
                tell_events(api, lab)
            api.call("DELETE", f"/api/labs/{lab['lab_id']}", token=lab["token"])


def tell_events(api, lab: dict) -> None:
    """Print the lab's events, one line each: real and simulated time, type, job, attempt, worker and the rest."""
    got = api.call("GET", f"/api/labs/{lab['lab_id']}/events", token=lab["token"])
    print(f"lab {lab['lab_id']}: {got.status}, {len(got.data['events']) if got.status == 200 else 0} events")
    for e in got.data["events"] if got.status == 200 else []:
        data = json.dumps(e.get("data") or {}, separators=(",", ":"))[:160]
        print(
            f"  {e.get('t_real')} t={e.get('t_sim')} {e.get('type')} job={e.get('job_id')}:{e.get('attempt')} "
            f"worker={e.get('worker_id')} {data}"
        )


def refusal(url: str, *command: str) -> str:
    """The server's answer to `command` from a client of `url`, as text ('' if it was carried out)."""
    r = redis.Redis.from_url(url, socket_timeout=10)
    try:
        r.execute_command(*command)
        return ""
    except redis.RedisError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        r.close()
