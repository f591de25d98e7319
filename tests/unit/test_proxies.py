"""TRUSTED_PROXIES: behind a reverse proxy the client's own address (rate limits) and the public host
(join links, QR codes, origin checks) come from the proxy's headers; without one, those headers are
anyone's to forge and are ignored."""

from flask import jsonify, request

from app import create_app
from core.config import Config

FORWARDED = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Host": "lab.example.org", "X-Forwarded-Proto": "https"}


def seen_by(trusted: int) -> dict:
    app = create_app(Config(testing=True, redis_url="redis://127.0.0.1:1/0", trusted_proxies=trusted))
    app.add_url_rule("/_seen", "seen", lambda: jsonify(ip=request.remote_addr, url=request.host_url, host=request.host))
    return app.test_client().get("/_seen", headers=FORWARDED, environ_base={"REMOTE_ADDR": "10.0.0.2"}).get_json()


def test_behind_one_trusted_proxy_the_client_and_public_host_are_the_forwarded_ones():
    assert seen_by(1) == {"ip": "203.0.113.7", "url": "https://lab.example.org/", "host": "lab.example.org"}


def test_without_a_trusted_proxy_forwarded_headers_are_ignored():
    assert seen_by(0) == {"ip": "10.0.0.2", "url": "http://localhost/", "host": "localhost"}
