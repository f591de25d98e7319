"""Who may do what to a lab: tokens from the Authorization header or the lab cookie, the CSRF rule
for cookie-only writes, and one `authorise()` that the API's decorator and the WebSocket upgrade share."""

from __future__ import annotations

from functools import wraps
from urllib.parse import urlsplit

import redis
from flask import current_app, request

from app import limits
from app.errors import ApiError
from app.http import valid_id
from app.store import get_redis
from core import registry
from core.disk import persist_refused


def bearer_token() -> str | None:
    auth = request.headers.get("Authorization", "")
    return auth[7:].strip() or None if auth.startswith("Bearer ") else None


def request_token(lab: str) -> str | None:
    return bearer_token() or request.cookies.get(f"lab_{lab}") or None


def page_host() -> str | None:
    """The host of the page behind this request as the browser names it: `Origin` (WebSocket
    upgrades, fetch/form POSTs) or at least `Referer`; a cross-site page cannot forge either. None
    when neither is sent, which is no proof of a browser, so callers decide about that."""
    origin = request.headers.get("Origin") or request.headers.get("Referer")
    return urlsplit(origin).netloc if origin is not None else None


def same_origin() -> bool:
    """Did this request come from one of our own pages?"""
    return page_host() == request.host


def refuse_cross_site() -> None:
    """CSRF: the lab cookie rides along on any request the browser makes, even one a foreign page
    starts, so a change authorised only by the cookie must come from our own origin. A Bearer
    token is never sent by the browser on its own, so it needs no such check."""
    if not same_origin():
        raise ApiError(
            403,
            "cross_site",
            "a change authorised by the lab cookie must come from this "
            "app's own pages (send Authorization: Bearer <token> from other clients)",
        )


def refuse_foreign_origin() -> None:
    """For calls that take no cookie (creating a lab or a room): a page on another site is refused, so a
    cross-site form post cannot spend a visitor's budget or the machine's; a client that names no page
    (curl, a script, a test) is not a browser riding on someone else's session and is let through."""
    host = page_host()
    if host is not None and host != request.host:
        raise ApiError(403, "bad_origin", "a call from another site's page was refused")


def authorise(lab_id: str, token: str | None, write: bool) -> registry.Access:
    """404 unknown lab, 401 no token, 403 wrong token (or a view token for a write); else what the lab's door
    read in its one round trip (the token's role, when the owner last called, whether the lab is parked)."""
    r = get_redis()
    well_formed = len(lab_id) <= 32 and valid_id(lab_id)
    seen = registry.access(r, lab_id, token, allow_view=not write) if well_formed else None
    if seen is None or not seen.exists:
        why = registry.gone_why(r, lab_id, current_app.config["LAB"].lab_idle_ttl) if well_formed else None
        if why:
            raise ApiError(404, "lab_expired", why)
        raise ApiError(404, "unknown_lab", f"no lab {lab_id!r}")
    if not token:
        raise ApiError(401, "missing_token", "send Authorization: Bearer <token>", {"WWW-Authenticate": "Bearer"})
    if seen.role is None:
        raise ApiError(403, "forbidden", "this token does not open this lab" + (" for changes" if write else ""))
    return seen


TOUCH_GAP_S = 5.0  # an owner call within this many seconds of the last one it recorded records nothing


def touch_gap(park_after: float) -> float:
    """How long an owner call's record of the lab's use stands: TOUCH_GAP_S, or a quarter of the parking delay
    when that is shorter (a lab is never parked for want of a call that was made)."""
    return min(TOUCH_GAP_S, park_after / 4) if park_after > 0 else TOUCH_GAP_S


def lab_access(write: bool, resume: bool = True):
    """Decorator for `/api/labs/<lab_id>/…` routes: authorise the request's token, and for a write
    apply the CSRF rule. Any owner call keeps the lab alive and counts as watching it (core/parking.py);
    with `resume`, a parked lab is resumed first (429 if its client's running-lab cap is taken)."""

    def deco(fn):
        @wraps(fn)
        def wrapper(lab_id: str, *a, **kw):
            seen = authorise(lab_id, request_token(lab_id), write)
            if write and bearer_token() is None:
                refuse_cross_site()
            if seen.role == "owner":
                try:
                    registry.touch(get_redis(), lab_id, seen.last, touch_gap(current_app.config["LAB"].park_after))
                except redis.ResponseError as e:
                    if write or not persist_refused(e):
                        raise
                    # the server's disk is full: a read still answers, without its record of the lab's use
            if resume and seen.parked:  # as read at the door, in the round trip that checked the token
                limits.wake(get_redis(), lab_id)
            return fn(lab_id, *a, **kw)

        return wrapper

    return deco
