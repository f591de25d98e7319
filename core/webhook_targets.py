"""Signing and target validation for chapter 3 webhooks.

Signing follows Standard Webhooks so any compliant receiver can verify us: the secret is `whsec_` + base64 key,
the signed content is "id.timestamp.body", and the header is `v1,<base64 HMAC-SHA256>`. Target validation exists
because a callback URL is attacker-chosen: we resolve the host ourselves and refuse anything that would let a lab
reach into the machine or its network (SSRF), except the lab's own built-in receiver.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import socket
from urllib.parse import urlsplit

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh random signing secret in the Standard Webhooks `whsec_` format."""
    return SECRET_PREFIX + base64.b64encode(os.urandom(24)).decode()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Headers for one delivery; the body must be sent byte-for-byte as signed."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": f"v1,{digest}"}


NOT_GLOBAL = tuple(
    ipaddress.ip_network(n)
    for n in (
        # What `is_global` misses in Python 3.11, from the IANA IPv4/IPv6 special-purpose address registries:
        "100.64.0.0/10",  # shared address space (carrier-grade NAT): another customer's network, not the internet
        "192.0.0.0/24",  # IETF protocol assignments (3.11 knows only parts of it)
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
        "224.0.0.0/4",
        "ff00::/8",  # multicast: `is_global` says yes to 224.0.0.1
        "64:ff9b::/96",
        "64:ff9b:1::/48",  # NAT64: an IPv4 address (127.0.0.1 too) inside an IPv6 one
        "2002::/16",  # 6to4: likewise
        "2001::/32",  # Teredo: likewise
        "2001:2::/48",  # benchmarking
        "2001:db8::/32",
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing (SRv6) SIDs
        "fec0::/10",  # site-local (deprecated, still routed inside some networks)
        "::/96",  # IPv4-compatible (deprecated): an IPv4 address inside an IPv6 one
    )
)
"""Ranges refused although Python 3.11's `is_global` calls them global (see `blocked`)."""


def blocked(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True unless `addr` is globally routable: Python's `is_global` (the IANA special-purpose registries as
    3.11 knows them: private, loopback, link-local, benchmarking, documentation, reserved…) and `NOT_GLOBAL`
    on top. An IPv4-mapped IPv6 address is judged as the IPv4 address it carries."""
    mapped = getattr(addr, "ipv4_mapped", None)
    if mapped is not None:
        addr = mapped
    return not addr.is_global or any(addr in net for net in NOT_GLOBAL if net.version == addr.version)


class TargetRefused(ValueError):
    """A callback URL we will not call: `code` is `bad_callback_url` or `callback_forbidden`."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


def validate_target(url: str, allow_prefixes: tuple[str, ...] = ()) -> list[str]:
    """Check a callback URL and return the resolved addresses a delivery may connect to.

    URLs starting with one of `allow_prefixes` (the lab's own receiver) skip the address check. Every other host is
    resolved here and refused if ANY address is internal, so DNS tricks that mix public and loopback answers fail.
    """
    if any(url.startswith(p) for p in allow_prefixes):
        return []
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("bad_callback_url", "callback URL must be an absolute http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except (ValueError, OSError) as exc:
        raise TargetRefused("bad_callback_url", f"callback host does not resolve: {exc}") from exc
    addrs = sorted({str(info[4][0]) for info in infos})  # an IPv4/IPv6 sockaddr's host (typed str | int)
    for raw in addrs:
        if blocked(ipaddress.ip_address(raw.split("%")[0])):
            raise TargetRefused("callback_forbidden", f"callback host resolves to a non-public address ({raw})")
    return addrs
