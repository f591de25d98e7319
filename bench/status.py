"""status: chapter 3's five status watchers, run for real in Chromium on the same jobs.

The chapter 3 page's add-on uploads JOBS jobs to a ch3 lab at the lesson's demo speed (20x) and watches
them with plain polling and ETag polling every P real seconds (fetch loops), one long-poll for all of
them, the widget's WebSocket and signed webhooks to the lab's built-in receiver. The table is what the
page measured per method; `server_*` columns are the same requests as the status endpoint tallied them.
RATIO = plain-polling requests per job ÷ the model's W/P for this run (W measured from the events).
"""

from __future__ import annotations

import re

from bench.common import Bench, report, rnd
from runtime.harness.browser import chromium_launch_args

NAME = "status"
JOBS, SPEED, INTERVAL_S = 10, 20, 2.0
METHODS = ("poll", "etag", "long", "ws", "hook")
READ = """() => {
  const out = {};
  for (const tr of document.querySelectorAll('#ch3-lab tr[data-method]')) {
    const cell = (c) => tr.querySelector(`[data-c="${c}"]`).textContent;
    out[tr.dataset.method] = {requests: cell('requests'), not_modified: cell('notModified'), bytes: cell('bytes'),
      learned: cell('learned'), mean_ms: cell('mean'), worst_ms: cell('worst'), per_job: cell('perJob')};
  }
  out.round = document.querySelector('[data-role="round"]').textContent;
  out.lab = JSON.parse(localStorage.getItem('awl:lab:ch3'));
  return out;
}"""


def num(text: str) -> float | None:
    m = re.match(r"[\d,.]+", text.strip())
    return float(m.group().replace(",", "")) if m else None


def run(b: Bench) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(**chromium_launch_args())
        try:
            page = browser.new_page()
            page.goto(f"{b.stack.url}/chapters/3?speed={SPEED}")
            page.wait_for_selector('#ch3-lab[data-state="ready"]', timeout=60_000)
            page.wait_for_function(
                "() => document.querySelector('[data-role=\"hook-state\"]').textContent.startsWith('registered')",
                timeout=30_000,
            )
            page.fill("#ch3-jobs", str(JOBS))
            page.fill("#ch3-interval", str(INTERVAL_S))
            page.click('[data-role="start"]')
            page.wait_for_selector('#ch3-lab[data-learned-all="true"]', timeout=600_000)
            seen = page.evaluate(READ)
        finally:
            browser.close()
    lab = seen["lab"]
    load = b.call("GET", f"/api/labs/{lab['id']}/status-load", token=lab["token"])
    b.call("DELETE", f"/api/labs/{lab['id']}", token=lab["token"], expect=(204, 404))
    w = num(seen["round"].split("W ≈ ")[1]) if "W ≈ " in seen["round"] else None
    rows = []
    for m in METHODS:
        s = seen[m]
        server = load["clients"].get(m, {})
        rows.append(
            {
                "method": m,
                "requests": num(s["requests"]) if m != "ws" else 0,
                "not_modified": num(s["not_modified"]),
                "bytes": num(s["bytes"]),
                "per_job": num(s["per_job"]),
                "mean_delay_ms": num(s["mean_ms"]),
                "worst_delay_ms": num(s["worst_ms"]),
                "learned": s["learned"],
                "server_requests": server.get("requests"),
                "server_304": server.get("not_modified"),
                "server_body_bytes": server.get("bytes"),
            }
        )
        print(f"  {m}: {s}", flush=True)
    poll = rows[0]
    model = w / INTERVAL_S if w else None
    return report(
        NAME,
        f"{JOBS} jobs watched five ways in Chromium at {SPEED}x, polling every {INTERVAL_S:g} s",
        [
            "method",
            "requests",
            "not_modified",
            "bytes",
            "per_job",
            "mean_delay_ms",
            "worst_delay_ms",
            "learned",
            "server_requests",
            "server_304",
            "server_body_bytes",
        ],
        rows,
        {
            "label": "plain-polling requests per job ÷ the model's W/P",
            "value": rnd(poll["per_job"] / model, 2) if model else None,
            "baseline": f"W = {w} s measured from the job events (upload → done), P = {INTERVAL_S:g} s",
        },
        {"jobs": JOBS, "speed": SPEED, "interval_s": INTERVAL_S, "w_s": w},
        [
            "bytes = response headers as fetch exposes them + bodies (WebSocket: event JSON; webhook: bodies)",
            "delays are from each job's completion event (server t_real) to the client knowing, on the server's "
            "clock (the page aligns its clock from the quickest status answer); webhook delays are the receiver's",
            "the long-poll is one held request for all the page's jobs (a browser has six connections per host)",
        ],
    )
