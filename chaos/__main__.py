"""`python -m chaos [NAME …]`: run the drills, print each verdict and a table, exit 1 if any failed."""

from __future__ import annotations

import importlib
import json
import signal
import sys
import time
import traceback

from chaos import DRILLS
from chaos.common import OUT, Result


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through each drill's `with Stack`, which stops its processes


def run_one(name: str) -> Result:
    module = importlib.import_module(f"chaos.{name}")
    t0 = time.monotonic()
    try:
        res = module.run()
    except Exception as e:  # noqa: BLE001 - a drill that crashes is a failed drill, and the next one still runs
        res = Result(name, getattr(module, "INVARIANT", ""))
        res.violations.append(f"the drill itself failed: {type(e).__name__}: {e}")
        res.details["traceback"] = traceback.format_exc()[-4000:]
        res.seconds = time.monotonic() - t0
    res.write()
    return res


def table(results: list[Result]) -> str:
    rows = [("drill", "result", "time", "counts")]
    for r in results:
        rows.append(
            (
                r.name,
                "PASS" if r.ok else "FAIL",
                f"{r.seconds:.0f} s",
                " ".join(f"{k}={v}" for k, v in r.counts.items()),
            )
        )
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{a:<{w[0]}}  {b:<{w[1]}}  {c:>{w[2]}}  {d}" for a, b, c, d in rows]
    lines.insert(1, "-" * min(120, max(len(x) for x in lines)))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    names = list(argv) or list(DRILLS)
    unknown = [n for n in names if n not in DRILLS]
    if unknown or any(n in ("-h", "--help") for n in names):
        print(f"usage: python -m chaos [{' | '.join(DRILLS)}] …", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    results = []
    t0 = time.monotonic()
    for name in names:
        print(f"\n== {name}", flush=True)
        res = run_one(name)
        print(res.summary(), flush=True)
        results.append(res)
    print(f"\n{table(results)}")
    failed = [r.name for r in results if not r.ok]
    print(
        f"\nchaos: {len(results) - len(failed)}/{len(results)} drills passed in {time.monotonic() - t0:.0f} s; "
        f"JSON in {OUT}" + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    path = OUT / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        summary = {}
    summary.update(
        {r.name: {"ok": r.ok, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "counts": r.counts} for r in results}
    )
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
