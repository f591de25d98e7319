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


def _blocked(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(addr, "ipv4_mapped", None)
    if mapped is not None:
        addr = mapped
    return (addr.is_private or addr.is_loopback or addr.is_link_local or addr.is_multicast
            or addr.is_unspecified or addr.is_reserved)


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
        if _blocked(ipaddress.ip_address(raw.split("%")[0])):
            raise TargetRefused("callback_forbidden", f"callback host resolves to a non-public address ({raw})")
    return addrs
