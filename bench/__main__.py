"""`python -m bench` runs every benchmark; `python -m bench NAME [NAME …]` runs some.

The stack is started once and stopped at the end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import importlib
import signal
import sys
import time
import traceback

from bench.common import OUT, Bench
from bench.common import stack as bench_stack

BENCHMARKS = (
    "throughput",
    "redelivery",
    "latency",
    "transcode",
    "page",
    "littles",
    "schedule",
    "fairness",
    "status",
    "cost",
    "sandbox",
    "challenge",
)
ON_DEMAND = ("classroom", "parked", "term")  # minutes each (multi-host stacks, labs run to the end, a class's day)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    names = list(argv) or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS + ON_DEMAND]
    if unknown or any(n in ("-h", "--help") for n in names):
        print(f"usage: python -m bench [{' | '.join(BENCHMARKS + ON_DEMAND)}] …", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    t0 = time.monotonic()
    stack = bench_stack()
    failed: list[str] = []
    try:
        stack.start()
        print(
            f"bench: stack up in {stack.started_s:.1f} s (valkey {stack.redis_url}, web {stack.url}, "
            "gevent web worker)",
            flush=True,
        )
        for name in names:
            module = importlib.import_module(f"bench.{name}")
            b = Bench(stack)
            t = time.monotonic()
            try:
                module.run(b)
            except Exception:  # noqa: BLE001 - report, keep going with the next benchmark
                failed.append(name)
                traceback.print_exc()
            finally:
                b.close()
            print(f"  ({name}: {time.monotonic() - t:.1f} s)", flush=True)
            if not stack.alive():
                print("bench: a stack process died; stopping", file=sys.stderr)
                failed.extend(n for n in names[names.index(name) + 1 :])
                break
    finally:
        stack.stop()
    print(
        f"\nbench: {len(names) - len(failed)}/{len(names)} ok in {time.monotonic() - t0:.0f} s; "
        f"JSON in {OUT}" + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
