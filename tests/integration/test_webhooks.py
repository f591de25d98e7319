"""Chapter 3's webhooks against the real stack: signed per Standard Webhooks (checked by the reference
`standardwebhooks` library and by a hand-written verifier), retried with full jitter while a receiver
fails, never redirected, and refused for internal targets."""

from __future__ import annotations

import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook

from tests.helpers import sim_time_passes
from tests.unit.test_webhook_targets import verify as hand_verify


class HookServer(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, port: int):
        self.requests: list[dict] = []
        self.fail_next = 0
        super().__init__(("127.0.0.1", port), HookHandler)


class HookHandler(BaseHTTPRequestHandler):
    server: HookServer

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append(
            {"path": self.path, "headers": dict(self.headers.items()), "body": body, "at": time.time()}
        )
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/landed")
        elif self.server.fail_next > 0:
            self.server.fail_next -= 1
            self.send_response(500)
        else:
            self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_server(stack):
    """A receiver on the one loopback port the stack's test-only allowlist names."""
    server = HookServer(int(os.environ["LAB_TEST_HOOK_PORT"]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def hook_url(path: str = "/hook") -> str:
    return f"http://127.0.0.1:{os.environ['LAB_TEST_HOOK_PORT']}{path}"


def register(api, lab: dict, url: str, **extra):
    return api.call("PUT", f"/api/labs/{lab['lab_id']}/webhook", {"url": url, **extra}, lab["token"])


def run_job(api, lab: dict) -> str:
    res = api.call("POST", f"/api/labs/{lab['lab_id']}/jobs", {"sample": "carphone_pristine"}, lab["token"])
    assert res.status == 202, res.body
    return res.json()["job_id"]


def wait_until(predicate, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)
    return value


def webhook_state(api, lab: dict) -> dict:
    return api.call("GET", f"/api/labs/{lab['lab_id']}/webhook", token=lab["token"]).json()


def test_a_finished_job_is_delivered_to_the_built_in_receiver_and_verified(api):
    lab = api.lab("ch3", speed=200, workers=1, job_duration=20)
    reg = register(api, lab, "builtin")
    assert reg.status == 200 and reg.json()["secret"].startswith("whsec_")
    job_id = run_job(api, lab)
    state = wait_until(lambda: (s := webhook_state(api, lab))["arrivals"] and s)
    arrival = state["arrivals"][0]
    assert arrival["verified"] and arrival["answered"] == 200 and arrival["type"] == "job.done"
    assert arrival["job_id"] == job_id and arrival["delay_ms"] >= 0 and not arrival["duplicate"]
    msg = wait_until(lambda: [m for m in webhook_state(api, lab)["messages"] if m["state"] == "delivered"])[0]
    assert msg["job_id"] == job_id and len(msg["tries"]) == 1 and "secret" not in state
    kinds = [e["type"] for e in api.events(lab)]
    assert kinds.index("job.succeeded") < kinds.index("webhook.received") < kinds.index("webhook.delivered")


def test_a_dead_lettered_job_is_announced_as_job_dead(api):
    lab = api.lab("ch3", speed=200, workers=1, vt_seconds=10, max_attempts=1)
    register(api, lab, "builtin")
    poison = api.call("POST", f"/api/labs/{lab['lab_id']}/faults", {"type": "poison"}, lab["token"])
    assert poison.status == 202, poison.body
    arrival = wait_until(lambda: webhook_state(api, lab)["arrivals"])[0]
    assert arrival["type"] == "job.dead" and arrival["job_id"] == poison.json()["job_id"] and arrival["verified"]


def test_a_delivery_to_an_allowlisted_server_verifies_with_the_reference_library(api, hook_server):
    lab = api.lab("ch3", speed=200, workers=1, job_duration=20)
    secret = register(api, lab, hook_url()).json()["secret"]
    job_id = run_job(api, lab)
    got = wait_until(lambda: hook_server.requests)[0]
    payload = Webhook(secret).verify(got["body"], got["headers"])  # raises unless the signature is valid
    assert payload["type"] == "job.done" and payload["data"]["job_id"] == job_id
    assert payload["data"]["status"] == "done" and payload["data"]["result_urls"]
    lower = {k.lower(): v for k, v in got["headers"].items()}
    assert hand_verify(secret, lower, got["body"])
    assert not hand_verify(secret, lower, got["body"].replace(b"done", b"dead"))


def test_a_failing_receiver_gets_the_same_message_again_after_jittered_delays(api, hook_server):
    lab = api.lab(
        "ch3", speed=200, workers=1, job_duration=20, retry_base=10, retry_cap=300, max_attempts=6, jitter_seed=7
    )
    hook_server.fail_next = 3
    register(api, lab, hook_url())
    run_job(api, lab)
    msg = wait_until(lambda: [m for m in webhook_state(api, lab)["messages"] if m["state"] == "delivered"])[0]
    tries = msg["tries"]
    assert [t["status"] for t in tries] == [500, 500, 500, 204]
    delays = [t["next_delay_s"] for t in tries[:3]]
    for n, d in enumerate(delays, start=1):
        assert 0 <= d <= min(300, 10 * 2 ** (n - 1)), f"try {n}'s delay is outside full jitter's range"
    assert len(set(delays)) == 3 and delays != [10, 20, 40], "the delays are drawn, not the fixed ladder"
    ids = {r["headers"]["webhook-id"] for r in hook_server.requests}
    assert len(hook_server.requests) == 4 and len(ids) == 1, "every retry carries the same webhook-id"
    arrived = [r["at"] for r in hook_server.requests]
    for n, d in enumerate(delays):  # each retry waited at least its drawn delay on the lab's clock (200x)
        assert arrived[n + 1] - arrived[n] >= d / 200 - 0.01
    counts = api.snapshot(lab)["counts"]
    assert counts["webhook_failures"] == 3 and counts["webhooks_delivered"] == 1


def test_a_paused_lab_holds_its_webhook_retries_until_it_resumes(api, hook_server):
    # retries wait on the lab's clock: each full-jitter delay is at most 1,000 sim s (5 real s at 200x), so
    # a paused lab that still retried would send every remaining try in the 5 real s it stays paused
    lab = api.lab("ch3", speed=200, workers=1, job_duration=20, retry_base=1000, retry_cap=1000, max_attempts=6)
    hook_server.fail_next = 3
    register(api, lab, hook_url())
    run_job(api, lab)
    wait_until(lambda: hook_server.requests)
    clock = f"/api/labs/{lab['lab_id']}/clock"
    paused = api.call("POST", clock, {"action": "pause"}, lab["token"]).json()["clock"]["t"]

    # a try already on the wire, or due before the pause (a full-jitter delay can be near 0), still lands:
    # count from once every try sent is recorded and the next one is due after the paused instant
    def settled() -> bool:
        tries = sum(len(m["tries"]) for m in webhook_state(api, lab)["messages"])
        waits = [e for e in api.events(lab) if e["type"] == "webhook.attempted"]
        return (
            tries == len(hook_server.requests)
            and len(waits) == tries
            and waits[-1]["t_sim"] + waits[-1]["data"]["delay"] > paused
        )

    wait_until(settled)
    held = len(hook_server.requests)
    if held >= 4:
        pytest.fail("every try went out before the pause: nothing left to hold")
    sim_time_passes(api, 200, 1000)  # 1,000 sim s on a running clock: every remaining try would be due
    assert len(hook_server.requests) == held, "a retry went out while the lab's clock was paused"
    assert api.call("POST", clock, {"action": "resume"}, lab["token"]).status == 200
    msg = wait_until(lambda: [m for m in webhook_state(api, lab)["messages"] if m["state"] == "delivered"])[0]
    assert [t["status"] for t in msg["tries"]] == [500, 500, 500, 204]


def test_the_built_in_receivers_fail_switch_makes_retries_visible(api):
    lab = api.lab("ch3", speed=200, workers=1, job_duration=20, max_attempts=5)
    register(api, lab, "builtin", fail_times=2)
    run_job(api, lab)
    wait_until(lambda: [m for m in webhook_state(api, lab)["messages"] if m["state"] == "delivered"])
    arrivals = list(reversed(webhook_state(api, lab)["arrivals"]))
    assert [a["answered"] for a in arrivals] == [500, 500, 200]
    assert len({a["msg_id"] for a in arrivals}) == 1 and all(a["verified"] for a in arrivals)


def test_a_redirect_is_not_followed(api, hook_server):
    lab = api.lab("ch3", speed=200, workers=1, job_duration=20, max_attempts=1)
    register(api, lab, hook_url("/redirect"))
    run_job(api, lab)
    msg = wait_until(lambda: [m for m in webhook_state(api, lab)["messages"] if m["state"] == "abandoned"])[0]
    assert msg["tries"][0]["status"] == 302 and "not followed" in msg["tries"][0]["reason"]
    assert [r["path"] for r in hook_server.requests] == ["/redirect"], "the Location was never fetched"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://10.0.0.7/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://localhost/hook",
        "http://2130706433/hook",
        "http://[::ffff:127.0.0.1]/",
    ],
)
def test_internal_targets_are_refused_at_registration(api, url):
    lab = api.lab("ch3", speed=50, workers=0)
    res = register(api, lab, url)
    assert res.status == 400 and res.json()["error"] == "callback_forbidden", res.body
    assert not webhook_state(api, lab)["registered"]


def test_the_allowlist_is_one_exact_prefix_not_all_of_loopback(api, stack):
    lab = api.lab("ch3", speed=50, workers=0)
    port = int(os.environ["LAB_TEST_HOOK_PORT"])
    own_api = f"{stack.url}/api/labs/{lab['lab_id']}/jobs"  # the app itself is not a callback target
    for url in (own_api, f"http://127.0.0.1:{port + 1}/hook", f"http://localhost:{port}/hook"):
        assert register(api, lab, url).status == 400, url
    assert register(api, lab, hook_url()).status == 200


def test_bad_registrations_and_unsigned_calls_get_clear_errors(api):
    lab = api.lab("ch3", speed=50, workers=0)
    assert register(api, lab, "").status == 422
    assert register(api, lab, "ftp://example.com/").status == 400
    assert register(api, lab, "builtin", fail_times=99).status == 422
    assert api.call("PUT", f"/api/labs/{lab['lab_id']}/webhook", {"url": "builtin"}, lab["view_token"]).status == 403
    register(api, lab, "builtin")
    receiver = f"/api/labs/{lab['lab_id']}/webhook/receiver"
    forged = api.call(
        "POST",
        receiver,
        {"type": "job.done"},
        headers={"webhook-id": "msg_x", "webhook-timestamp": str(int(time.time())), "webhook-signature": "v1,AAAA"},
    )
    assert forged.status == 401 and forged.json()["error"] == "bad_signature"
    assert api.call("POST", receiver, {"type": "job.done"}).status == 401
    assert webhook_state(api, lab)["arrivals"][0]["verified"] is False
    assert "webhook.received" not in [e["type"] for e in api.events(lab)]
    assert api.call("POST", "/api/labs/nolab/webhook/receiver", {}).status == 404


class SilentServer:
    """Accepts every connection on the test's hook port and never answers (until closed)."""

    def __init__(self, port: int):
        self.sock = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.sock.settimeout(0.2)
        self.held: list[socket.socket] = []
        self.running = True
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.held.append(conn)

    def close(self) -> None:
        self.running = False
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent_server(stack):
    server = SilentServer(int(os.environ["LAB_TEST_HOOK_PORT"]))
    yield server
    server.close()


def test_a_silent_target_delays_only_its_own_labs_messages(api, silent_server):
    """Lab A's target accepts and never answers, so each of its tries lasts the whole timeout. Before, one
    thread sent every lab's tries, so lab B's built-in delivery waited behind all of A's (0.6 s → 26.5 s).
    Now each lab has its own turn: B's try starts while one of A's is still in flight."""
    a = api.lab("ch3", speed=200, workers=1, job_duration=20)
    b = api.lab("ch3", speed=200, workers=1, job_duration=20)
    api.workers_ready(b, 1)
    register(api, a, hook_url("/silent"))
    register(api, b, "builtin")
    for _ in range(3):
        run_job(api, a)
    wait_until(lambda: silent_server.held)  # one of A's tries is in flight now
    run_job(api, b)
    b_msg = wait_until(lambda: [m for m in webhook_state(api, b)["messages"] if m["state"] == "delivered"])[0]
    b_sent = b_msg["tries"][0]["t_real"]

    def ends() -> dict[tuple[str, int], float]:
        """When each of A's finished tries ended (its webhook.attempted or .gave_up event)."""
        return {
            (e["data"]["msg"], e["data"]["try"]): e["t_real"]
            for e in api.events(a)
            if e["type"] in ("webhook.attempted", "webhook.gave_up")
        }

    wait_until(lambda: any(t > b_sent for t in ends().values()))  # every A try begun before B's has ended
    done = ends()
    spans = [
        (t["t_real"], done[(m["msg_id"], t["try"])])
        for m in webhook_state(api, a)["messages"]
        for t in m["tries"]
        if (m["msg_id"], t["try"]) in done
    ]
    assert spans and all(t["status"] is None for m in webhook_state(api, a)["messages"] for t in m["tries"])
    assert any(start <= b_sent <= end for start, end in spans), (b_sent, spans)
