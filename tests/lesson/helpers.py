"""Small helpers the chapter files share: events by type, waiting on the event stream, page text."""

from __future__ import annotations

import html
import re
import time


def events_of(api, lab: dict, type_: str) -> list[dict]:
    return [e for e in api.events(lab) if e["type"] == type_]


def wait_event(api, lab: dict, type_: str, timeout: float = 60, count: int = 1, where=None) -> list[dict]:
    """Wait until `count` events of `type_` (matching `where`) are in the lab's stream; return them."""
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in events_of(api, lab, type_) if where is None or where(e)]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            last = [e["type"] for e in api.events(lab)][-15:]
            raise AssertionError(f"{count}× {type_} not seen; last events: {last}")
        time.sleep(0.05)


def page_text(api, number: int) -> str:
    """A chapter page as plain text (tags dropped, entities decoded, whitespace folded)."""
    res = api.call("GET", f"/chapters/{number}")
    assert res.status == 200
    text = re.sub(r"<[^>]+>", " ", res.body.decode())
    return re.sub(r"\s+", " ", html.unescape(text))


def page_html(api, number: int) -> str:
    res = api.call("GET", f"/chapters/{number}")
    assert res.status == 200
    return res.body.decode()


def num(x: float, digits: int = 0) -> str:
    """The pages' number format (app.filters.num)."""
    return f"{x:,.{digits}f}"
