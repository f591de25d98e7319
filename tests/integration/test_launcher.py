"""The README's first command: everything comes up, /healthz says ok, Ctrl-C leaves no process behind."""

import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from runtime.embedded_redis import free_port

ROOT = Path(__file__).resolve().parents[2]


def processes_mentioning(*needles: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state in ("Z", "X"):  # exited, not yet reaped (this box's pid 1 reaps orphans late): runs nothing
            continue
        if any(n in cmd for n in needles):
            found.append(f"{pid}: {cmd[:120]}")
    return found


def test_the_launcher_starts_everything_and_ctrl_c_stops_everything(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(PORT=str(port), VAR_DIR=str(tmp_path / "var"))
    errors = (tmp_path / "stderr").open("w+")
    out = tmp_path / "stdout"  # a file, read until it says where to go: a pipe's readline could block forever
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.launcher"],
        cwd=ROOT,
        env=env,
        stdout=out.open("w"),
        stderr=errors,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    deadline = time.monotonic() + 90
    while not re.search(r"open http://\S+\n", text := out.read_text()) and proc.poll() is None:
        assert time.monotonic() < deadline, (
            "the launcher never printed its URL: " + text + (tmp_path / "stderr").read_text()
        )
        time.sleep(0.1)
    url = next(iter(re.findall(r"open (http://\S+)\n", text)), None)
    redis_url = next(iter(re.findall(r"embedded Redis-protocol server \(valkey\) on (\S+)", text)), None)
    assert url, text + (tmp_path / "stderr").read_text()
    assert redis_url and (tmp_path / "var" / "redis").is_dir()
    # a clean start says nothing alarming (gevent's MonkeyPatchWarning about ssl used to print on every one)
    assert "Warning" not in (tmp_path / "stderr").read_text(), (tmp_path / "stderr").read_text()
    with urllib.request.urlopen(url + "/healthz") as r:
        health = json.load(r)
    assert health["ok"] is True
    assert health["master"] == json.loads((tmp_path / "var" / "launcher.json").read_text())["web"], health
    req = urllib.request.Request(
        url + "/api/labs", data=b'{"preset": "ch1"}', method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req) as r:
        assert r.status == 201
    redis_port = redis_url.rsplit(":", 1)[1].split("/")[0]
    needles = (f"127.0.0.1:{redis_port}", f"127.0.0.1:{port}", str(tmp_path))
    deadline = time.monotonic() + 30
    while len(processes_mentioning(*needles)) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)  # valkey, gunicorn (master + worker), rq workers
    assert len(processes_mentioning(*needles)) >= 4
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group, every process at once
    proc.wait(30)
    deadline = time.monotonic() + 10
    while processes_mentioning(*needles) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(*needles) == []
    errors.close()
    said = out.read_text() + (tmp_path / "stderr").read_text()
    assert "Traceback" not in said and "stopped" in said, said  # a quiet stop: no process dies with a traceback


def test_the_launcher_refuses_a_port_another_process_holds(tmp_path):
    port = free_port()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env.update(PORT=str(port), VAR_DIR=str(tmp_path / "var"))
        res = subprocess.run(
            [sys.executable, "-m", "runtime.launcher"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
    assert res.returncode != 0, res.stdout + res.stderr
    assert f"port {port}" in res.stderr and "already in use" in res.stderr, res.stderr
    assert "running" not in res.stdout, res.stdout
    assert not (tmp_path / "var" / "redis").exists(), "it started a server before checking its port"


def test_another_apps_healthz_on_the_port_does_not_pass_for_the_launchers_own_gunicorn():
    """The port check races with any other program: the launcher also waits for an answer from a worker
    of its own gunicorn master, not just any `{"ok": true}`."""
    from runtime.launcher import wait_healthy

    class Impostor(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"ok": True, "master": 1}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        wait_healthy(url, [], timeout=5)  # without a master to match, any ok passes
        with pytest.raises(RuntimeError, match="another program"):
            wait_healthy(url, [], timeout=3, master=os.getpid())
    finally:
        server.shutdown()
        server.server_close()


def test_a_pool_host_on_its_own_machine_restarts_its_supervisor(tmp_path):
    """`python -m runtime.launcher pool`: only the supervisor, against a shared server, healed the same way."""
    from runtime import embedded_redis

    server = embedded_redis.start(tmp_path / "redis")
    var = tmp_path / "pool-var"
    env = dict(os.environ, REDIS_URL=server.url, VAR_DIR=str(var))
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.launcher", "pool"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        status_file = var / "launcher.json"

        def status() -> dict:
            try:
                return json.loads(status_file.read_text())
            except (OSError, ValueError):
                return {}

        deadline = time.monotonic() + 60
        while not status().get("supervisor") and time.monotonic() < deadline:
            time.sleep(0.2)
        first = status()
        assert first.get("supervisor") and "web" not in first and first["redis"] is None, first
        os.kill(first["supervisor"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            status().get("supervisor") not in (None, first["supervisor"]) and status()["restarts"]["supervisor"] == 1
        ):
            time.sleep(0.2)
        healed = status()
        assert healed["supervisor"] not in (None, first["supervisor"]), healed
        assert healed["restarts"]["supervisor"] == 1 and os.path.exists(f"/proc/{healed['supervisor']}")
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=30)[0]
        server.stop()
    assert "supervisor exited" in out and "supervisor restarted" in out, out
    assert not os.path.exists(f"/proc/{healed['supervisor']}"), "the supervisor outlived its launcher"


def test_a_pool_host_without_a_shared_server_says_so():
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    res = subprocess.run(
        [sys.executable, "-m", "runtime.launcher", "pool"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "REDIS_URL" in res.stderr
