"""page: chapter page bytes transferred and time to the first live event, in real Chromium.

For each chapter, a cold browser context opens the page; an init script notes (capture phase on
document) when the widget hands its first pushed event to the page (`lab:event`) and which lab it
opened. Bytes are what Chromium reports per response (headers + body as transferred).
The floor is the same lab's path without a browser: POST /api/labs from Python, then a blocking
XREAD on the lab's stream until its first event (worker start-up is most of both figures).
Also per chapter: first contentful paint (vs the FCP of a one-paragraph page served by the same
app: the browser's own floor), cold bytes (navigation + resources transferSize, compressed as sent;
goal ≤ 150 kB) and a warm reload in the same context (goal ≤ 30 kB: fingerprinted files come from
the cache without a request; the floor is the HTML document alone).
RATIO = browser time-to-first-event ÷ floor, median over chapters.
"""

from __future__ import annotations

import time

from bench.common import Bench, median, report, rnd
from runtime.harness.browser import chromium_launch_args

NAME = "page"
CHAPTERS = range(9)
SETTLE_S = 4.0  # real seconds between chapters: > SPARE_REFILL_S + a spare's start
INIT = """
window.__awl = {};
document.addEventListener('lab:ready', (e) => { window.__awl.lab = e.detail.lab; }, true);
document.addEventListener('lab:event', () => {
  if (window.__awl.first == null) window.__awl.first = performance.now();
}, true);
"""


BYTES = """() => { const n = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  return {total: n.transferSize + res.reduce((a, r) => a + r.transferSize, 0), doc: n.transferSize,
          fcp: (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime,
          fetched: res.filter(r => r.transferSize > 0).length}; }"""


def fcp_floor(b: Bench, browser) -> float:
    """FCP of a bare page from the same server (the healthz JSON rendered as text), cold context."""
    ctx = browser.new_context()
    page = ctx.new_page()
    page.goto(f"{b.stack.url}/healthz", wait_until="load")
    page.wait_for_timeout(100)
    fcp = page.evaluate("() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime")
    ctx.close()
    return fcp or float("nan")


def floor_s(b: Bench, preset: str) -> float:
    t0 = time.monotonic()
    lab = b.lab(preset, speed=20)
    try:
        b.wait_event(lab, "0", lambda ev: True, 60)
        return time.monotonic() - t0
    finally:
        b.delete_lab(lab)


def run(b: Bench) -> dict:
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(**chromium_launch_args())
        try:
            fcp_floors = [fcp_floor(b, browser) for _ in range(3)]
            fcp_base = median(fcp_floors)
            for n in CHAPTERS:
                # a settled box, as a learner finds it: the last chapter's labs gone, the host's spare
                # workers started again (workers/spare.py)
                time.sleep(SETTLE_S)
                ctx = browser.new_context()
                ctx.add_init_script(INIT)
                page = ctx.new_page()
                responses = []
                page.on("requestfinished", lambda req, out=responses: out.append(req))
                page.goto(f"{b.stack.url}/chapters/{n}", wait_until="load")
                page.wait_for_function("() => window.__awl.first != null", timeout=60_000)
                nav = page.evaluate("""() => { const n = performance.getEntriesByType('navigation')[0];
                    return {dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd, first: window.__awl.first,
                            lab: window.__awl.lab}; }""")
                sizes = [req.sizes() for req in responses]
                cold = page.evaluate(BYTES)
                page.reload(wait_until="load")
                page.wait_for_timeout(300)
                warm = page.evaluate(BYTES)
                lab = nav["lab"]
                preset = b.r.hget(f"lab:{lab['id']}:meta", "preset") or f"ch{n}"
                b.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"], expect=(204, 404))
                ctx.close()
                floor = floor_s(b, preset)
                first_s = nav["first"] / 1000
                rows.append(
                    {
                        "chapter": n,
                        "preset": preset,
                        "requests": len(sizes),
                        "kb": rnd(sum(s["responseBodySize"] + s["responseHeadersSize"] for s in sizes) / 1024, 1),
                        "cold_kb": rnd(cold["total"] / 1024, 1),
                        "fcp_ms": rnd(cold["fcp"], 0),
                        "fcp_floor_ms": rnd(fcp_base, 0),
                        "fcp_vs_floor": rnd(cold["fcp"] / fcp_base, 2),
                        "warm_kb": rnd(warm["total"] / 1024, 1),
                        "warm_requests": warm["fetched"],
                        "warm_floor_kb": rnd(warm["doc"] / 1024, 1),
                        "dcl_ms": rnd(nav["dcl"], 0),
                        "load_ms": rnd(nav["load"], 0),
                        "first_event_ms": rnd(nav["first"], 0),
                        "floor_ms": rnd(floor * 1000, 0),
                        "vs_floor": rnd(first_s / floor, 2),
                    }
                )
                print(
                    f"  chapter {n}: cold {rows[-1]['cold_kb']} kB, FCP {rows[-1]['fcp_ms']} ms "
                    f"(floor {rows[-1]['fcp_floor_ms']}), first event {rows[-1]['first_event_ms']} ms "
                    f"(floor {rows[-1]['floor_ms']} ms), warm reload {rows[-1]['warm_kb']} kB",
                    flush=True,
                )
        finally:
            browser.close()
    ratio = median([r["vs_floor"] for r in rows])
    return report(
        NAME,
        "chapter page bytes and time to the first live event (Chromium) vs API + XREAD",
        [
            "chapter",
            "preset",
            "requests",
            "cold_kb",
            "fcp_ms",
            "fcp_vs_floor",
            "first_event_ms",
            "floor_ms",
            "vs_floor",
            "warm_kb",
            "warm_floor_kb",
            "warm_requests",
        ],
        rows,
        {
            "label": "time to first live event in Chromium ÷ POST /api/labs → first XREAD event",
            "value": ratio,
            "baseline": "the same preset's lab created over HTTP from Python, first event read "
            "from the stream with XREAD BLOCK, in the same run",
            "cold_kb_median": median([r["cold_kb"] for r in rows]),
            "cold_kb_max": max(r["cold_kb"] for r in rows),
            "fcp_ms_median": median([r["fcp_ms"] for r in rows]),
            "fcp_floor_ms": rnd(fcp_base, 0),
            "first_event_ms_median": median([r["first_event_ms"] for r in rows]),
            "warm_kb_max": max(r["warm_kb"] for r in rows),
            "goals": "cold ≤ 150 kB, FCP ≤ 250 ms, first event ≤ 400 ms (issue 28), warm reload ≤ 30 kB",
        },
        {"chapters": list(CHAPTERS), "speed_floor": 20},
        [
            "cold_kb/warm_kb = navigation + resource transferSize (compressed, as sent; 0 for a cache hit); "
            "warm = reload in the same context; warm_floor_kb = the HTML document alone",
            "kb = headers + body as Playwright reports them (uncompressed body sizes), cold context",
            "first_event_ms is from navigation start: HTML, CSS, JS, /api/meta, POST /api/labs, the WebSocket "
            "and the first event the lab's workers emit",
        ],
    )
