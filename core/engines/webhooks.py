"""Webhooks as both processes see them: a lab's registration, its messages and their due
tries, the built-in receiver's arrivals, and where that receiver answers. The delivering (a thread in the
pool supervisor) is workers/engines/webhooks.py."""

from __future__ import annotations

from core.keys import key

BUILTIN = "builtin"  # the registration value meaning "the lab's own receiver on this server"
KEEP = 200  # messages shown and receiver arrivals kept per lab
REGISTERED = "webhooks:registered"
"""The channel a registration is announced on (its lab id), which every pool host's delivering thread subscribes
to by name: a pattern over every lab's registration key would cost the server a match per host on every write."""


def hook(lab: str) -> str:
    """Registration hash: url, secret, cursor (last event turned into messages), receiver fail count."""
    return key(lab, "webhook")


def messages(lab: str) -> str:
    return key(lab, "webhook", "messages")


def due(lab: str) -> str:
    return key(lab, "webhook", "due")


def arrivals(lab: str) -> str:
    return key(lab, "webhook", "arrivals")


def seen(lab: str) -> str:
    """Message ids the built-in receiver has accepted: a second arrival of one is a duplicate."""
    return key(lab, "webhook", "seen")


def receiver_path(lab: str) -> str:
    return f"/api/labs/{lab}/webhook/receiver"
