"""Webhook signing checked by an independent hand-written Standard Webhooks verifier; SSRF targets refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json

import pytest

from core.webhook_targets import TargetRefused, blocked, new_secret, sign, validate_target


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


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://localhost:8000/hook",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://192.168.0.5/",
    ],
)
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


# Address by address, from the IANA IPv4 and IPv6 special-purpose address registries: every range that is not
# globally reachable is refused (the first address of each, and one inside), and ordinary public ones pass.
REFUSED = [
    "0.0.0.0",
    "0.1.2.3",  # "this network"
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.1.1",  # private
    "100.64.0.1",
    "100.127.255.254",  # shared address space (CGNAT)
    "127.0.0.1",
    "127.255.255.254",  # loopback
    "169.254.169.254",  # link-local (cloud metadata)
    "192.0.0.1",
    "192.0.0.9",
    "192.0.0.170",  # IETF protocol assignments, NAT64 discovery
    "192.0.2.1",
    "198.51.100.1",
    "203.0.113.1",  # documentation
    "192.88.99.1",  # 6to4 relay anycast
    "198.18.0.1",
    "198.19.255.254",  # benchmarking
    "224.0.0.1",
    "239.255.255.250",  # multicast
    "240.0.0.1",
    "255.255.255.255",  # reserved, limited broadcast
    "::",
    "::1",  # unspecified, loopback
    "::7f00:1",  # IPv4-compatible 127.0.0.1
    "::ffff:127.0.0.1",
    "::ffff:100.64.0.1",
    "::ffff:10.0.0.1",  # IPv4-mapped: judged as the IPv4 inside
    "64:ff9b::7f00:1",
    "64:ff9b::808:808",
    "64:ff9b:1::1",  # NAT64 (well-known and local-use)
    "100::1",  # discard-only
    "2001::1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    "2001:2::1",  # benchmarking
    "2001:10::1",  # ORCHID (deprecated)
    "2001:db8::1",
    "3fff::1",
    "3fff:fff::1",  # documentation
    "2002::1",
    "2002:7f00:1::1",  # 6to4 (the second carries 127.0.0.1)
    "5f00::1",  # segment routing SIDs
    "fc00::1",
    "fd12:3456::1",  # unique local
    "fe80::1",  # link-local
    "fec0::1",  # site-local (deprecated)
    "ff02::1",
    "ff0e::1",  # multicast, even global-scope
]
ALLOWED = [
    "8.8.8.8",
    "93.184.216.34",
    "1.1.1.1",
    "100.63.255.255",
    "100.128.0.1",
    "198.17.255.255",
    "198.20.0.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001::200e",
    "2620:fe::fe",
]


@pytest.mark.parametrize("raw", REFUSED)
def test_special_purpose_address_refused(raw):
    assert blocked(ipaddress.ip_address(raw))
    host = f"[{raw}]" if ":" in raw else raw
    with pytest.raises(TargetRefused) as err:
        validate_target(f"http://{host}/hook")
    assert err.value.code == "callback_forbidden"


@pytest.mark.parametrize("raw", ALLOWED)
def test_globally_routable_address_allowed(raw):
    assert not blocked(ipaddress.ip_address(raw))
    host = f"[{raw}]" if ":" in raw else raw
    assert validate_target(f"http://{host}/hook") == [raw]
