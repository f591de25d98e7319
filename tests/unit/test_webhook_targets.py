"""Webhook signing checked by an independent hand-written Standard Webhooks verifier; SSRF targets refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from core.webhook_targets import TargetRefused, new_secret, sign, validate_target


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Written from the Standard Webhooks spec, not from app code: space-separated `v1,<sig>` list, any may match."""
    key = base64.b64decode(secret.split("_", 1)[1])
    signed = ".".join([headers["webhook-id"], headers["webhook-timestamp"], body.decode()]).encode()
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    candidates = [s.split(",", 1)[1] for s in headers["webhook-signature"].split(" ") if s.startswith("v1,")]
    return any(hmac.compare_digest(expected, c) for c in candidates)


def test_signature_verifies_and_tamper_fails():
    secret = new_secret()
    assert secret.startswith("whsec_")
    body = json.dumps({"type": "job.done", "job": "j1"}).encode()
    headers = sign(secret, "msg_1", 1_700_000_000, body)
    assert verify(secret, headers, body)
    assert not verify(secret, headers, body + b" ")
    assert not verify(new_secret(), headers, body)
    assert not verify(secret, {**headers, "webhook-timestamp": "1700000001"}, body)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/hook", "http://10.1.2.3/hook", "http://169.254.169.254/latest/meta-data",
    "http://[::1]/hook", "http://localhost:8000/hook", "http://0.0.0.0/", "http://224.0.0.1/",
    "http://[::ffff:127.0.0.1]/", "http://192.168.0.5/",
])
def test_internal_targets_refused(url):
    with pytest.raises(TargetRefused) as err:
        validate_target(url)
    assert err.value.code == "callback_forbidden"


@pytest.mark.parametrize("url", ["ftp://example.com/", "not a url", "http:///nohost"])
def test_malformed_urls_refused(url):
    with pytest.raises(TargetRefused) as err:
        validate_target(url)
    assert err.value.code == "bad_callback_url"


def test_public_literal_allowed_and_own_receiver_exempt():
    assert validate_target("http://93.184.216.34/hook") == ["93.184.216.34"]
    own = "http://127.0.0.1:5000/api/labs/x/webhooks/receiver"
    assert validate_target(own, allow_prefixes=("http://127.0.0.1:5000/api/labs/x/webhooks/receiver",)) == []
