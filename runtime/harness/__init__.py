"""The harness: what the tests, the benchmarks and the fault drills all run the lab with — the one stack
(stack.py), its HTTP client (client.py), a stack of several pool hosts (hosts.py) with CPU budgets
(cpuquota.py) or in network namespaces (netns.py), a drill's stack and WebSocket tail (drill.py), the
browser's launch arguments (browser.py), percentiles (stats.py), and a server's traffic recorded and replayed
at scale (replay.py; command_log.py records which commands each role sends). Entry points stay in runtime/;
the tests, bench/ and chaos/ import this package and never each other."""
